"""`station verify DIR`: check a safetensors checkpoint before anything loads it; stamp it only if it passes.

The checks (config, index, shard headers, index ↔ headers, optional sha256 against the hub's record) and
the stamp live in `vllm_station.checkpoint`; this module is the command: options, the NUMA binding for
a full read, the report. `--repo`/`--revision` record what a copy without `.station-hashes.json` is
(the serving unit's gate compares the stamp's revision with the pinned one).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from vllm_station import checkpoint_args, options
from vllm_station.checkpoint.hashes import HASHES_NAME
from vllm_station.checkpoint.verification import (
    VerifyReport,
    failure_message,
    report_text,
    verify_checkpoint,
)
from vllm_station.errors import EXIT_INTERRUPTED, CheckFailed
from vllm_station.report import dump_json

log = logging.getLogger("vllm_station.commands.verify")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", metavar="DIR", type=Path, help="checkpoint directory")
    checkpoint_args.add_expectations(parser)
    parser.add_argument(
        "--repo", metavar="REPO", help=f"record this repository in the stamp (default: from {HASHES_NAME})"
    )
    parser.add_argument(
        "--revision",
        metavar="REV",
        help=f"record this revision in the stamp (default: from {HASHES_NAME}; a copy without it has none)",
    )
    parser.add_argument(
        "--sha256",
        action="store_true",
        help=f"also stream every file and compare with the hub hashes recorded in {HASHES_NAME} "
        "(runs bound to NUMA node 0 where libnuma is available)",
    )
    options.add_json(parser)


def bind_for_streaming() -> str | None:
    """Bind to node 0 for a full read (keeps page cache off the GPU's node); a note when impossible."""
    from vllm_station.host import numa

    try:
        policy = numa.get_mempolicy()
        if policy.mode == numa.MPOL_BIND:
            return policy.describe()
        return numa.set_membind([0]).describe()
    except (numa.NumaUnavailable, OSError) as exc:
        log.warning("streaming without a NUMA binding: %s", exc)
        return None


def render(report: VerifyReport, json_out: bool) -> None:
    if json_out:
        dump_json(report)
        return
    print(report_text(report))
    for w in report.warnings:
        print(f"warning: {w}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    expect = checkpoint_args.expectations(args)
    membind = bind_for_streaming() if args.sha256 else None
    report = verify_checkpoint(
        args.dir,
        expect,
        sha256=args.sha256,
        repo=args.repo,
        revision=args.revision,
        on_progress=lambda p: log.info("sha256 ok: %s", p),
    )
    report.membind = membind
    render(report, args.json)
    if report.partial:
        print("station verify: interrupted; the report holds the checks that ran", file=sys.stderr)
        return EXIT_INTERRUPTED
    if not report.ok:
        raise CheckFailed(failure_message(report))
    return 0
