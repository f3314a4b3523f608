"""One-station preflight checks (group "station"). Each reads the host under `ctx.root` and reports
PASS/WARN/FAIL/SKIP with the figure, the threshold and the fix. Run order is the order below."""

from __future__ import annotations

import errno
import os
import socket
from dataclasses import asdict
from pathlib import Path
from typing import Any

from vllm_station.checkpoint.layout import CONFIG_NAME, README_NAME, read_declared_parsers
from vllm_station.checkpoint.stamp import STAMP_NAME, StampError, StampMissing, changed_files, read_stamp
from vllm_station.commands.preflight import kvcache
from vllm_station.commands.preflight.core import CheckResult, Context, GiB, SkipCheck, check
from vllm_station.host import container as rt
from vllm_station.host import sysfs
from vllm_station.host.nvml import GpuInfo, NvmlReport, NvmlUnavailable, read_nvml
from vllm_station.status import Status, worst

PAGE_CACHE_FIX = (
    "run `station prestart --gpu-node {node}` (sync + drop_caches) before the start, and bind bulk file "
    "I/O (downloads, copies, rsync, backups) to node 0: `station numa-exec --membind 0 -- …`"
)
# said out loud whenever GPU memory is not a NUMA node (`station prestart` says the same words)
# minimum free space (GiB) per path kind; override with config "diskMinFreeGiB": {"model": …, …}
DISK_MIN_FREE_GIB = {"model": 10.0, "state": 10.0, "cache": 20.0, "logs": 1.0}
# GPU memory held with no process visible above this is reported
HELD_NOISE_BYTES = 1 * GiB


def gib(n: int | float) -> str:
    return f"{n / GiB:.2f} GiB"


def _layout(ctx: Context) -> list[sysfs.NodeInfo]:
    return ctx.cached("numa_layout", lambda: sysfs.numa_layout(ctx.root))


def _read_failure(name: str, err: sysfs.HostReadError) -> CheckResult:
    return CheckResult(
        name,
        Status.FAIL,
        f"cannot read {err.path}: {err.problem}",
        fix="the kernel file is missing or not in its usual format: check --root, or that /sys and /proc "
        "are mounted (a sandboxed unit needs them visible)",
        details={"path": str(err.path), "problem": err.problem},
    )


# --- NUMA ----------------------------------------------------------------------------------------


def _nvml_numa_nodes(ctx: Context) -> list[int]:
    """The NUMA nodes NVML reports as GPU memory (coherent mode on Grace); [] without NVML."""
    try:
        report = nvml_report(ctx)
    except NvmlUnavailable:
        return []
    return sorted({g.numa_node for g in report.gpus if g.numa_node is not None})


@check("numa", description="NUMA nodes; which node holds the GPU's memory (memory, no CPUs)")
def numa(ctx: Context) -> CheckResult:
    node = ctx.config.gpu_node
    try:
        layout = _layout(ctx)
    except sysfs.HostReadError as err:
        return _read_failure("numa", err)
    if not layout:
        raise SkipCheck(f"no NUMA information under {ctx.root / sysfs.NODE_DIR}")
    present = [n.node for n in layout]
    gpu_nodes = sysfs.memory_only_nodes(layout)
    details: dict[str, Any] = {
        "nodes": [
            {
                "node": n.node,
                "cpus": len(n.cpus),
                "mem_total_bytes": n.mem_total,
                "mem_free_bytes": n.mem_free,
            }
            for n in layout
        ],
        "memory_only_nodes": gpu_nodes,
        "gpu_node": node,
    }
    nodes_text = ", ".join(f"node{n.node} {gib(n.mem_total)}{'' if n.cpus else ' (no CPUs)'}" for n in layout)
    nvml_nodes = _nvml_numa_nodes(ctx)
    details["nvml_gpu_numa_nodes"] = nvml_nodes
    if nvml_nodes and node not in nvml_nodes:
        return CheckResult(
            "numa",
            Status.FAIL,
            f"{nodes_text}; NVML says GPU memory is NUMA node {nvml_nodes}, but gpuNode is {node}",
            threshold="gpuNode is the GPU's memory node (NVML nvmlDeviceGetNumaNodeId)",
            fix=f"set gpuNode to {nvml_nodes[0]}: the page-cache check and pre-start watch the wrong node",
            details=details,
        )
    if node in gpu_nodes:
        return CheckResult(
            "numa",
            Status.PASS,
            f"{len(layout)} nodes: {nodes_text}; GPU memory on node {node}",
            threshold=f"gpuNode {node} has memory and no CPUs",
            details=details,
        )
    if gpu_nodes:
        return CheckResult(
            "numa",
            Status.FAIL,
            f"{nodes_text}; memory-only node(s) {gpu_nodes}, but gpuNode is {node}",
            threshold=f"gpuNode {node} has memory and no CPUs",
            fix=f"set gpuNode (services.vllm-station.host/serve) to {gpu_nodes[0]}: the page-cache check and "
            "pre-start watch the wrong node",
            details=details,
        )
    if node in present:
        return CheckResult(
            "numa",
            Status.WARN,
            f"{nodes_text}; node {node} has CPUs, so it is not a GPU-memory node",
            threshold=f"gpuNode {node} has memory and no CPUs",
            fix="check gpuNode: on a GB300 in coherent (NUMA) mode the HBM node has no CPUs",
            details=details,
        )
    return CheckResult(
        "numa",
        Status.PASS,
        f"{len(layout)} node(s): {nodes_text}; no memory-only node — {sysfs.CDMM_MESSAGE} "
        "(discrete GPU or CDMM driver mode)",
        threshold=f"gpuNode {node} has memory and no CPUs (when present)",
        details=details,
    )


def _gpu_memory_not_numa(ctx: Context, node: int) -> str | None:
    """Why GPU memory is not a NUMA node here (CDMM), or None when `node` is a memory-only node or the
    layout cannot be read (the meminfo read then reports the problem)."""
    try:
        layout = _layout(ctx)
    except sysfs.HostReadError:
        return None
    if node not in {n.node for n in layout}:
        return f"NUMA node {node} does not exist on this machine"
    if not sysfs.memory_only_nodes(layout):
        return f"NUMA node {node} has CPUs and no NUMA node is memory-only"
    return None


@check("page-cache", description="FilePages / MemFree / MemTotal of the GPU-memory node vs the threshold")
def page_cache(ctx: Context) -> CheckResult:
    node = ctx.config.gpu_node
    limit = int(ctx.config.max_file_pages_gib * GiB)
    threshold = f"FilePages <= {ctx.config.max_file_pages_gib:g} GiB"
    cdmm = _gpu_memory_not_numa(ctx, node)
    if cdmm is not None:
        return CheckResult(
            "page-cache",
            Status.PASS,
            f"{sysfs.CDMM_MESSAGE} ({cdmm})",
            threshold=threshold,
            details={"node": node, "cdmm": True, "reason": cdmm},
        )
    try:
        info = sysfs.node_meminfo(ctx.root, node)
    except sysfs.NodeNotFound as err:  # the layout said otherwise a moment ago
        return CheckResult(
            "page-cache",
            Status.PASS,
            f"{sysfs.CDMM_MESSAGE} ({err.problem})",
            threshold=threshold,
            details={"node": node, "cdmm": True, "reason": err.problem},
        )
    except sysfs.HostReadError as err:
        return _read_failure("page-cache", err)
    missing = [k for k in ("FilePages", "MemFree", "MemTotal") if k not in info]
    if missing:
        path = sysfs.node_dir(ctx.root, node) / "meminfo"
        return _read_failure("page-cache", sysfs.HostReadError(path, f"no {', '.join(missing)} line"))
    pages, free, total = info["FilePages"], info["MemFree"], info["MemTotal"]
    details = {
        "node": node,
        "file_pages_bytes": pages,
        "mem_free_bytes": free,
        "mem_total_bytes": total,
        "active_file_bytes": info.get("Active(file)", 0),
        "inactive_file_bytes": info.get("Inactive(file)", 0),
        "threshold_bytes": limit,
    }
    figure = f"node {node}: FilePages {gib(pages)}, MemFree {gib(free)} of {gib(total)}"
    if pages > limit:
        return CheckResult(
            "page-cache",
            Status.FAIL,
            f"{figure} — page cache in HBM: vLLM would see {gib(pages)} less free GPU memory",
            threshold=threshold,
            fix=PAGE_CACHE_FIX.format(node=node),
            details=details,
        )
    return CheckResult("page-cache", Status.PASS, figure, threshold=threshold, details=details)


@check("host-memory", description="MemAvailable, swap, and whether drop_caches would help")
def host_memory(ctx: Context) -> CheckResult:
    try:
        info = ctx.cached("proc_meminfo", lambda: sysfs.proc_meminfo(ctx.root))
    except sysfs.HostReadError as err:
        return _read_failure("host-memory", err)
    total = info.get("MemTotal", 0)
    available = info.get("MemAvailable", info.get("MemFree", 0))
    swap_total, swap_free = info.get("SwapTotal", 0), info.get("SwapFree", 0)
    swap_used = swap_total - swap_free
    # what a drop would free on the GPU node: file pages nobody touched lately (FilePages − Active(file));
    # active file pages are in use and come straight back.
    node = ctx.config.gpu_node
    droppable: int | None = None
    node_pages: int | None = None
    try:
        node_info = sysfs.node_meminfo(ctx.root, node)
        node_pages = node_info.get("FilePages")
        if node_pages is not None:
            droppable = max(0, node_pages - node_info.get("Active(file)", 0))
    except sysfs.HostReadError:
        pass
    details = {
        "mem_total_bytes": total,
        "mem_available_bytes": available,
        "swap_total_bytes": swap_total,
        "swap_used_bytes": swap_used,
        "cached_bytes": info.get("Cached", 0),
        "gpu_node": node,
        "gpu_node_file_pages_bytes": node_pages,
        "drop_would_free_bytes": droppable,
    }
    figure = f"MemAvailable {gib(available)} of {gib(total)}, swap used {gib(swap_used)} of {gib(swap_total)}"
    if droppable is not None and node_pages:
        active = node_pages - droppable
        helps = droppable >= GiB
        figure += (
            f"; drop_caches would free ~{gib(droppable)} of node {node}'s {gib(node_pages)} FilePages"
            + ("" if helps else f" (the rest, {gib(active)}, is Active(file): in use, it comes back)")
        )
    threshold = "MemAvailable >= 10% of MemTotal; swap used < 1 GiB"
    problems = []
    if total and available < total // 10:
        problems.append("less than 10% of host memory available")
    if swap_used >= GiB:
        problems.append(f"{gib(swap_used)} swapped out")
    if problems:
        return CheckResult(
            "host-memory",
            Status.WARN,
            f"{figure} — {'; '.join(problems)}",
            threshold=threshold,
            fix="find what holds host memory (`ps aux --sort=-rss | head`); loading weights needs host "
            "memory on node 0, and swapping slows the ~7-minute start further",
            details=details,
        )
    return CheckResult("host-memory", Status.PASS, figure, threshold=threshold, details=details)


# --- GPU -----------------------------------------------------------------------------------------


def nvml_report(ctx: Context) -> NvmlReport:
    return ctx.cached("nvml", lambda: read_nvml(ctx.root))


def _gpu_line(g: GpuInfo) -> str:
    modes = []
    if g.numa_node is not None:
        modes.append(f"memory on NUMA node {g.numa_node}")
    if g.addressing_mode is not None:
        modes.append(f"addressing {g.addressing_mode}")
    if g.c2c_enabled is not None:
        modes.append(f"C2C {'on' if g.c2c_enabled else 'off'}")
    extra = f" ({', '.join(modes)})" if modes else ""
    return (
        f"GPU{g.index} {g.name}: {gib(g.memory_total)} total, {gib(g.memory_used)} used, "
        f"{gib(g.memory_free)} free{extra}"
    )


def assess_gpus(report: NvmlReport, utilization: float) -> CheckResult:
    """The GPU verdict from an NVML reading (pure: data in, result out)."""
    details: dict[str, Any] = {
        "driver_version": report.driver_version,
        "cuda_driver_version": report.cuda_driver_version,
        "count": len(report.gpus),
        "gpus": [asdict(g) for g in report.gpus],
        "gpu_memory_utilization": utilization,
    }
    if not report.gpus:
        return CheckResult(
            "gpu",
            Status.FAIL,
            f"NVML (driver {report.driver_version}) sees no GPU",
            threshold=">= 1 GPU",
            fix="check `nvidia-smi`; the driver is loaded but no device is visible (DevicePolicy/CDI?)",
            details=details,
        )
    status = Status.PASS
    lines = [f"driver {report.driver_version}, {len(report.gpus)} GPU(s)"]
    fixes: list[str] = []
    findings: list[dict[str, Any]] = []
    for g in report.gpus:
        lines.append(_gpu_line(g))
        wanted = round(g.memory_total * utilization)
        vllm = [p for p in g.processes if p.is_vllm]
        others = [p for p in g.processes if not p.is_vllm]
        held_by_procs = sum(p.used_bytes or 0 for p in g.processes)
        baseline = g.memory_reserved or 0
        unexplained = g.memory_used - baseline - held_by_procs
        for p in g.processes:
            used = gib(p.used_bytes) if p.used_bytes is not None else "unknown amount"
            lines.append(f"  pid {p.pid} {p.name or '?'} ({p.kind}) holds {used}")
        if vllm:
            lines.append(f"  vLLM is running on GPU{g.index} (pid {', '.join(str(p.pid) for p in vllm)})")
            findings.append({"gpu": g.index, "finding": "vllm-running"})
            continue
        if others:
            held = sum(p.used_bytes or 0 for p in others)
            pids = ", ".join(f"{p.pid} ({p.name or '?'})" for p in others)
            lines.append(f"  stranded: {gib(held)} held by pid {pids} while no vLLM runs")
            findings.append(
                {"gpu": g.index, "finding": "stranded", "bytes": held, "pids": [p.pid for p in others]}
            )
            status = worst([status, Status.WARN])
            fixes.append(
                f"GPU{g.index}: stop pid {pids} (a leftover vLLM/engine, a notebook, a test) — "
                "`kill <pid>`; for a dead container `docker rm -f vllm-station`"
            )
        elif unexplained > HELD_NOISE_BYTES:
            lines.append(
                f"  held: {gib(unexplained)} used by no process visible here "
                "(another PID namespace/container)"
            )
            findings.append({"gpu": g.index, "finding": "held-invisible", "bytes": unexplained})
            status = worst([status, Status.WARN])
            fixes.append(
                f"GPU{g.index}: find the holder with `nvidia-smi` on the host (containers: `docker ps`); "
                "a GPU whose holder is gone needs the process's container stopped or a reboot"
            )
        if g.memory_free < wanted:
            lines.append(
                f"  gpuMemoryUtilization {utilization:g} wants {gib(wanted)} "
                f"but only {gib(g.memory_free)} is free"
            )
            findings.append({"gpu": g.index, "finding": "does-not-fit", "wanted_bytes": wanted})
            status = Status.FAIL
            fixes.append(
                f"GPU{g.index}: free {gib(wanted - g.memory_free)} more (stop the holders above), or lower "
                f"gpuMemoryUtilization below {g.memory_free / g.memory_total:.2f}; "
                "vLLM refuses to start when free memory is below utilization × total"
            )
        else:
            lines.append(
                f"  gpuMemoryUtilization {utilization:g} → {gib(wanted)} fits in {gib(g.memory_free)} free"
            )
    details["findings"] = findings
    return CheckResult(
        "gpu",
        status,
        "; ".join(line.strip() for line in lines),
        threshold=(
            f"free >= gpuMemoryUtilization {utilization:g} × total; "
            "no process holding memory when no vLLM runs"
        ),
        fix=" / ".join(fixes) if fixes else None,
        details=details,
    )


@check("gpu", description="NVML: GPUs, driver, memory, processes holding memory, utilization fits")
def gpu(ctx: Context) -> CheckResult:
    try:
        report = nvml_report(ctx)
    except NvmlUnavailable as err:
        raise SkipCheck(
            f"no NVML: {err}",
            fix="on a GPU host: install the NVIDIA driver (libnvidia-ml.so) and nvidia-ml-py",
        ) from err
    return assess_gpus(report, ctx.config.gpu_memory_utilization)


# --- model ---------------------------------------------------------------------------------------


@check("model", description="the verify stamp exists, matches the configured revision and the files on disk")
def model(ctx: Context) -> CheckResult:
    cfg = ctx.config
    if cfg.model_dir is None:
        raise SkipCheck(
            f"modelDir not set: {cfg.model} is fetched by vLLM itself, no local checkpoint to check",
            fix="download with `station download REPO --revision REV --dir DIR` and set the model to DIR",
        )
    directory = ctx.host_path(cfg.model_dir)
    stamp_path = directory / STAMP_NAME
    threshold = f"stamp present, revision == {cfg.revision}" if cfg.revision else "stamp present"
    verify_fix = f"run `station verify {cfg.model_dir}` (after `station download …` finished)"
    if not directory.is_dir():
        return CheckResult(
            "model", Status.FAIL, f"model directory {cfg.model_dir} does not exist", threshold, verify_fix
        )
    try:
        stamp = read_stamp(stamp_path)
    except StampMissing:
        return CheckResult(
            "model",
            Status.FAIL,
            f"no verify stamp {STAMP_NAME} in {cfg.model_dir}: the checkpoint was never verified",
            threshold,
            verify_fix,
        )
    except StampError as err:
        figure = f"verify stamp {stamp_path} unreadable: {err.problem}"
        return CheckResult("model", Status.FAIL, figure, threshold, verify_fix)
    revision = stamp.revision
    details: dict[str, Any] = {
        "stamp": str(stamp_path),
        "repo": stamp.repo,
        "revision": revision,
        "verified_at": stamp.verified_at,
        "sha256_checked": stamp.sha256_checked,
        "files": len(stamp.files),
    }
    if cfg.revision and revision != cfg.revision:
        return CheckResult(
            "model",
            Status.FAIL,
            f"stamp revision {revision} != configured {cfg.revision}",
            threshold,
            f"download revision {cfg.revision} (`station download {stamp.repo or cfg.model} "
            f"--revision {cfg.revision} --dir {cfg.model_dir}`) or pin the revision the stamp names",
            details,
        )
    changed = changed_files(stamp, directory)
    if changed:
        details["changed"] = changed
        return CheckResult(
            "model",
            Status.FAIL,
            f"checkpoint changed since verification: {'; '.join(changed[:3])}"
            + (f" (+{len(changed) - 3} more)" if len(changed) > 3 else ""),
            threshold,
            verify_fix + " again, after re-downloading the changed files",
            details,
        )
    figure = (
        f"verified {stamp.verified_at}: {stamp.repo}@{revision}, {len(stamp.files)} files"
        f"{', sha256 checked' if stamp.sha256_checked else ''}"
    )
    if not cfg.revision:
        return CheckResult(
            "model",
            Status.WARN,
            figure + "; no revision pinned in the config",
            threshold,
            "pin serve.revision so a re-download cannot change the model silently",
            details,
        )
    return CheckResult("model", Status.PASS, figure, threshold, details=details)


# --- parsers -------------------------------------------------------------------------------------

# config key, the serving module's option, for each kind of parser
_PARSER_SETTINGS = {
    "tool": ("toolCallParser", "services.vllm-station.serve.toolCallParser"),
    "reasoning": ("reasoningParser", "services.vllm-station.serve.reasoningParser"),
}


@check("parsers", description="tool-call/reasoning parsers: those the checkpoint's model card declares")
def parsers(ctx: Context) -> CheckResult:
    """FAIL when the configured parser is not one the checkpoint declares (a new revision that changed
    its output format would answer tool calls as raw text); WARN when it declares one and none is set."""
    cfg = ctx.config
    if cfg.model_dir is None:
        raise SkipCheck(f"modelDir not set: no local checkpoint of {cfg.model} to read")
    try:
        declared = read_declared_parsers(ctx.host_path(cfg.model_dir))
    except ValueError as err:
        figure = f"model card unreadable: {err}"
        return CheckResult("parsers", Status.FAIL, figure, None, "re-download the checkpoint")
    if declared is None:
        raise SkipCheck(f"no {README_NAME} in {cfg.model_dir}: the checkpoint declares no parser")
    if not declared.tool and not declared.reasoning:
        raise SkipCheck(f"{declared.source} names no --tool-call-parser or --reasoning-parser")
    configured = {"tool": cfg.tool_call_parser, "reasoning": cfg.reasoning_parser}
    names = {"tool": declared.tool, "reasoning": declared.reasoning}
    details: dict[str, Any] = {"source": declared.source}
    problems: list[str] = []
    fixes: list[str] = []
    warnings: list[str] = []
    for kind, (key, option) in _PARSER_SETTINGS.items():
        want, have = names[kind], configured[kind]
        details[kind] = {"declared": list(want), "configured": have}
        if not want:
            continue
        if have is None:
            warnings.append(f"{key}: none set, the checkpoint declares {' or '.join(want)}")
            fixes.append(f'set {option} = "{want[0]}"')
        elif have not in want:
            problems.append(f"{key} {have!r}, the checkpoint declares {' or '.join(repr(w) for w in want)}")
            fixes.append(f'set {option} = "{want[0]}" (or serve the revision the flags were written for)')
    threshold = "the configured parsers are among those the model card declares"
    fix = "; ".join(fixes) or None
    if problems:
        figure = "; ".join(problems) + f" ({declared.source})"
        return CheckResult("parsers", Status.FAIL, figure, threshold, fix, details)
    if warnings:
        figure = "; ".join(warnings) + f" ({declared.source})"
        return CheckResult("parsers", Status.WARN, figure, threshold, fix, details)
    shown = ", ".join(f"{_PARSER_SETTINGS[k][0]} {configured[k]}" for k in names if names[k])
    figure = f"{shown}, as {declared.source} declares"
    return CheckResult("parsers", Status.PASS, figure, threshold, details=details)


# --- disk ----------------------------------------------------------------------------------------


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


@check("disk", description="free space for the model dir, caches and logs")
def disk(ctx: Context) -> CheckResult:
    cfg = ctx.config
    minimums = dict(DISK_MIN_FREE_GIB)
    override = cfg.raw.get("diskMinFreeGiB")
    if isinstance(override, dict):
        minimums.update({k: float(v) for k, v in override.items() if isinstance(v, int | float)})
    targets = [
        ("model", cfg.model_dir) if cfg.model_dir else ("state", cfg.paths.state),
        ("cache", cfg.paths.cache),
        ("logs", cfg.paths.logs),
    ]
    rows: list[dict[str, Any]] = []
    worst = Status.PASS
    fixes = []
    for kind, configured in targets:
        path = ctx.host_path(configured)
        probe = _existing_ancestor(path)
        st = os.statvfs(probe)
        free = st.f_bavail * st.f_frsize
        need = int(minimums[kind] * GiB)
        row = {
            "kind": kind,
            "path": configured,
            "measured_at": str(probe),
            "free_bytes": free,
            "min_free_bytes": need,
            "exists": path.exists(),
        }
        rows.append(row)
        if free < need:
            worst = Status.FAIL
            fixes.append(
                f"free space on the filesystem of {configured} ({gib(free)} free, {gib(need)} needed)"
            )
        elif free < 2 * need and worst is Status.PASS:
            worst = Status.WARN
            fixes.append(f"{configured} is close to full ({gib(free)} free)")
    figure = ", ".join(f"{r['kind']} {r['path']}: {gib(r['free_bytes'])} free" for r in rows)
    threshold = ", ".join(f"{k} >= {v:g} GiB" for k, v in minimums.items() if k in {r["kind"] for r in rows})
    return CheckResult("disk", worst, figure, threshold, "; ".join(fixes) if fixes else None, {"paths": rows})


# --- port ----------------------------------------------------------------------------------------

OUR_UNIT = "vllm-station"
CONTAINER_PROXIES = {"docker-proxy", "rootlessport", "conmon", "slirp4netns", "pasta"}


def _bind_probe(host: str, port: int) -> int | None:
    """None when (host, port) can be bound now, else the errno."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as err:
            return err.errno
    return None


@check("port", description="the serving port is free, or held by our own unit")
def port(ctx: Context) -> CheckResult:
    cfg = ctx.config
    where = f"{cfg.host}:{cfg.port}"
    threshold = f"{where} free (or held by {OUR_UNIT})"
    try:
        listeners = sysfs.tcp_listeners(ctx.root, cfg.port)
    except sysfs.HostReadError as read_err:  # no /proc/net/tcp: "free" must not be concluded from nothing
        return _read_failure("port", read_err)
    if ctx.live:
        err = _bind_probe(cfg.host, cfg.port)
        if err == errno.EADDRNOTAVAIL:
            return CheckResult(
                "port",
                Status.FAIL,
                f"{cfg.host} is not an address of this machine",
                threshold,
                "set serve.host to 127.0.0.1, 0.0.0.0 or an address this host has",
            )
        if err is None:
            return CheckResult("port", Status.PASS, f"{where} is free", threshold)
        if err not in (errno.EADDRINUSE, errno.EACCES):
            return CheckResult(
                "port",
                Status.FAIL,
                f"cannot bind {where}: {os.strerror(err)}",
                threshold,
                "choose another port",
            )
    elif not listeners:
        return CheckResult("port", Status.PASS, f"{where} is free (no listener in /proc/net/tcp)", threshold)
    owners = sysfs.socket_owners(ctx.root, {lst.inode for lst in listeners})
    details = {
        "listeners": [asdict(x) for x in listeners],
        "owners": [asdict(o) for o in owners],
    }
    ours = [o for o in owners if OUR_UNIT in o.cgroup or "vllm" in o.comm.lower()]
    if ours:
        return CheckResult(
            "port",
            Status.PASS,
            f"{where} is held by our unit (pid {', '.join(str(o.pid) for o in ours)}: {ours[0].comm})",
            threshold,
            details=details,
        )
    proxies = [o for o in owners if o.comm in CONTAINER_PROXIES]
    if proxies:
        return CheckResult(
            "port",
            Status.WARN,
            f"{where} is published by a container ({proxies[0].comm}, pid {proxies[0].pid})",
            threshold,
            f"if it is not {OUR_UNIT}: `docker ps --filter publish={cfg.port}` and stop it",
            details,
        )
    holder = ", ".join(f"pid {o.pid} ({o.comm or '?'})" for o in owners) or "a process not visible here"
    return CheckResult(
        "port",
        Status.FAIL,
        f"{where} is already in use by {holder}",
        threshold,
        f"stop {holder} or set serve.port to a free port (`ss -ltnp 'sport = :{cfg.port}'` shows the holder)",
        details,
    )


# --- image ---------------------------------------------------------------------------------------


@check("image", description="the container image is present locally with the pinned digest")
def image(ctx: Context) -> CheckResult:
    cfg = ctx.config
    if cfg.image is None:
        raise SkipCheck("no container image configured (native backend)")
    if cfg.runtime is None:
        raise SkipCheck("no container runtime configured")
    pinned = cfg.image.split("@", 1)[1] if "@sha256:" in cfg.image else None
    threshold = f"local image digest == {pinned}" if pinned else "image pinned by digest"
    runtime = rt.resolve_runtime(cfg.runtime, ctx.env or None, timeout_s=20)
    if not rt.runtime_available(runtime):
        raise SkipCheck(
            f"container runtime {runtime.argv[0]!r} not installed here", fix=f"install {runtime.name}"
        )
    info = rt.inspect_image(runtime, cfg.image)
    if info is None:
        # Not a reason to refuse a start: the runtime pulls exactly this digest. It is slow, though.
        return CheckResult(
            "image",
            Status.WARN,
            f"image {cfg.image} is not present locally: the start will pull it "
            "(tens of GB, slow; fails offline)",
            threshold,
            f"`{runtime.name} pull {cfg.image}` before starting",
        )
    details = {"id": info.id, "repo_digests": info.repo_digests}
    if pinned is None:
        return CheckResult(
            "image",
            Status.WARN,
            f"image {cfg.image} present ({info.id[:19]}) but not pinned by digest",
            threshold,
            "pin serve.image as name@sha256:…",
            details,
        )
    digests = [d.split("@", 1)[1] for d in info.repo_digests if "@" in d]
    if pinned in digests:
        return CheckResult(
            "image", Status.PASS, f"image present, digest {pinned}", threshold, details=details
        )
    return CheckResult(
        "image",
        Status.FAIL,
        f"local image digests {digests or ['none']} do not include the pinned {pinned}",
        threshold,
        f"`{runtime.name} pull {cfg.image}` to fetch the pinned image",
        details,
    )


# --- KV cache ------------------------------------------------------------------------------------


@check("kv-cache", description="KV-cache capacity for maxModelLen × maxNumSeqs (fp8 vs bf16)")
def kv_cache(ctx: Context) -> CheckResult:
    cfg = ctx.config
    profile = kvcache.profile_for(cfg.model)
    model_dir = ctx.host_path(cfg.model_dir) if cfg.model_dir else None
    geometry = kvcache.read_geometry(model_dir) if model_dir is not None else None
    if geometry is None and profile is not None:
        geometry = profile.geometry
    if geometry is None:
        raise SkipCheck(
            f"no KV geometry for {cfg.model}: no config.json in modelDir and no built-in profile",
            fix="set modelDir to the downloaded checkpoint (its config.json gives the geometry)",
        )
    sources: dict[str, str] = {"geometry": geometry.source}
    weights = kvcache.weights_bytes(model_dir) if model_dir is not None else None
    if weights is not None:
        sources["weights"] = f"*.safetensors in {cfg.model_dir}"
    elif profile is not None:
        weights = profile.weights_bytes
        sources["weights"] = f"assumed: {profile.name}"
    else:
        raise SkipCheck(f"no weights size for {cfg.model}: no *.safetensors in modelDir")
    try:
        report = nvml_report(ctx)
        total = report.gpus[0].memory_total if report.gpus else None
        if total is not None:
            sources["gpu_memory"] = f"NVML: {report.gpus[0].name}"
    except NvmlUnavailable:
        total = None
    if total is None:
        if profile is None:
            raise SkipCheck("no GPU memory figure: NVML unavailable and no built-in profile")
        total = profile.gpu_memory_bytes
        sources["gpu_memory"] = f"assumed: {total / 1e9:.0f} GB GB300 HBM, no NVML ({profile.name})"
    overhead = profile.overhead_bytes if profile is not None else kvcache.DEFAULT_OVERHEAD_BYTES
    try:
        kv_dtype = kvcache.resolve_kv_dtype(cfg.kv_cache_dtype, model_dir, profile)
    except kvcache.KvDtypeError as err:
        raise SkipCheck(str(err), fix="set kvCacheDtype explicitly (fp8 or bfloat16)") from err
    dtype = kv_dtype.dtype
    sources["kv_cache_dtype"] = kv_dtype.source
    if dtype not in kvcache.DTYPE_BYTES:
        return CheckResult(
            "kv-cache",
            Status.FAIL,
            f"unknown kvCacheDtype {dtype!r}",
            fix=f"use one of {', '.join(kvcache.DTYPE_BYTES)}",
        )
    max_model_len = cfg.max_model_len
    if max_model_len is None:
        max_model_len = kvcache.read_max_context(model_dir) if model_dir is not None else None
        if max_model_len is None:
            raise SkipCheck(
                "maxModelLen unset (vLLM uses the model's context length) and no max_position_embeddings "
                "in the checkpoint's config.json: no request size to compare with",
                fix="set maxModelLen, or modelDir to the downloaded checkpoint",
            )
        sources["max_model_len"] = f"the model's max_position_embeddings ({CONFIG_NAME}), maxModelLen unset"
    other = "bfloat16" if kvcache.DTYPE_BYTES[dtype] == 1 else "fp8"
    args = (total, cfg.gpu_memory_utilization, weights, overhead, max_model_len)
    mine = kvcache.estimate(geometry, dtype, *args)
    alt = kvcache.estimate(geometry, other, *args)
    # maxNumSeqs unset (null): vLLM picks it; the capacity is still checked against one full request
    demand = max_model_len * cfg.max_num_seqs if cfg.max_num_seqs is not None else None
    measured = kvcache.measured_from_logs(ctx.host_path(cfg.paths.logs))
    details: dict[str, Any] = {
        "sources": sources,
        "attention": geometry.attention,
        "kv_layers": geometry.kv_layers,
        "elements_per_token_layer": geometry.elements_per_token_layer,
        "gpu_memory_bytes": total,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "weights_bytes": weights,
        "overhead_bytes": overhead,
        "estimate": asdict(mine),
        "alternative": asdict(alt),
        "max_model_len": max_model_len,
        "max_num_seqs": cfg.max_num_seqs,
        "demand_tokens": demand,
        "measured": asdict(measured) if measured else None,
    }
    figure = (
        f"{dtype} KV cache ≈ {mine.tokens:,} tokens "
        f"({mine.bytes_per_token:,} B/token, {gib(mine.budget_bytes)}) "
        f"= {mine.full_requests:.2f} full {max_model_len:,}-token requests; "
        f"{other}: {alt.tokens:,} tokens = {alt.full_requests:.2f}"
    )
    figure += f"; KV dtype from {kv_dtype.source}"
    if measured is not None:
        figure += f"; last run's vLLM reported {measured.tokens:,} tokens"
        if measured.concurrency is not None:
            figure += f" ({measured.concurrency:g}x)"
    threshold = (
        f"maxNumSeqs {cfg.max_num_seqs} × maxModelLen {max_model_len:,} = {demand:,} tokens"
        if demand is not None
        else f"one maxModelLen {max_model_len:,}-token request (maxNumSeqs unset: vLLM's default)"
    )
    if mine.budget_bytes <= 0 and measured is None:
        usable = round(total * cfg.gpu_memory_utilization)
        return CheckResult(
            "kv-cache",
            Status.FAIL,
            f"no room for a KV cache: weights {gib(weights)} + runtime overhead {gib(overhead)} exceed "
            f"gpuMemoryUtilization {cfg.gpu_memory_utilization:g} × {gib(total)} = {gib(usable)} "
            f"({sources['gpu_memory']})",
            threshold,
            "this model does not fit this GPU: serve it on a station with more GPU memory, split it over "
            "two stations (tensor parallel, the glm53-tp2 preset), or choose a smaller checkpoint",
            details,
        )
    tokens = measured.tokens if measured is not None else mine.tokens
    if tokens < max_model_len:
        return CheckResult(
            "kv-cache",
            Status.FAIL,
            figure + f" — less than one {max_model_len:,}-token request: vLLM refuses to start",
            threshold,
            "lower maxModelLen, raise gpuMemoryUtilization, use kvCacheDtype fp8, or free GPU memory",
            details,
        )
    if demand is not None and tokens < demand:
        return CheckResult(
            "kv-cache",
            Status.WARN,
            figure
            + f"; all {cfg.max_num_seqs} sequences at full length need {demand:,} ({demand / tokens:.1f}×)",
            threshold,
            f"expected with long contexts: beyond {tokens // max_model_len} full-length requests "
            "vLLM queues (it does not fail); for more lower maxModelLen or add a station; keep fp8 "
            f"({other} gives {alt.full_requests:.2f})"
            if kvcache.DTYPE_BYTES[dtype] == 1
            else "use kvCacheDtype fp8 (doubles the tokens) or lower maxModelLen / maxNumSeqs",
            details,
        )
    return CheckResult("kv-cache", Status.PASS, figure, threshold, details=details)
