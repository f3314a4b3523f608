"""`station prestart` — runs before every start of the serving unit (`ExecStartPre=+…`).

1. `sync`, then write 1 to `<root>/proc/sys/vm/drop_caches` (unless `--no-drop`);
2. read FilePages of NUMA node `--gpu-node` (on a GB300 node 1 is the GPU's HBM) until it is at or
   below `--max-file-pages-gib` or `--settle-seconds` have passed. When GPU memory is not a NUMA node
   (no such node, or no memory-only node at all: the CDMM driver mode, the host module's default) say so
   out loud — `CDMM: GPU memory is not a NUMA node; the page-cache trap cannot occur` — and go on;
3. container backend: save `<runtime> logs <container>` to `<log-dir>/<container>-<UTC stamp>.log`
   (newest `--keep-logs` kept), then `<runtime> rm -f <container>`; no container is fine.

Exit 0 when the start may go on, 1 when page cache still sits in HBM above the threshold (after the logs
were saved — the previous run is never lost) or a step failed, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from vllm_station import argtypes, options, textfile
from vllm_station.errors import EXIT_FAIL, EXIT_OK, StationError, UsageError
from vllm_station.host import container as rt
from vllm_station.host.sysfs import (
    CDMM_MESSAGE,
    HostReadError,
    NodeNotFound,
    memory_only_nodes,
    node_dir,
    node_meminfo,
    numa_layout,
)

GiB = 1024**3
POLL_S = 0.1


@dataclass
class PrestartOptions:
    gpu_node: int = 1
    max_file_pages_gib: float = 4.0
    settle_seconds: float = 2.0
    drop: bool = True
    root: Path = Path("/")
    runtime: str = "none"
    container: str = "vllm-station"
    log_dir: Path = Path("/var/log/vllm-station")
    keep_logs: int = 20


@dataclass
class LogsReport:
    runtime: str
    container: str
    saved: str | None = None
    removed: bool = False
    pruned: list[str] = field(default_factory=list)
    message: str = ""


@dataclass
class PrestartReport:
    status: str  # ok | no-node (GPU memory is not a NUMA node: CDMM) | above-threshold | error
    node: int
    file_pages_bytes: int | None
    file_pages_gib: float | None
    threshold_gib: float
    dropped: bool
    waited_s: float
    message: str
    fix: str | None = None
    cdmm: bool = False  # GPU memory is not a NUMA node: nothing to check
    logs: LogsReport | None = None
    errors: list[str] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gpu-node",
        type=argtypes.count(lo=0, hi=1023),
        default=1,
        help="NUMA node holding the GPU memory (default 1)",
    )
    parser.add_argument(
        "--max-file-pages-gib",
        type=argtypes.number(float, lo=0.0, hi=1_000_000.0),
        default=4.0,
        help="refuse the start above this much page cache (GiB)",
    )
    parser.add_argument(
        "--settle-seconds",
        type=argtypes.seconds(zero_ok=True, hi=3600),
        default=2.0,
        help="wait up to this long after the drop (default 2)",
    )
    parser.add_argument("--no-drop", action="store_true", help="do not write drop_caches (read only)")
    parser.add_argument("--root", type=Path, default=Path("/"), help="filesystem root for /sys and /proc")
    parser.add_argument(
        "--runtime",
        default="none",
        help="docker, podman, an absolute path to one of them, or none (native backend; default)",
    )
    parser.add_argument("--container", default="vllm-station", help="container whose logs are kept")
    parser.add_argument("--log-dir", type=Path, default=Path("/var/log/vllm-station"))
    parser.add_argument(
        "--keep-logs",
        type=argtypes.count(hi=100_000),
        default=20,
        help="saved container logs to keep (default 20)",
    )
    options.add_json(parser)


def options_from_args(args: argparse.Namespace) -> PrestartOptions:
    if args.gpu_node < 0:
        raise UsageError(f"--gpu-node must be >= 0, got {args.gpu_node}")
    if args.max_file_pages_gib < 0:
        raise UsageError(f"--max-file-pages-gib must be >= 0, got {args.max_file_pages_gib}")
    if args.settle_seconds < 0:
        raise UsageError(f"--settle-seconds must be >= 0, got {args.settle_seconds}")
    if args.keep_logs < 1:
        raise UsageError(f"--keep-logs must be >= 1, got {args.keep_logs}")
    if args.runtime != "none":
        rt.runtime_name(args.runtime)  # a usage error names the accepted values
    if args.runtime != "none" and not args.container:
        raise UsageError("--container must not be empty")
    return PrestartOptions(
        gpu_node=args.gpu_node,
        max_file_pages_gib=args.max_file_pages_gib,
        settle_seconds=args.settle_seconds,
        drop=not args.no_drop,
        root=args.root,
        runtime=args.runtime,
        container=args.container,
        log_dir=args.log_dir,
        keep_logs=args.keep_logs,
    )


def drop_caches(root: Path) -> None:
    path = root / "proc/sys/vm/drop_caches"
    try:
        with path.open("w", encoding="ascii") as f:
            f.write("1\n")
    except PermissionError as err:
        raise StationError(
            f"cannot write {path}: permission denied; prestart must run privileged "
            "(systemd: ExecStartPre=+station prestart …), or pass --no-drop to only check"
        ) from err
    except OSError as err:
        raise StationError(f"cannot write {path}: {err.strerror or err}") from err


def read_file_pages(root: Path, node: int) -> int:
    info = node_meminfo(root, node)
    if "FilePages" not in info:
        raise HostReadError(node_dir(root, node) / "meminfo", "no FilePages line")
    return info["FilePages"]


def gpu_memory_not_numa(root: Path, node: int) -> str | None:
    """Why GPU memory is not a NUMA node here (CDMM), or None when `node` is a memory-only node or the
    layout cannot be read (the FilePages read then reports the problem)."""
    try:
        layout = numa_layout(root)
    except HostReadError:
        return None
    if node not in {n.node for n in layout}:
        return f"NUMA node {node} does not exist on this machine"
    if not memory_only_nodes(layout):
        return f"NUMA node {node} has CPUs and no NUMA node is memory-only"
    return None


def _cdmm_report(opts: PrestartOptions, reason: str) -> PrestartReport:
    return PrestartReport(
        status="no-node",
        node=opts.gpu_node,
        file_pages_bytes=None,
        file_pages_gib=None,
        threshold_gib=opts.max_file_pages_gib,
        dropped=opts.drop,
        waited_s=0.0,
        message=f"{CDMM_MESSAGE} ({reason})",
        cdmm=True,
    )


def check_page_cache(opts: PrestartOptions, timings: dict[str, float]) -> PrestartReport:
    t0 = time.perf_counter()
    os.sync()
    timings["sync"] = _ms(t0)
    if opts.drop:
        t1 = time.perf_counter()
        drop_caches(opts.root)
        timings["drop"] = _ms(t1)
    threshold = int(opts.max_file_pages_gib * GiB)
    t2 = time.perf_counter()
    reason = gpu_memory_not_numa(opts.root, opts.gpu_node)
    if reason is not None:
        timings["read"] = _ms(t2)
        return _cdmm_report(opts, reason)
    deadline = t2 + opts.settle_seconds
    try:
        pages = read_file_pages(opts.root, opts.gpu_node)
        while pages > threshold and opts.drop and time.perf_counter() < deadline:
            time.sleep(min(POLL_S, max(0.0, deadline - time.perf_counter())))
            pages = read_file_pages(opts.root, opts.gpu_node)
    except NodeNotFound as err:
        timings["read"] = _ms(t2)
        return _cdmm_report(opts, err.problem)
    except HostReadError as err:
        raise StationError(f"cannot read FilePages of NUMA node {opts.gpu_node}: {err}") from err
    waited = time.perf_counter() - t2
    timings["read"] = _ms(t2)
    gib = pages / GiB
    if pages > threshold:
        drop_note = (
            f"after a drop_caches and {opts.settle_seconds:g} s" if opts.drop else "(no drop: --no-drop)"
        )
        return PrestartReport(
            status="above-threshold",
            node=opts.gpu_node,
            file_pages_bytes=pages,
            file_pages_gib=round(gib, 3),
            threshold_gib=opts.max_file_pages_gib,
            dropped=opts.drop,
            waited_s=round(waited, 3),
            message=(
                f"page cache in HBM on NUMA node {opts.gpu_node}: FilePages {gib:.2f} GiB > "
                f"{opts.max_file_pages_gib:g} GiB {drop_note}; vLLM would see too little free GPU memory"
            ),
            fix=(
                "bind bulk file I/O (downloads, copies, rsync, backups) to node 0: "
                "`station numa-exec --membind 0 -- …`; find the writer "
                f"(grep FilePages /sys/devices/system/node/node{opts.gpu_node}/meminfo while it runs), "
                "then restart"
            ),
        )
    return PrestartReport(
        status="ok",
        node=opts.gpu_node,
        file_pages_bytes=pages,
        file_pages_gib=round(gib, 3),
        threshold_gib=opts.max_file_pages_gib,
        dropped=opts.drop,
        waited_s=round(waited, 3),
        message=f"NUMA node {opts.gpu_node} FilePages {gib:.2f} GiB <= {opts.max_file_pages_gib:g} GiB",
    )


def utc_stamp(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.UTC)
    return now.strftime("%Y%m%dT%H%M%SZ")


def log_path(log_dir: Path, container: str, stamp: str) -> Path:
    path = log_dir / f"{container}-{stamp}.log"
    n = 1
    while path.exists():  # two starts within one second keep both files
        path = log_dir / f"{container}-{stamp}-{n}.log"
        n += 1
    return path


def prune_logs(log_dir: Path, container: str, keep: int) -> list[str]:
    """Delete all but the newest `keep` saved logs of `container` (ordered by their UTC timestamp)."""
    pattern = re.compile(rf"^{re.escape(container)}-(\d{{8}}T\d{{6}}Z)(?:-(\d+))?\.log$")
    saved: list[tuple[str, int, Path]] = []
    for p in log_dir.iterdir():
        m = pattern.match(p.name)
        if m and p.is_file():
            saved.append((m.group(1), int(m.group(2) or 0), p))
    saved.sort()
    removed = []
    for _, _, old in saved[: max(0, len(saved) - keep)]:
        old.unlink(missing_ok=True)
        removed.append(str(old))
    return removed


def keep_container_logs(opts: PrestartOptions, timings: dict[str, float]) -> LogsReport:
    runtime = rt.resolve_runtime(opts.runtime)
    report = LogsReport(runtime=opts.runtime, container=opts.container)
    t0 = time.perf_counter()
    try:
        opts.log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StationError(f"cannot create log dir {opts.log_dir}: {err.strerror or err}") from err
    dest = log_path(opts.log_dir, opts.container, utc_stamp())
    if rt.save_logs(runtime, opts.container, dest):
        report.saved = str(dest)
        report.pruned = prune_logs(opts.log_dir, opts.container, opts.keep_logs)
        timings["logs"] = _ms(t0)
        t1 = time.perf_counter()
        report.removed = rt.remove_container(runtime, opts.container)
        timings["rm"] = _ms(t1)
        report.message = f"saved {opts.container} logs to {dest}; container removed"
    else:
        timings["logs"] = _ms(t0)
        t1 = time.perf_counter()
        report.removed = rt.remove_container(runtime, opts.container)
        timings["rm"] = _ms(t1)
        report.message = f"no previous container {opts.container!r}: no logs to keep"
    return report


def prestart(opts: PrestartOptions) -> PrestartReport:
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    report = check_page_cache(opts, timings)
    if opts.runtime != "none":
        # keep the previous run's logs even when the page-cache check refuses the start
        try:
            report.logs = keep_container_logs(opts, timings)
        except StationError as err:
            report.errors.append(str(err))
    timings["total"] = _ms(t0)
    report.timings_ms = timings
    return report


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


def run(args: argparse.Namespace) -> int:
    opts = options_from_args(args)
    report = prestart(opts)
    figures = {"node": report.node, "file_pages_bytes": report.file_pages_bytes, "cdmm": report.cdmm}
    textfile.export_page_cache("prestart", {**figures, "threshold_bytes": int(report.threshold_gib * GiB)})
    if report.errors and report.status != "above-threshold":
        report.status = "error"
    if args.json:
        from vllm_station.report import dump_json

        dump_json(report)
    else:
        if report.status != "above-threshold":  # that one goes to stderr below, once
            print(f"station prestart: {report.message}")
        if report.logs is not None:
            print(f"station prestart: {report.logs.message}")
            for pruned in report.logs.pruned:
                print(f"  pruned old log {pruned}")
    for error in report.errors:
        print(f"station prestart: error: {error}", file=sys.stderr)
    if report.status == "above-threshold":
        print(
            f"station prestart: error: refusing the start: {report.message}; fix: {report.fix}",
            file=sys.stderr,
        )
        return EXIT_FAIL
    return EXIT_FAIL if report.errors else EXIT_OK
