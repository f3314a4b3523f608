"""`station preflight [--config FILE] [flags] [--json] [--only a,b] [--root DIR]`.

Exit 0 when no check FAILs (WARN and SKIP included), 1 when any FAILs, 2 on usage errors.
The `--json` document is versioned and documented in docs/preflight.md.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_station import argtypes, options, textfile
from vllm_station.commands.preflight.core import (
    STATUSES,
    CheckResult,
    Context,
    PreflightConfig,
    exit_code,
    load_checks,
    run_checks,
)
from vllm_station.errors import UsageError
from vllm_station.host import container as rt
from vllm_station.status import Status

JSON_VERSION = 1

# Without --config: what the NixOS module writes for a serve configuration with no preset and no model
# settings (vLLM's own defaults as null), so flags alone describe a station. No model-specific numbers.
NO_CONFIG: dict[str, Any] = {
    "host": "127.0.0.1",
    "port": 8000,
    "model": "",
    "modelDir": None,
    "revision": None,
    "gpuNode": 1,
    "maxFilePagesGiB": 4,
    "gpuMemoryUtilization": None,
    "maxModelLen": None,
    "maxNumSeqs": None,
    "kvCacheDtype": None,
    "toolCallParser": None,
    "reasoningParser": None,
    "runtime": None,
    "image": None,
    "paths": {
        "state": "/var/lib/vllm-station",
        "cache": "/var/cache/vllm-station",
        "logs": "/var/log/vllm-station",
    },
    "pair": None,
}

# flag → config field for the overrides that work without a config file
_OVERRIDES: tuple[tuple[str, str, Callable[[str], object], str], ...] = (
    ("--host", "host", str, "serving address"),
    ("--port", "port", argtypes.port(), "serving port"),
    ("--model", "model", str, "model repo id or path"),
    ("--model-dir", "model_dir", str, "local checkpoint directory (with the verify stamp)"),
    ("--revision", "revision", str, "pinned checkpoint revision"),
    ("--gpu-node", "gpu_node", argtypes.count(lo=0, hi=1023), "NUMA node holding GPU memory"),
    (
        "--max-file-pages-gib",
        "max_file_pages_gib",
        argtypes.number(float, lo=0.0, hi=1_000_000.0),
        "page-cache threshold on the GPU node (GiB)",
    ),
    (
        "--gpu-memory-utilization",
        "gpu_memory_utilization",
        argtypes.number(float, lo=0.0, hi=1.0, lo_open=True),
        "vLLM's --gpu-memory-utilization",
    ),
    ("--max-model-len", "max_model_len", argtypes.count(hi=100_000_000), "vLLM's --max-model-len"),
    ("--max-num-seqs", "max_num_seqs", argtypes.count(hi=1_000_000), "vLLM's --max-num-seqs"),
    ("--kv-cache-dtype", "kv_cache_dtype", str, "vLLM's --kv-cache-dtype"),
    ("--tool-call-parser", "tool_call_parser", str, "vLLM's --tool-call-parser (parsers check)"),
    ("--reasoning-parser", "reasoning_parser", str, "vLLM's --reasoning-parser (parsers check)"),
    ("--runtime", "runtime", str, "docker, podman or an absolute path to one (image check)"),
    ("--image", "image", str, "pinned image name@sha256:…"),
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="preflight JSON written by the NixOS module")
    options.add_json(parser, what="the stable report (docs/preflight.md)")
    parser.add_argument("--only", help="comma-separated check names or groups (see --list)")
    parser.add_argument(
        "--root", type=Path, default=Path("/"), help="filesystem root for /sys, /proc and paths"
    )
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    group = parser.add_argument_group("overrides (take precedence over --config)")
    for flag, dest, kind, text in _OVERRIDES:
        group.add_argument(flag, dest=f"set_{dest}", type=kind, default=None, help=text)


@dataclass
class PreflightReport:
    version: int
    status: str  # worst of the checks: PASS | WARN | FAIL (SKIP-only runs read PASS)
    exit_code: int
    root: str
    config: str | None
    summary: dict[str, int]
    elapsed_ms: float
    checks: list[CheckResult] = field(default_factory=list)


def build_config(args: argparse.Namespace) -> PreflightConfig:
    config = PreflightConfig.load(args.config) if args.config else PreflightConfig.from_mapping(NO_CONFIG)
    for _, dest, _, _ in _OVERRIDES:
        value = getattr(args, f"set_{dest}")
        if value is not None:
            setattr(config, dest, value)
    if not 0 < config.gpu_memory_utilization <= 1:
        raise UsageError(f"gpuMemoryUtilization must be in (0, 1], got {config.gpu_memory_utilization}")
    if any(v is not None and v <= 0 for v in (config.max_model_len, config.max_num_seqs)):
        raise UsageError("maxModelLen and maxNumSeqs must be positive")
    if config.runtime is not None:
        rt.runtime_name(config.runtime)  # docker, podman or an absolute path to one: a usage error otherwise
    return config


def make_report(
    results: list[CheckResult], root: Path, config: Path | None, elapsed_ms: float
) -> PreflightReport:
    summary = {s.value: sum(1 for r in results if r.status is s) for s in STATUSES}
    worst = "FAIL" if summary["FAIL"] else "WARN" if summary["WARN"] else "PASS"
    return PreflightReport(
        version=JSON_VERSION,
        status=worst,
        exit_code=exit_code(results),
        root=str(root),
        config=str(config) if config else None,
        summary=summary,
        elapsed_ms=round(elapsed_ms, 3),
        checks=results,
    )


def render(report: PreflightReport) -> str:
    width = max((len(r.name) for r in report.checks), default=5)
    lines = []
    for r in report.checks:
        lines.append(f"{r.status.value:<4}  {r.name:<{width}}  {r.figure}")
        pad = " " * (width + 8)
        if r.status is not Status.PASS and r.threshold:
            lines.append(f"{pad}threshold: {r.threshold}")
        if r.status is not Status.PASS and r.fix:
            lines.append(f"{pad}fix: {r.fix}")
    s = report.summary
    lines.append(
        f"preflight: {s['PASS']} pass, {s['WARN']} warn, {s['FAIL']} fail, {s['SKIP']} skip "
        f"({report.elapsed_ms:.0f} ms) → exit {report.exit_code}"
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.list:
        for spec in load_checks().values():
            print(f"{spec.name:<16} {spec.group:<8} {spec.description}")
        return 0
    config = build_config(args)
    root = args.root
    if not root.is_dir():
        raise UsageError(f"--root {root} is not a directory")
    only = [item.strip() for item in args.only.split(",") if item.strip()] if args.only else None
    ctx = Context(root=root, config=config, env=dict(os.environ))
    start = time.perf_counter()
    results = run_checks(ctx, only)
    report = make_report(results, root, args.config, (time.perf_counter() - start) * 1000)
    for r in results:  # its page-cache figures, for Prometheus (where monitoring is on)
        if r.name == "page-cache" and r.details:
            textfile.export_page_cache("preflight", r.details)
    if args.json:
        from vllm_station.report import dump_json

        dump_json(report)
    else:
        print(render(report))
    return report.exit_code
