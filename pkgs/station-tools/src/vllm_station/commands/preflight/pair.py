"""Two-station preflight checks (group "pair"; they run when the config has a `pair` section).

- `rail-link`     the rail interface exists and is up (`/sys/class/net/<iface>/operstate`)
- `rail-mtu`      its MTU is 9000 (WARN otherwise: RoCE runs, slower and with smaller RDMA MTU)
- `rdma-device`   the RDMA device exists (`/sys/class/infiniband/<hca>`), port 1 ACTIVE, and it is the
                  HCA of the rail interface
- `rdma-gid`      the configured GID index exists on port 1, is non-zero, is RoCE v2, belongs to the
                  rail interface and carries this station's rail address
- `rail-peer`     the peer answers on the rail: TCP connect from our rail address to the peer's
                  beacon (`pair.beaconPort`, or the port of `pair.peerStampUrl`) or its masterPort
                  (refused = answered, nothing listening yet: WARN; no answer or no route: FAIL)
- `memlock`       RLIMIT_MEMLOCK is unlimited (RDMA registers GPU/host memory; it fails without it)
- `pair-revision` both stations' verify stamps name the same repo, revision and files; the peer's
                  stamp comes from `pair.peerStampUrl` (http(s) URL, `file://` URL or a path) —
                  docs/pair.md describes how the peer publishes it
- `pair-workers`  after the unit is active: NVML's compute processes on this station's GPU(s) are the
                  vLLM worker of THIS station's rank (`VLLM::Worker_TP<rank>`, from /proc/<pid>/cmdline),
                  holding memory; FAIL for the other rank's worker here or one process holding the
                  weights of both ranks; SKIP while no vLLM worker runs

Every check reads sysfs/procfs under `ctx.root`, so tests run against prepared trees.
"""

from __future__ import annotations

import errno
import ipaddress
import re
import resource
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

from vllm_station import bounded
from vllm_station.api.transport import SyncHttp
from vllm_station.checkpoint.stamp import STAMP_NAME, Stamp, StampError, StampMissing, read_stamp
from vllm_station.commands.preflight.checks import nvml_report
from vllm_station.commands.preflight.core import (
    CheckFn,
    CheckResult,
    Context,
    GiB,
    PairConfig,
    SkipCheck,
    check,
)
from vllm_station.host.nvml import GpuProcess, NvmlUnavailable
from vllm_station.status import Status

EXPECTED_MTU = 9000
PEER_CONNECT_TIMEOUT_S = 2.0
PEER_STAMP_TIMEOUT_S = 3.0
ROCE_V2 = "RoCE v2"
NET_DIR = "sys/class/net"
IB_DIR = "sys/class/infiniband"
PORT = "1"  # each ConnectX rail HCA is a single-port PCI function: NCCL_IB_HCA=mlx5_1 means port 1


# --- config helpers ------------------------------------------------------------------------------


def _pair(ctx: Context) -> PairConfig:
    pair = ctx.config.pair
    if pair is None:  # the runner does not call pair checks without a pair; be safe when called directly
        raise SkipCheck("no pair configured (config 'pair' is null)")
    return pair


def _pair_raw(ctx: Context) -> dict[str, Any]:
    raw = ctx.config.raw.get("pair")
    return raw if isinstance(raw, dict) else {}


def _expected_mtu(ctx: Context) -> int:
    value = _pair_raw(ctx).get("mtu", EXPECTED_MTU)
    return value if isinstance(value, int) and not isinstance(value, bool) else EXPECTED_MTU


def _addresses(pair: PairConfig) -> tuple[str | None, str | None]:
    """(this station's rail address, the peer's) by role."""
    if pair.role == "worker":
        return pair.worker_address, pair.head_address
    return pair.head_address, pair.worker_address


def _missing(name: str, option: str, what: str) -> CheckResult:
    return CheckResult(
        name,
        Status.FAIL,
        f"pair.{option} is not set: {what}",
        fix=f"set services.vllm-station.pair.{option} (the preflight config key pair.{option})",
    )


class _NotSet(Exception):
    """A setting the check needs is not in the config: the check's FAIL names the option (`_missing`)."""

    def __init__(self, option: str, what: str) -> None:
        super().__init__(option)
        self.option, self.what = option, what


RAIL_INTERFACE = ("railInterface", "which interface carries the RoCE rail")
RAIL_HCA = ("railHca", "which RDMA device (NCCL_IB_HCA) serves the rail")


def _need(value: str | None, setting: tuple[str, str]) -> str:
    """`value`, or the check's FAIL naming the option `setting` = (option, what it says) when unset."""
    if not value:
        raise _NotSet(*setting)
    return value


PairCheckFn = Callable[[Context, PairConfig], CheckResult]


def pair_check(name: str, description: str) -> Callable[[PairCheckFn], CheckFn]:
    """Register a check of group "pair" that reads the pair's config: it gets it as its second argument,
    and a setting it needs (`_need`) that is not set is its FAIL naming the option."""

    def register(fn: PairCheckFn) -> CheckFn:
        def run(ctx: Context) -> CheckResult:
            try:
                return fn(ctx, _pair(ctx))
            except _NotSet as unset:
                return _missing(name, unset.option, unset.what)

        run.__name__, run.__doc__ = fn.__name__, fn.__doc__
        return check(name, group="pair", description=description)(run)

    return register


class _Verdicts:
    """One check's results with its name and threshold said once: `verdict(Status.WARN, figure, fix,
    details)` is `CheckResult(name, Status.WARN, figure, threshold, fix, details)`."""

    def __init__(self, name: str, threshold: str | None) -> None:
        self.name, self.threshold = name, threshold

    def __call__(
        self, status: Status, figure: str, fix: str | None = None, details: dict[str, Any] | None = None
    ) -> CheckResult:
        return CheckResult(self.name, status, figure, self.threshold, fix, {} if details is None else details)


def _read(path: Path) -> str | None:
    """A sysfs file's stripped text; None when missing; OSError text for unreadable (e.g. EINVAL)."""
    try:
        return bounded.read_text(path, limit=bounded.SYSFS_LIMIT, encoding="ascii", errors="replace").strip()
    except FileNotFoundError:
        return None


def _listing(directory: Path) -> list[str]:
    try:
        return sorted(p.name for p in directory.iterdir())
    except OSError:
        return []


# --- rail interface ------------------------------------------------------------------------------


@pair_check("rail-link", "the rail interface exists and is up (operstate)")
def rail_link(ctx: Context, pair: PairConfig) -> CheckResult:
    iface = _need(pair.rail_interface, RAIL_INTERFACE)
    directory = ctx.root / NET_DIR / iface
    threshold = "operstate up"
    if not directory.is_dir():
        present = [n for n in _listing(ctx.root / NET_DIR) if n != "lo"]
        return CheckResult(
            "rail-link",
            Status.FAIL,
            f"rail interface {iface} does not exist (interfaces: {', '.join(present) or 'none'})",
            threshold,
            "check pair.railInterface against `ip -br link` (ConnectX-8 rails are named like cx8r1 "
            "by the host's udev/systemd-networkd rules)",
            {"interface": iface, "present": present},
        )
    state = _read(directory / "operstate")
    details: dict[str, Any] = {"interface": iface, "operstate": state}
    speed = _safe_read(directory / "speed")
    if speed and speed.lstrip("-").isdigit() and int(speed) > 0:
        details["speed_mbps"] = int(speed)
    if state == "up":
        rate = f", {details['speed_mbps'] // 1000} Gb/s" if "speed_mbps" in details else ""
        return CheckResult("rail-link", Status.PASS, f"{iface} up{rate}", threshold, details=details)
    if state == "unknown":
        return CheckResult(
            "rail-link",
            Status.WARN,
            f"{iface} operstate 'unknown' (the driver does not report link state)",
            threshold,
            f"confirm the link with `ip link show {iface}` and `ibv_devinfo` (state PORT_ACTIVE)",
            details,
        )
    return CheckResult(
        "rail-link",
        Status.FAIL,
        f"{iface} is {state or 'in no readable state'} (operstate)",
        threshold,
        f"bring the rail up (`ip link set {iface} up`; check the cable/transceiver and the switch "
        "port) and make the network config persistent",
        details,
    )


def _safe_read(path: Path) -> str | None:
    try:
        return _read(path)
    except OSError:  # speed of a down link reads EINVAL
        return None


@pair_check("rail-mtu", "the rail interface's MTU is 9000 (WARN otherwise)")
def rail_mtu(ctx: Context, pair: PairConfig) -> CheckResult:
    iface = _need(pair.rail_interface, RAIL_INTERFACE)
    expected = _expected_mtu(ctx)
    threshold = f"MTU {expected}"
    directory = ctx.root / NET_DIR / iface
    if not directory.is_dir():
        raise SkipCheck(f"rail interface {iface} does not exist (see rail-link)")
    text = _read(directory / "mtu")
    if text is None or not text.isdigit():
        return CheckResult(
            "rail-mtu",
            Status.FAIL,
            f"cannot read the MTU of {iface}: {directory / 'mtu'} is "
            f"{'missing' if text is None else repr(text)}",
            threshold,
            "check that /sys is mounted and --root points at the host's root",
        )
    mtu = int(text)
    details = {"interface": iface, "mtu": mtu, "expected": expected}
    if mtu == expected:
        return CheckResult("rail-mtu", Status.PASS, f"{iface} MTU {mtu}", threshold, details=details)
    return CheckResult(
        "rail-mtu",
        Status.WARN,
        f"{iface} MTU {mtu}, {expected} expected: RoCE works but with a smaller path MTU and lower bandwidth",
        threshold,
        f"set the MTU to {expected} on both stations and the switch ports "
        f"(networking.interfaces.{iface}.mtu = {expected}; now: `ip link set {iface} mtu {expected}`)",
        details,
    )


# --- RDMA device and GID ---------------------------------------------------------------------------


def _port_dir(ctx: Context, hca: str) -> Path:
    return ctx.root / IB_DIR / hca / "ports" / PORT


@pair_check("rdma-device", "the RDMA device exists, port 1 ACTIVE, it is the rail's HCA")
def rdma_device(ctx: Context, pair: PairConfig) -> CheckResult:
    hca = _need(pair.rail_hca, RAIL_HCA)
    threshold = f"/{IB_DIR}/{hca} present, port {PORT} ACTIVE"
    directory = ctx.root / IB_DIR / hca
    if not directory.is_dir():
        present = _listing(ctx.root / IB_DIR)
        why = (
            f"RDMA devices present: {', '.join(present)}"
            if present
            else f"no RDMA device at all (/{IB_DIR} is empty or missing)"
        )
        return CheckResult(
            "rdma-device",
            Status.FAIL,
            f"RDMA device {hca} not found; {why}",
            threshold,
            "check pair.railHca against `ibv_devices` / `rdma link` (the HCA whose netdev is the rail); "
            "with no device at all, load the mlx5_ib driver (boot.kernelModules) and check the firmware",
            {"hca": hca, "present": present},
        )
    state = _read(_port_dir(ctx, hca) / "state")
    link_layer = _read(_port_dir(ctx, hca) / "link_layer")
    netdevs = _listing(directory / "device" / "net")
    details: dict[str, Any] = {"hca": hca, "port_state": state, "link_layer": link_layer, "netdevs": netdevs}
    if state is None or not state.endswith("ACTIVE"):
        return CheckResult(
            "rdma-device",
            Status.FAIL,
            f"{hca} port {PORT} is {state or 'missing'} (not ACTIVE)",
            threshold,
            f"the RDMA port follows the link: bring {pair.rail_interface or 'the rail'} up, check the cable "
            "and the switch port, then `ibv_devinfo -d " + hca + "` must show PORT_ACTIVE",
            details,
        )
    figure = f"{hca} port {PORT} ACTIVE, link layer {link_layer or 'unknown'}"
    if pair.rail_interface and netdevs and pair.rail_interface not in netdevs:
        return CheckResult(
            "rdma-device",
            Status.WARN,
            f"{figure}, but its netdev is {', '.join(netdevs)}, not the rail {pair.rail_interface}",
            threshold,
            "pair.railHca and pair.railInterface must name the same port: pick the HCA listed by "
            f"`ls /sys/class/net/{pair.rail_interface}/device/infiniband`",
            details,
        )
    if netdevs:
        figure += f", netdev {', '.join(netdevs)}"
    return CheckResult("rdma-device", Status.PASS, figure, threshold, details=details)


def _gid_address(gid: str) -> ipaddress.IPv6Address | None:
    try:
        return ipaddress.IPv6Address(gid)
    except ValueError:
        return None


def _gid_type(path: Path) -> str | None:
    try:
        return _read(path)
    except OSError:  # the kernel answers EINVAL for an unpopulated slot
        return None


def _matching_indices(ctx: Context, hca: str, local: str | None, iface: str | None) -> list[int]:
    """GID indices on port 1 that are RoCE v2 and carry `local` (IPv4-mapped or IPv6) — the fix to suggest."""
    if not local:
        return []
    try:
        want = ipaddress.ip_address(local)
    except ValueError:
        return []
    port = _port_dir(ctx, hca)
    found = []
    for name in _listing(port / "gids"):
        if not name.isdigit():
            continue
        addr = _gid_address(_safe_read(port / "gids" / name) or "")
        if addr is None:
            continue
        mapped = addr.ipv4_mapped if isinstance(want, ipaddress.IPv4Address) else addr
        if mapped != want or _gid_type(port / "gid_attrs" / "types" / name) != ROCE_V2:
            continue
        ndev = _safe_read(port / "gid_attrs" / "ndevs" / name)
        if iface and ndev and ndev != iface:
            continue
        found.append(int(name))
    return sorted(found)


@pair_check("rdma-gid", "the configured GID index exists, is RoCE v2, carries the rail address")
def rdma_gid(ctx: Context, pair: PairConfig) -> CheckResult:
    hca = _need(pair.rail_hca, RAIL_HCA)
    index = pair.gid_index
    local, _ = _addresses(pair)
    port = _port_dir(ctx, hca)
    threshold = f"gids/{index} non-zero, type {ROCE_V2}" + (f", address {local}" if local else "")
    if not (ctx.root / IB_DIR / hca).is_dir():
        raise SkipCheck(f"RDMA device {hca} not found (see rdma-device)")
    if (_read(port / "link_layer") or "").lower() == "infiniband":
        return CheckResult(
            "rdma-gid",
            Status.PASS,
            f"{hca} port {PORT} is InfiniBand: RoCE GID types do not apply (gidIndex {index} unused)",
            threshold,
        )
    matches = _matching_indices(ctx, hca, local, pair.rail_interface)
    suggestion = (
        f"use gidIndex {matches[0]} (RoCE v2 with {local} on {hca})"
        if matches
        else f"assign the rail address to {pair.rail_interface or 'the rail'} first; then pick the "
        f"index where `show_gids` / gid_attrs/types shows {ROCE_V2} with that address"
    )
    fix = f"{suggestion}: services.vllm-station.pair.gidIndex (NCCL_IB_GID_INDEX)"
    details: dict[str, Any] = {"hca": hca, "gid_index": index, "roce_v2_indices_with_address": matches}
    gid = _safe_read(port / "gids" / str(index))
    if gid is None:
        entries = [n for n in _listing(port / "gids") if n.isdigit()]
        return CheckResult(
            "rdma-gid",
            Status.FAIL,
            f"GID index {index} does not exist on {hca} port {PORT} (table has {len(entries)} entries)",
            threshold,
            fix,
            details,
        )
    details["gid"] = gid
    addr = _gid_address(gid)
    if addr is None or int(addr) == 0:
        return CheckResult(
            "rdma-gid",
            Status.FAIL,
            f"GID index {index} on {hca} is empty ({gid}): no address behind it",
            threshold,
            fix,
            details,
        )
    kind = _gid_type(port / "gid_attrs" / "types" / str(index))
    details["type"] = kind
    if kind != ROCE_V2:
        return CheckResult(
            "rdma-gid",
            Status.FAIL,
            f"GID index {index} on {hca} is {kind or 'of no readable type'}, not {ROCE_V2} "
            "(RoCE v1 does not route over the rail's IP network)",
            threshold,
            fix,
            details,
        )
    ndev = _safe_read(port / "gid_attrs" / "ndevs" / str(index))
    details["ndev"] = ndev
    shown = str(addr.ipv4_mapped or addr)
    details["address"] = shown
    problems = []
    if pair.rail_interface and ndev and ndev != pair.rail_interface:
        problems.append(f"it belongs to {ndev}, not the rail {pair.rail_interface}")
    if local and _differs(addr, local):
        problems.append(f"it carries {shown}, not this station's rail address {local}")
    figure = f"{hca} GID index {index}: {ROCE_V2}, {shown}" + (f" on {ndev}" if ndev else "")
    if problems:
        return CheckResult(
            "rdma-gid", Status.FAIL, f"{figure}; but {' and '.join(problems)}", threshold, fix, details
        )
    return CheckResult("rdma-gid", Status.PASS, figure, threshold, details=details)


def _differs(addr: ipaddress.IPv6Address, local: str) -> bool:
    try:
        want = ipaddress.ip_address(local)
    except ValueError:
        return False  # a host name: nothing to compare
    have: ipaddress.IPv4Address | ipaddress.IPv6Address = addr.ipv4_mapped or addr
    return have != want


# --- peer reachability ---------------------------------------------------------------------------


def _probe_port(ctx: Context, pair: PairConfig, peer: str) -> tuple[int, str]:
    """The peer port to probe. The pair beacon's is best: open to us in the peer's firewall and
    listening while the peer serves (the worker's masterPort is neither). Taken from `pair.beaconPort`,
    else from `pair.peerStampUrl` when that URL points at the peer with a port (the beacon serves
    /stamp), else the rendezvous `masterPort`."""
    beacon = _pair_raw(ctx).get("beaconPort")
    if isinstance(beacon, int) and not isinstance(beacon, bool) and 0 < beacon < 65536:
        return beacon, "beaconPort"
    if pair.peer_stamp_url:
        url = urlparse(pair.peer_stamp_url)
        try:
            port = url.port
        except ValueError:
            port = None
        if url.scheme in ("http", "https") and url.hostname == peer.strip("[]") and port:
            return port, "peerStampUrl port"
    return pair.master_port, "masterPort"


def _peer_timeout(ctx: Context) -> float:
    value = _pair_raw(ctx).get("peerTimeoutSeconds", PEER_CONNECT_TIMEOUT_S)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    return float(value) if ok else PEER_CONNECT_TIMEOUT_S


@pair_check("rail-peer", "the peer answers on the rail (TCP to its beaconPort or masterPort)")
def rail_peer(ctx: Context, pair: PairConfig) -> CheckResult:
    local, peer = _addresses(pair)
    peer_option = "workerAddress" if pair.role != "worker" else "headAddress"
    peer = _need(peer, (peer_option, "the peer station's rail address"))
    port, port_name = _probe_port(ctx, pair, peer)
    timeout = _peer_timeout(ctx)
    threshold = f"TCP {peer}:{port} ({port_name}) answers within {timeout:g} s" + (
        f" from {local}" if local else ""
    )
    details: dict[str, Any] = {
        "local": local,
        "peer": peer,
        "port": port,
        "port_name": port_name,
        "timeout_s": timeout,
    }
    try:
        conn = socket.create_connection(
            (peer, port), timeout=timeout, source_address=(local, 0) if local else None
        )
    except TimeoutError:
        details["outcome"] = "timeout"
        return CheckResult(
            "rail-peer",
            Status.FAIL,
            f"no answer from {peer}:{port} within {timeout:g} s: the peer is down, not on this rail, "
            "or a firewall drops the packets",
            threshold,
            f"check the peer is powered and its rail is up (`station preflight --only rail-link` there), "
            f"`ping -I {pair.rail_interface or '<rail>'} {peer}`, and that both firewalls allow the rail "
            "addresses (services.vllm-station.pair opens them to the peer only)",
            details,
        )
    except OSError as err:
        details["outcome"] = errno.errorcode.get(err.errno or 0, "error")
        if err.errno == errno.ECONNREFUSED:
            return CheckResult(
                "rail-peer",
                Status.WARN,
                f"{peer} answered on the rail but refused port {port}: nothing listens there yet "
                "(expected on the worker before the head starts: the worker starts first)",
                threshold,
                "none on the worker before the head's first start; on the head, start the worker first "
                f"(`systemctl start vllm-station` on {peer}) and check the {port_name} on both stations",
                details,
            )
        if err.errno == errno.EADDRNOTAVAIL and local:
            return CheckResult(
                "rail-peer",
                Status.FAIL,
                f"this station's rail address {local} is not configured on this host",
                threshold,
                f"assign {local} to {pair.rail_interface or 'the rail interface'} (networking.interfaces."
                f"{pair.rail_interface or '<rail>'}.ipv4.addresses) or fix pair.{_local_option(pair)}",
                details,
            )
        return CheckResult(
            "rail-peer",
            Status.FAIL,
            f"cannot reach {peer}:{port} from {local or 'this host'}: {err.strerror or err}",
            threshold,
            f"check the route to {peer} goes over {pair.rail_interface or 'the rail'} "
            f"(`ip route get {peer}`) and both stations' rail addresses",
            details,
        )
    with conn:
        details["outcome"] = "connected"
        return CheckResult(
            "rail-peer",
            Status.PASS,
            f"{peer}:{port} accepts connections" + (f" from {local}" if local else ""),
            threshold,
            details=details,
        )


def _local_option(pair: PairConfig) -> str:
    return "workerAddress" if pair.role == "worker" else "headAddress"


# --- memlock -------------------------------------------------------------------------------------


def _parse_limits(text: str) -> tuple[str, str] | None:
    """The soft and hard `Max locked memory` values from /proc/<pid>/limits text."""
    for line in text.splitlines():
        if line.startswith("Max locked memory"):
            parts = line[len("Max locked memory") :].split()
            if len(parts) >= 2:
                return parts[0], parts[1]
    return None


def _fmt_limit(value: str) -> str:
    if value.isdigit():
        n = int(value)
        return f"{n // 1024**2} MiB" if n >= 1024**2 else f"{n} bytes"
    return value


@check("memlock", group="pair", description="RLIMIT_MEMLOCK is unlimited (RDMA registers memory)")
def memlock(ctx: Context) -> CheckResult:
    threshold = "soft limit unlimited"
    if ctx.live:
        soft_n, hard_n = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        inf = resource.RLIM_INFINITY
        soft = "unlimited" if soft_n == inf else str(soft_n)
        hard = "unlimited" if hard_n == inf else str(hard_n)
        source = "getrlimit(RLIMIT_MEMLOCK) of this process"
    else:
        path = ctx.root / "proc/self/limits"
        text = _read(path)
        parsed = _parse_limits(text) if text is not None else None
        if parsed is None:
            raise SkipCheck(
                f"{path} {'is missing' if text is None else 'has no Max locked memory line'}",
                fix="write the limits file into the prepared root, or run against the live host (--root /)",
            )
        soft, hard = parsed
        source = str(path)
    details = {"soft": soft, "hard": hard, "source": source}
    if soft == "unlimited":
        return CheckResult("memlock", Status.PASS, "locked memory unlimited", threshold, details=details)
    return CheckResult(
        "memlock",
        Status.FAIL,
        f"locked memory limited to {_fmt_limit(soft)} (hard {_fmt_limit(hard)}): RDMA memory registration "
        "fails and NCCL falls back or aborts",
        threshold,
        "the serving unit needs LimitMEMLOCK=infinity (services.vllm-station.pair sets it) and the container "
        "`--ulimit memlock=-1`; this figure is the limit of the process that ran preflight — run it in the "
        "unit (ExecStartPre) to see the unit's",
        details,
    )


# --- both stations at the same revision ----------------------------------------------------------


class PeerUnreachable(ValueError):
    """The peer's stamp publisher did not answer at all (refused, timeout, no route)."""


def fetch_peer_stamp(ctx: Context, source: str, timeout: float = PEER_STAMP_TIMEOUT_S) -> Stamp:
    """The peer's verify stamp from an http(s) URL, a file:// URL or a path. ValueError names the problem."""
    parsed = urlparse(source)
    if parsed.scheme in ("http", "https"):
        try:
            with SyncHttp() as http:
                status, body = http.fetch("GET", source, timeout=timeout, limit=bounded.CONFIG_LIMIT)
        except httpx.TimeoutException as err:
            raise PeerUnreachable(f"{source} did not answer within {timeout:g} s") from err
        except httpx.TransportError as err:
            raise PeerUnreachable(f"cannot reach {source}: {err}") from err
        except httpx.HTTPError as err:  # also a redirect (not followed) and an answer over the limit
            raise ValueError(f"cannot fetch {source}: {err}") from err
        text = body.decode("utf-8", errors="replace")
        if status != 200:
            raise ValueError(f"{source} answered HTTP {status}: {text[:120]!r}")
        try:
            data = bounded.loads_json(body)
        except ValueError as err:  # not UTF-8, not JSON, or nested too deep
            raise ValueError(f"{source} did not return JSON: {text[:80]!r}") from err
        return _check_stamp(data, source)
    if parsed.scheme == "file":
        path = ctx.host_path(parsed.path)
    elif parsed.scheme == "":
        path = ctx.host_path(source)
    else:
        raise ValueError(f"unsupported peerStampUrl scheme {parsed.scheme!r} (http, https, file or a path)")
    try:
        return read_stamp(path)
    except StampMissing as err:
        raise ValueError(f"{err.path} does not exist") from err
    except StampError as err:
        raise ValueError(f"{err.path} unreadable: {err.problem}") from err


def _check_stamp(data: Any, where: str) -> Stamp:
    try:
        return Stamp.from_json(data, where)
    except StampError as err:
        raise ValueError(f"{where} is not a version-1 verify stamp ({err.problem})") from err


def _stamp_summary(stamp: Stamp) -> dict[str, Any]:
    return {
        "repo": stamp.repo,
        "revision": stamp.revision,
        "verified_at": stamp.verified_at,
        "sha256_checked": stamp.sha256_checked,
    }


def _short(rev: Any) -> str:
    return rev[:12] if isinstance(rev, str) else str(rev)


@pair_check("pair-revision", "both stations verified the same repo, revision and files")
def pair_revision(ctx: Context, pair: PairConfig) -> CheckResult:
    cfg = ctx.config
    if cfg.model_dir is None:
        raise SkipCheck(
            "modelDir not set: no local checkpoint whose stamp could be compared with the peer's",
            fix="download to a directory (`station download … --dir DIR`) and set modelDir on both stations",
        )
    if not pair.peer_stamp_url:
        raise SkipCheck(
            "pair.peerStampUrl not set: the peer's verify stamp cannot be fetched",
            fix="set services.vllm-station.pair.peerStampUrl (docs/pair.md: the peer publishes its stamp "
            "read-only on its rail address, or copy it to a local path)",
        )
    threshold = "same repo, revision and file sizes on both stations" + (
        f"; revision {cfg.revision}" if cfg.revision else ""
    )
    local_path = ctx.host_path(cfg.model_dir) / STAMP_NAME
    try:
        local = read_stamp(local_path)
    except StampMissing:
        return CheckResult(
            "pair-revision",
            Status.FAIL,
            f"no verify stamp here ({local_path}): this station's checkpoint was never verified",
            threshold,
            f"run `station verify {cfg.model_dir}` on this station",
        )
    except StampError as err:
        return CheckResult(
            "pair-revision",
            Status.FAIL,
            f"local stamp {err.path} unreadable: {err.problem}",
            threshold,
            f"run `station verify {cfg.model_dir}` again",
        )
    try:
        peer = fetch_peer_stamp(ctx, pair.peer_stamp_url)
    except PeerUnreachable as err:
        if pair.role == "worker":  # the worker starts first; the head compares both stamps at its start
            return CheckResult(
                "pair-revision",
                Status.WARN,
                f"the head's stamp is not reachable yet ({err}); "
                "the head compares both stamps when it starts",
                threshold,
                "none before the head's first start; later, check the head's beacon and pair.peerStampUrl",
                {"peer_stamp_url": pair.peer_stamp_url},
            )
        return CheckResult(
            "pair-revision",
            Status.FAIL,
            f"cannot read the worker's stamp: {err}",
            threshold,
            "start the worker first (its beacon serves the stamp while it runs) and check pair.peerStampUrl",
            {"peer_stamp_url": pair.peer_stamp_url},
        )
    except ValueError as err:
        return CheckResult(
            "pair-revision",
            Status.FAIL,
            f"cannot read the peer's stamp: {err}",
            threshold,
            "on the peer: `station verify <modelDir>` and check the stamp publisher (docs/pair.md); "
            "check pair.peerStampUrl",
            {"peer_stamp_url": pair.peer_stamp_url},
        )
    details: dict[str, Any] = {
        "local": _stamp_summary(local),
        "peer": _stamp_summary(peer),
        "peer_stamp_url": pair.peer_stamp_url,
    }
    resync = (
        "copy the checkpoint from station A again: on station B, `systemctl start "
        "vllm-station-download-<name>` (its `copyFrom` runs `station copy`, which verifies and stamps), "
        "or by hand `station copy rsync://A:8730/<name> --dir DIR --revision REV`"
    )
    if local.repo != peer.repo:
        return CheckResult(
            "pair-revision",
            Status.FAIL,
            f"different models: here {local.repo}, peer {peer.repo}",
            threshold,
            resync,
            details,
        )
    lrev, prev = local.revision, peer.revision
    if lrev != prev:
        return CheckResult(
            "pair-revision",
            Status.FAIL,
            f"revision mismatch: here {_short(lrev)}, peer {_short(prev)} — "
            "the ranks would load different weights",
            threshold,
            resync,
            details,
        )
    if cfg.revision and lrev != cfg.revision:
        return CheckResult(
            "pair-revision",
            Status.FAIL,
            f"both stations verified {_short(lrev)}, but the configured revision is {_short(cfg.revision)}",
            threshold,
            f"download revision {cfg.revision} on station A, sync it to B, verify both",
            details,
        )
    lfiles, pfiles = local.file_sizes(), peer.file_sizes()
    only_here = sorted(set(lfiles) - set(pfiles))
    only_peer = sorted(set(pfiles) - set(lfiles))
    sizes = sorted(p for p in set(lfiles) & set(pfiles) if lfiles[p] != pfiles[p])
    if only_here or only_peer or sizes:
        details.update(only_here=only_here, only_peer=only_peer, size_differs=sizes)
        parts = [
            f"{len(only_here)} file(s) only here" if only_here else "",
            f"{len(only_peer)} only on the peer" if only_peer else "",
            f"{len(sizes)} differ in size" if sizes else "",
        ]
        example = (only_here + only_peer + sizes)[0]
        return CheckResult(
            "pair-revision",
            Status.FAIL,
            f"same revision {_short(lrev)} but different files: {', '.join(p for p in parts if p)} "
            f"(e.g. {example}) — an incomplete sync?",
            threshold,
            resync,
            details,
        )
    figure = f"both stations verified {local.repo}@{_short(lrev)}, {len(lfiles)} files, same sizes"
    if lrev is None:
        return CheckResult(
            "pair-revision",
            Status.WARN,
            f"{figure}, but neither stamp names a revision",
            threshold,
            "download with --revision (a 40-hex commit) so both stations can prove the same weights",
            details,
        )
    return CheckResult("pair-revision", Status.PASS, figure, threshold, details=details)


# --- pair-workers: the right vLLM worker on this station's GPU --------------------------------------

# vLLM's process titles (`setproctitle(f"{VLLM_PROCESS_NAME_PREFIX}::{name}")`, vllm/utils/system_utils.py):
# a multiprocess worker is `VLLM::Worker[_DPd][_PPd][_PCPd][_TPd][_DCPd][_EPd]` once its parallel groups
# exist (vllm/v1/executor/multiproc_executor.py); with `--nnodes 2`, one GPU per station, its TP rank is
# the station's `--node-rank`. `VLLM::EngineCore` holds the GPU itself only with TP 1 (no worker
# processes). The kernel cuts `comm` at 15 characters ("VLLM::Worker_TP"): the rank is in the cmdline.
_VLLM_TITLE = re.compile(r"(?P<title>\S*::(?:Worker|EngineCore)\S*)")
_TITLE_TP = re.compile(r"_TP(?P<rank>\d+)(?![0-9])")
WORKER_MIN_BYTES = 1 * GiB  # less is a CUDA context, not weights
RUN_AFTER_START = "run after the unit is active: station preflight --only pair-workers"


def _vllm_title(p: GpuProcess) -> tuple[str | None, bool]:
    """The vLLM process title and whether it is whole: from the cmdline, else from comm (whole only when
    shorter than the kernel's 15 characters). (None, False): not a vLLM process."""
    if m := _VLLM_TITLE.search(p.cmdline):
        return m["title"], True
    if m := _VLLM_TITLE.search(p.name):
        return m["title"], len(p.name) < 15
    return None, False


def _holds(p: GpuProcess) -> str:
    return f"{p.used_bytes / GiB:.1f} GiB" if p.used_bytes is not None else "an unknown amount"


@pair_check("pair-workers", "the vLLM worker of this station's rank holds this GPU")
def pair_workers(ctx: Context, pair: PairConfig) -> CheckResult:
    rank = pair.rank
    want = f"VLLM::Worker_TP{rank}"
    station = f"this station is rank {rank} ({pair.role})"
    threshold = f"a {want} process holds >= {WORKER_MIN_BYTES // GiB} GiB here; no other rank's worker"
    try:
        report = nvml_report(ctx)
    except NvmlUnavailable as err:
        raise SkipCheck(
            f"no NVML: {err}",
            fix="on a GPU host: install the NVIDIA driver (libnvidia-ml.so) and nvidia-ml-py",
        ) from err
    rows: list[dict[str, Any]] = []
    gpus_of: dict[int, set[int]] = {}
    for g in report.gpus:
        for p in g.processes:
            if p.kind != "compute":
                continue
            title, whole = _vllm_title(p)
            if title is None and not p.is_vllm:
                continue
            m = _TITLE_TP.search(title or "")
            role = "worker" if title and "::Worker" in title else "engine" if title else "other"
            if not whole and m is None:
                role = "unknown"  # comm cut the rank off and the cmdline is unreadable, or no title at all
            rows.append(
                {
                    "gpu": g.index,
                    "pid": p.pid,
                    "title": title or p.name,
                    "role": role,
                    "tp_rank": int(m["rank"]) if m else None,
                    "used_bytes": p.used_bytes,
                    "holds_weights": p.used_bytes is None or p.used_bytes >= WORKER_MIN_BYTES,
                    "text": f"{title or p.name or '?'} (pid {p.pid}) holds {_holds(p)} on GPU{g.index}",
                }
            )
            if p.used_bytes is None or p.used_bytes >= WORKER_MIN_BYTES:
                gpus_of.setdefault(p.pid, set()).add(g.index)
    details: dict[str, Any] = {"rank": rank, "role": pair.role, "processes": rows}
    verdict = _Verdicts("pair-workers", threshold)

    def listed(found: list[dict[str, Any]]) -> str:
        return "; ".join(r["text"] for r in found)

    holding = [r for r in rows if r["holds_weights"]]
    if not rows:
        raise SkipCheck(
            f"no vLLM process holds a GPU here yet ({len(report.gpus)} GPU(s) seen); {RUN_AFTER_START}",
            details=details,
        )
    workers = [r for r in holding if r["role"] == "worker"]
    wrong = [r for r in workers if r["tp_rank"] is not None and r["tp_rank"] != rank]
    if wrong:
        return verdict(
            Status.FAIL,
            listed(wrong) + f", but {station}: the other rank's worker runs here",
            "the stations' ranks are swapped or both run one rank: check services.vllm-station.pair.role "
            "on both stations (vLLM's --node-rank follows it) and restart the worker, then the head",
            details,
        )
    both = [pid for pid, gpus in gpus_of.items() if len(gpus) > 1]
    untitled = [r for r in holding if r["tp_rank"] is None and r["role"] in ("worker", "engine")]
    if both or untitled:
        culprits = [r for r in holding if r["pid"] in both] or untitled
        return verdict(
            Status.FAIL,
            listed(culprits)
            + ": one process holds the weights of both ranks (vLLM runs with tensor parallel size 1"
            + (" across GPUs" if both else ", its title names no TP rank")
            + f"), but {station} of a TP-2 pair",
            "start vLLM with --tensor-parallel-size 2 --nnodes 2 (services.vllm-station.pair on both "
            "stations); `station weights-check` then shows about half the checkpoint per rank",
            details,
        )
    ours = [r for r in workers if r["tp_rank"] == rank]
    if len(ours) == 1:
        figure = f"{ours[0]['text']}; {station}"
        return verdict(Status.PASS, figure, details=details)
    if len(ours) > 1:
        return verdict(
            Status.WARN,
            listed(ours) + f": {len(ours)} processes of rank {rank} hold memory",
            "a leftover worker of an earlier start? stop the unit, `kill` the pid that is not the unit's, "
            "start again",
            details,
        )
    small = [r for r in rows if r["role"] == "worker" and r["tp_rank"] == rank]
    if small:
        return verdict(
            Status.WARN,
            listed(small) + f": under {WORKER_MIN_BYTES // GiB} GiB, the weights are not loaded yet",
            f"loading takes minutes: {RUN_AFTER_START} again once the unit is active",
            details,
        )
    unknown = [r for r in holding if r["tp_rank"] is None]
    if unknown:
        return verdict(
            Status.WARN,
            listed(unknown)
            + f": no TP rank readable in its title (is /proc/<pid>/cmdline readable?), {station}",
            f"check with `nvidia-smi`: the process should be named {want}",
            details,
        )
    raise SkipCheck(
        f"no vLLM worker holds a GPU here yet ({listed(rows)}); {RUN_AFTER_START}",
        details=details,
    )
