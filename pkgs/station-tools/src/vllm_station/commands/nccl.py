"""`station nccl-check`: classify the NCCL transport between the two stations from NCCL's log lines.

NCCL (with `NCCL_DEBUG=INFO`) prints which network it picked and how every channel connects::

    host:12:34 [0] NCCL INFO NET/IB : Using [0]mlx5_1:1/RoCE [RO]; OOB cx8r1:10.0.0.1<0>
    host:12:34 [0] NCCL INFO Using network IB
    host:12:40 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
    host:12:40 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1

The verdict (docs/nccl-check.md lists every recognised line and where NCCL prints it):

- PASS    GPUDirect RDMA over IB/RoCE: every network channel `via NET/IB…/GDRDMA`.
- WARN    IB/RoCE without GPUDirect RDMA: a `via NET/IB/<n>` channel without `/GDRDMA` (data is
          staged through host memory). `--require-gdr` turns this into a FAIL.
- FAIL    socket fallback (`via NET/Socket/<n>` or `Using network Socket`): the pair would serve
          ~10× slower; or an IB/RDMA/GID error (`NCCL WARN Call to ibv_modify_qp failed …`).
- PENDING no transport line yet (NCCL has not connected, or `NCCL_DEBUG=INFO` is not set).

Exit codes (the family in `vllm_station.errors`): 0 PASS or WARN, 1 FAIL, 2 bad arguments, 3 the log
could not be read (missing file, no journalctl, no permission), 4 PENDING (0 with `--pending-ok`).
`--wait SECONDS` polls until the verdict is final or the time is up.

The classifier (`Scanner`) is pure: lines in, `NcclReport` out; the CLI adapter reads the sources.
"""

from __future__ import annotations

import argparse
import enum
import logging
import os
import re
import selectors
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from vllm_station import bounded, options, polling, textfile
from vllm_station.errors import EXIT_FAIL, EXIT_OK, EXIT_PENDING, UsageError
from vllm_station.host.journal import decode, log_reader
from vllm_station.report import dump_json
from vllm_station.status import Status

log = logging.getLogger(__name__)

SOCKET_FALLBACK = "socket fallback: the pair would serve ~10× slower"
MAX_EVIDENCE = 12


class Transport(enum.StrEnum):
    IB_GDRDMA = "ib-gdrdma"  # GPUDirect RDMA over InfiniBand / RoCE
    IB = "ib"  # InfiniBand / RoCE, data staged through host memory
    SOCKET = "socket"  # TCP sockets
    OTHER = "other"  # a network plugin this tool does not know
    LOCAL = "local"  # no channel crosses the network: every rank on one station (P2P/SHM)


# --- NCCL's line formats (see docs/nccl-check.md for the source of each) ----------------------------

# `INFO(NCCL_INIT|NCCL_NET, "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s", …)`
# (src/transport/net.cc); NCCL <= 2.11 printed "Channel 00 : 0[1b000] -> 1[1b000] …" (bus ids).
_CHANNEL = re.compile(
    r"\bChannel\s+\d+(?:/\d+)?\s*:\s*\d+\[[0-9a-fA-Fx]+\]\s*->\s*\d+\[[0-9a-fA-Fx]+\]"
    r"(?:\s*\[(?P<dir>send|receive)\])?\s+via\s+(?P<via>\S+)"
)
# `INFO(NCCL_INIT, "Using network %s", comm->ncclNet->name)` (src/init.cc)
_USING_NETWORK = re.compile(r"\bNCCL INFO Using network (?P<name>\S+)")
# `INFO(…, "NET/IB : Using%s %s; OOB %s:%s", line, "[RO]"|"", ifName, addr)` (src/transport/net_ib/init.cc)
_NET_IB_USING = re.compile(r"\bNET/IB\s*:\s*Using(?P<devs>[^;]*);\s*OOB\s+(?P<oob>\S+)")
_IB_DEV = re.compile(r"\[\d+\](?P<dev>[^\s\[;]+)")
# `INFO(…, "NET/Socket : Using%s", line)` with " [%d]%s:%s" per interface (src/transport/net_socket.cc)
_NET_SOCKET_USING = re.compile(r"\bNET/Socket\s*:\s*Using(?P<devs>.*)$")
# `INFO(NCCL_NET, "NET/%s : GPU Direct RDMA %s for HCA %d '%s'", …)` (src/graph/topo.cc)
_GDR_HCA = re.compile(r"\bGPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<idx>\d+) '(?P<name>[^']*)'")
# `INFO(NCCL_INIT, "Connected all rings, use ring PXN %d GDR %d", …)` (src/transport/generic.cc);
# NCCL <= 2.18 printed just "Connected all rings".
# `INFO(NCCL_INIT, "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d", …)`
# (src/init.cc)
_NNODES = re.compile(r"\bnRanks \d+ nNodes (?P<nodes>\d+)\b")
_CONNECTED = re.compile(r"\bConnected all rings(?:, use ring PXN \d+ GDR (?P<gdr>\d))?")
_NCCL_VERSION = re.compile(r"\bNCCL version (?P<version>\d+\.\d+\.\d+\S*)")
_NCCL_LINE = re.compile(r"\bNCCL (?:INFO|WARN|TRACE)\b|\bNCCL version \d")
_NCCL_WARN = re.compile(r"\bNCCL WARN\b\s*(?P<msg>.*)$")
# WARN lines that are about the IB/RoCE path (ibvwrap.cc, net_ib/*.cc): a failed connection over the rail.
_IB_ERROR = re.compile(r"ibv_|NET/IB|\bGID\b|\bgid\b|RoCE|mlx5|\bIB\b|completion from peer", re.IGNORECASE)
# Fatal NCCL errors reported by PyTorch / vLLM (no NCCL WARN prefix).
_FATAL = re.compile(r"\bNCCL error\b|\bncclSystemError\b|\bncclRemoteError\b|\bncclInternalError\b")
_GID_HINT = re.compile(r"\bGID index\b|NCCL_IB_GID_INDEX", re.IGNORECASE)
# Informational causes worth showing next to a socket fallback.
_CAUSES = re.compile(
    r"NET/IB\s*:\s*No device found|NCCL_IB_DISABLE set by environment to 1|NET/IB\s*:\s*No IP interface found"
    r"|Failed to initialize NET plugin IB"
)
_PLUGIN = re.compile(r"\bNET/Plugin\s*:?\s*(?P<msg>.*)$")


@dataclass
class Channels:
    """How many network channel connections (send and receive lines) NCCL reported, by transport."""

    gdrdma: int = 0
    ib: int = 0
    socket: int = 0
    other: int = 0
    local: int = 0  # P2P/SHM inside one station: not the rail

    @property
    def total(self) -> int:
        """Channels over the network (the rail)."""
        return self.gdrdma + self.ib + self.socket + self.other


@dataclass
class NcclReport:
    """The verdict. JSON keys are stable (documented in docs/nccl-check.md)."""

    status: Status
    transport: Transport | None
    summary: str
    fix: str | None
    confirmed: bool  # "Connected all rings" seen: the connections were established, not only set up
    network: str | None  # the `Using network X` name
    nodes: int | None  # the largest `nNodes` of any communicator (2 for the pair)
    nccl_version: str | None
    ib_devices: list[str]
    oob: str | None
    socket_devices: list[str]
    gdr_hcas: dict[str, bool]
    channels: Channels
    errors: list[str]
    hints: list[str]  # NCCL's own HINT lines next to an error (e.g. about NCCL_IB_GID_INDEX)
    warnings: list[str]
    causes: list[str]
    evidence: list[str]
    lines_read: int
    nccl_lines: int
    source: str
    exit_code: int = 0

    @property
    def final(self) -> bool:
        """True when more log lines would not change the verdict (what `--wait` waits for)."""
        if self.status is Status.FAIL:
            return True
        if self.transport is Transport.LOCAL:  # a two-station communicator may still come
            return False
        return self.status in (Status.PASS, Status.WARN) and self.confirmed


@dataclass
class Scanner:
    """Feed NCCL log lines, get a report. Lines may carry any prefix (journald, docker, vLLM's
    `(VllmWorker rank=0 pid=…)`): the formats are searched, not anchored."""

    lines_read: int = 0
    nccl_lines: int = 0
    network: str | None = None
    nodes: int | None = None
    nccl_version: str | None = None
    ib_devices: list[str] = field(default_factory=list)
    oob: str | None = None
    socket_devices: list[str] = field(default_factory=list)
    gdr_hcas: dict[str, bool] = field(default_factory=dict)
    channels: Channels = field(default_factory=Channels)
    other_nets: list[str] = field(default_factory=list)
    confirmed: bool = False
    errors: list[str] = field(default_factory=list)
    gid_hints: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)

    def feed_text(self, text: str) -> None:
        for line in text.splitlines():
            self.feed(line)

    def feed(self, raw: str) -> None:
        line = raw.rstrip("\r\n").replace("\x00", "")
        self.lines_read += 1
        if not _NCCL_LINE.search(line) and not _FATAL.search(line) and "via NET/" not in line:
            return
        self.nccl_lines += 1
        if m := _NCCL_VERSION.search(line):
            self.nccl_version = self.nccl_version or m["version"]
        if m := _NCCL_WARN.search(line):
            msg = line.strip()
            if _IB_ERROR.search(m["msg"]):
                _add(self.errors, msg)
            else:
                _add(self.warnings, msg)
            return
        if _FATAL.search(line) and "NCCL INFO" not in line:
            _add(self.errors, line.strip())
            return
        if _GID_HINT.search(line) and "HINT" in line:
            _add(self.gid_hints, line.strip())
            return
        if m := _CHANNEL.search(line):
            self._channel(m["via"], line)
            return
        if m := _NNODES.search(line):
            self.nodes = max(self.nodes or 0, int(m["nodes"]))
            return
        if m := _USING_NETWORK.search(line):
            self.network = m["name"]
            self._evidence(line)
            return
        if m := _NET_IB_USING.search(line):
            for dev in _IB_DEV.finditer(m["devs"]):
                _add(self.ib_devices, dev["dev"])
            self.oob = m["oob"]
            self._evidence(line)
            return
        if m := _NET_SOCKET_USING.search(line):
            for dev in _IB_DEV.finditer(m["devs"]):
                _add(self.socket_devices, dev["dev"])
            return
        if m := _GDR_HCA.search(line):
            self.gdr_hcas[m["name"]] = m["state"] == "Enabled"
            self._evidence(line)
            return
        if _CONNECTED.search(line):
            self.confirmed = True
            self._evidence(line)
            return
        if _CAUSES.search(line):
            _add(self.causes, line.strip())
            return
        if _PLUGIN.search(line):
            self._evidence(line)

    def _channel(self, via: str, line: str) -> None:
        if not via.startswith("NET/"):
            if via.startswith(("P2P/", "SHM/")):
                self.channels.local += 1  # inside one station, not the rail
            return
        name = via.split("/")[1] if via.count("/") >= 1 else ""
        gdr = "/GDRDMA" in via
        if name.lower().startswith("ib"):  # IB, IBext, IBext_v8 (nccl-rdma-sharp-plugins)
            if gdr:
                self.channels.gdrdma += 1
            else:
                self.channels.ib += 1
        elif name == "Socket":
            self.channels.socket += 1
        else:
            self.channels.other += 1
            _add(self.other_nets, name)
        self._evidence(line)

    def _evidence(self, line: str) -> None:
        if len(self.evidence) < MAX_EVIDENCE:
            _add(self.evidence, line.strip())

    def report(self, source: str, require_gdr: bool = False) -> NcclReport:
        status, transport, summary, fix = self._verdict()
        if status is Status.WARN and require_gdr:
            status = Status.FAIL
            summary += " (--require-gdr)"
        code = {
            Status.PASS: EXIT_OK,
            Status.WARN: EXIT_OK,
            Status.FAIL: EXIT_FAIL,
            Status.PENDING: EXIT_PENDING,
        }[status]
        return NcclReport(
            status=status,
            transport=transport,
            summary=summary,
            fix=fix,
            confirmed=self.confirmed,
            network=self.network,
            nodes=self.nodes,
            nccl_version=self.nccl_version,
            ib_devices=list(self.ib_devices),
            oob=self.oob,
            socket_devices=list(self.socket_devices),
            gdr_hcas=dict(self.gdr_hcas),
            channels=Channels(**vars(self.channels)),
            errors=list(self.errors),
            hints=list(self.gid_hints) if self.errors else [],
            warnings=list(self.warnings),
            causes=list(self.causes),
            evidence=list(self.evidence),
            lines_read=self.lines_read,
            nccl_lines=self.nccl_lines,
            source=source,
            exit_code=code,
        )

    def _transport(self) -> Transport | None:
        ch = self.channels
        if ch.socket:
            return Transport.SOCKET
        if ch.ib:
            return Transport.IB
        if ch.other:
            return Transport.OTHER
        if ch.gdrdma:
            return Transport.IB_GDRDMA
        if ch.local or self.nodes == 1:  # one station: the network plugin is picked but never used
            return Transport.LOCAL
        if (self.network or "").lower() == "socket":  # picked before any channel connects: decisive
            return Transport.SOCKET
        return None

    def _verdict(self) -> tuple[Status, Transport | None, str, str | None]:
        transport = self._transport()
        ch = self.channels
        devices = ", ".join(self.ib_devices) or "no IB device line seen"
        if self.errors:
            gid = any(_GID_HINT.search(e) or "Invalid argument" in e for e in self.errors + self.gid_hints)
            fix = (
                "the configured GID index is wrong for this port: check pair.gidIndex / NCCL_IB_GID_INDEX "
                "against /sys/class/infiniband/<hca>/ports/1/gid_attrs/types/<i> (it must be 'RoCE v2' and "
                "carry the rail address) — `station preflight --only rdma-gid`"
                if gid
                else "check the rail on both stations (`station preflight --only pair`), the peer's journal, "
                "and that both use the same GID type, MTU and NCCL_IB_HCA; "
                "then restart the worker, then the head"
            )
            return (
                Status.FAIL,
                transport,
                f"NCCL reported an RDMA/IB error: {_strip_prefix(self.errors[0])}",
                fix,
            )
        if transport is Transport.SOCKET:
            why = f" ({_strip_prefix(self.causes[0])})" if self.causes else ""
            fix = (
                "NCCL did not use the RoCE rail: check NCCL_IB_HCA names the rail HCA, "
                "NCCL_IB_DISABLE is unset, "
                "/dev/infiniband is visible in the container, LimitMEMLOCK=infinity, and "
                "`station preflight --only pair`; then restart the worker, then the head"
            )
            figure = (
                f"{ch.socket} channel(s) via NET/Socket" if ch.socket else f"Using network {self.network}"
            )
            return Status.FAIL, transport, f"{SOCKET_FALLBACK}: {figure}{why}", fix
        if transport is Transport.IB:
            disabled = [name for name, on in self.gdr_hcas.items() if not on]
            why = f"; GPU Direct RDMA disabled for HCA {', '.join(disabled)}" if disabled else ""
            return (
                Status.WARN,
                transport,
                f"IB/RoCE without GPUDirect RDMA: {ch.ib} of {ch.total} channel(s) via NET/IB without "
                f"/GDRDMA ({devices}){why}; data is staged through host memory",
                "load the nvidia-peermem kernel module (or use DMA-BUF with an open GPU driver), check "
                "NCCL_NET_GDR_LEVEL and that the GPU and the HCA share a PCIe/C2C path; "
                "then restart the pair",
            )
        if transport is Transport.IB_GDRDMA:
            tail = "" if self.confirmed else " (set up; 'Connected all rings' not seen yet)"
            return (
                Status.PASS,
                transport,
                f"GPUDirect RDMA over {_link_kind(self.ib_devices)} ({devices}): "
                f"{ch.gdrdma} channel(s) via NET/IB/…/GDRDMA{tail}",
                None,
            )
        if transport is Transport.LOCAL:
            return (
                Status.WARN,
                transport,
                f"no channel crosses the network: every rank is on one station ({ch.local} channel(s) "
                f"via P2P/SHM, nNodes {self.nodes or '?'}); this is not a two-station pair's log",
                "check the log is the pair's (vLLM with --nnodes 2, one rank per station) and that the "
                "worker joined; the network NCCL picked for it was " + (self.network or "not shown"),
            )
        if transport is Transport.OTHER:
            return (
                Status.WARN,
                transport,
                f"unrecognised NCCL network {', '.join(self.other_nets)}: {ch.other} channel(s); "
                "this tool knows IB/RoCE and Socket",
                "check the NCCL net plugin (NCCL_NET_PLUGIN) is the one you meant",
            )
        if self.network:
            return (
                Status.PENDING,
                None,
                f"NCCL picked network {self.network} ({devices}) but no channel has connected yet",
                "wait: channels connect at the first collective (vLLM runs one while starting)",
            )
        if self.nccl_lines == 0:
            return (
                Status.PENDING,
                None,
                f"no NCCL lines in {self.lines_read} line(s) read",
                "NCCL prints its transport only with NCCL_DEBUG=INFO in the serving environment "
                "(services.vllm-station.pair sets it); the lines appear once the ranks connect",
            )
        return (
            Status.PENDING,
            None,
            f"{self.nccl_lines} NCCL line(s), none naming the transport yet",
            "wait: channels connect at the first collective (vLLM runs one while starting)",
        )


def _add(items: list[str], item: str) -> None:
    if item not in items:
        items.append(item)


def _link_kind(devices: Iterable[str]) -> str:
    kinds = {d.rsplit("/", 1)[-1] for d in devices if "/" in d}
    if kinds == {"RoCE"}:
        return "RoCE"
    if kinds == {"IB"}:
        return "InfiniBand"
    return "IB/RoCE"


_PREFIX = re.compile(r"^.*?\bNCCL (?:WARN|INFO)\s+")


def _strip_prefix(line: str) -> str:
    """`host:1:2 [0] misc/ibvwrap.cc:376 NCCL WARN Call to …` → `Call to …`
    (the full line stays in `errors`)."""
    return _PREFIX.sub("", line, count=1)


def classify(text: str, source: str = "-", require_gdr: bool = False) -> NcclReport:
    """Classify a whole log text."""
    scanner = Scanner()
    scanner.feed_text(text)
    return scanner.report(source, require_gdr=require_gdr)


@dataclass
class Options:
    unit: str | None
    log_file: Path | None
    stdin: bool
    wait: float | None
    interval: float
    require_gdr: bool
    pending_ok: bool
    all_invocations: bool
    json: bool

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Options:
        sources = [args.unit is not None, args.log is not None, args.source == "-"]
        if args.source not in (None, "-"):
            raise UsageError(
                f"unexpected argument {args.source!r}: use --log FILE, --unit UNIT or - for stdin"
            )
        if sum(sources) != 1:
            raise UsageError("give exactly one source: --unit UNIT, --log FILE or - (stdin)")
        if args.wait is not None and args.wait < 0:
            raise UsageError("--wait must be >= 0 seconds")
        if args.interval <= 0:
            raise UsageError("--interval must be > 0 seconds")
        return cls(
            unit=args.unit,
            log_file=Path(args.log) if args.log is not None else None,
            stdin=args.source == "-",
            wait=args.wait,
            interval=args.interval,
            require_gdr=args.require_gdr,
            pending_ok=args.pending_ok,
            all_invocations=args.all_invocations,
            json=args.json,
        )


def poll(
    read: Callable[[], tuple[str, str]],
    wait: float | None,
    interval: float,
    require_gdr: bool,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> NcclReport:
    """Read and classify; with `wait`, re-read every `interval` s until the verdict is final or time is up."""

    def reading() -> NcclReport:
        text, label = read()
        return classify(text, label, require_gdr=require_gdr)

    latest = polling.poll_latest(
        reading, final=lambda r: r.final, wait_s=wait, interval_s=interval, clock=clock, sleep=sleep
    )
    return _timed_out(latest.value, latest.wait_s) if latest.timed_out else latest.value


def _timed_out(report: NcclReport, wait: float) -> NcclReport:
    if report.status is Status.PENDING:  # a PASS/WARN without "Connected all rings" stays as it is
        report.summary = polling.still_pending(report.summary, wait)
    return report


def stream(
    fh: BinaryIO, wait: float | None, require_gdr: bool, clock: Callable[[], float] = time.monotonic
) -> NcclReport:
    """Classify a stream (stdin) line by line; with `wait`, stop at a final verdict, EOF or the deadline."""
    scanner = Scanner()
    lines = bounded.LineSplitter()  # a line without end (/dev/zero) is cut, never buffered whole
    if wait is None:
        total = 0
        while chunk := fh.read(65536):
            for raw in lines.feed(chunk):
                scanner.feed(decode(raw))
            total += len(chunk)
            if total >= bounded.STREAM_LIMIT:
                log.warning("stdin: stopped after %d MiB", bounded.STREAM_LIMIT // bounded.MiB)
                break
        if rest := lines.flush():
            scanner.feed(decode(rest))
        return scanner.report("stdin", require_gdr=require_gdr)
    deadline = clock() + wait
    eof = False
    fd = fh.fileno()
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    try:
        while True:
            left = deadline - clock()
            if left <= 0:
                break
            if not sel.select(timeout=left):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                eof = True
                break
            for raw in lines.feed(chunk):
                scanner.feed(decode(raw))
            if scanner.report("stdin").final:
                return scanner.report("stdin", require_gdr=require_gdr)
    finally:
        sel.close()
    if rest := lines.flush():
        scanner.feed(decode(rest))
    report = scanner.report("stdin", require_gdr=require_gdr)
    if report.final or eof:
        return report
    return _timed_out(report, wait)


# --- CLI ------------------------------------------------------------------------------------------


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "exit: 0 PASS (GPUDirect RDMA) or WARN (IB without GDR); 1 FAIL (socket fallback, RDMA/GID "
        "error); 2 bad arguments; 3 the log could not be read; 4 PENDING (no transport line yet). "
        "See docs/nccl-check.md."
    )
    parser.add_argument("source", nargs="?", metavar="-", help="read the log from stdin")
    options.add_log_source(parser)
    options.add_log_wait(
        parser, until="the verdict is final (a FAIL, or PASS/WARN with 'Connected all rings')"
    )
    parser.add_argument(
        "--require-gdr",
        action="store_true",
        help="a WARN (IB without GPUDirect RDMA, unknown plugin, one station) is a FAIL",
    )
    parser.add_argument(
        "--pending-ok",
        action="store_true",
        help="no transport line yet (after --wait) exits 0 with a WARN line instead of 4",
    )
    options.add_all_invocations(parser)
    options.add_json(parser)


def run(args: argparse.Namespace) -> int:
    opts = Options.from_args(args)
    if opts.stdin:
        report = stream(sys.stdin.buffer, opts.wait, opts.require_gdr)
    else:
        read = log_reader(
            opts.unit, opts.log_file, all_invocations=opts.all_invocations, command="nccl-check", stdin=True
        )
        report = poll(read, opts.wait, opts.interval, opts.require_gdr)
    if report.status is Status.PENDING and opts.pending_ok:
        report.exit_code = EXIT_OK
    textfile.export_nccl_transport(report.status.value)  # for Prometheus, where monitoring is on
    if opts.json:
        dump_json(report)
    else:
        print(render(report))
    if report.status is Status.WARN or (report.status is Status.PENDING and opts.pending_ok):
        print(f"station nccl-check: WARN: {report.summary}", file=sys.stderr)
    return report.exit_code


def render(report: NcclReport) -> str:
    lines = [f"{report.status.value:<8}{report.summary}"]
    ch = report.channels
    lines.append(f"  source:    {report.source} ({report.lines_read} lines, {report.nccl_lines} NCCL lines)")
    if report.network or report.ib_devices:
        devices = ", ".join(report.ib_devices) or "-"
        lines.append(f"  network:   {report.network or '-'}; IB devices {devices}; OOB {report.oob or '-'}")
    if ch.total:
        lines.append(
            f"  channels:  {ch.gdrdma} GDRDMA, {ch.ib} IB without GDR, {ch.socket} socket, {ch.other} other"
        )
    if ch.local:
        lines.append(f"  local:     {ch.local} channel(s) via P2P/SHM inside one station")
    lines.append(f"  connected: {'yes' if report.confirmed else 'not yet'}")
    sections = (
        ("errors", report.errors),
        ("hints", report.hints),
        ("causes", report.causes),
        ("warnings", report.warnings),
    )
    for title, items in sections:
        if items:
            lines.append(f"  {title}:")
            lines.extend(f"    {item}" for item in items[:MAX_EVIDENCE])
    if report.status is not Status.FAIL and report.evidence:
        lines.append("  evidence:")
        lines.extend(f"    {item}" for item in report.evidence)
    if report.fix:
        lines.append(f"  fix:       {report.fix}")
    return "\n".join(lines)
