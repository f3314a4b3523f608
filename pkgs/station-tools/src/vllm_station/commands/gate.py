"""`station gate …`: the serving unit's start gates (`ExecStartPre=station gate …`).

`station gate stamp DIR [--revision REV] [--fix TEXT]`: the checkpoint in DIR carries a valid verify stamp
(`.station-verified.json`, written by `station verify` only when every check passed: a complete stamp,
see `vllm_station.checkpoint.stamp`), with `--revision` the stamp names exactly that revision, and every
file the stamp lists is still there with its verified size. Exit 0 with one line on stderr saying what was
verified; exit 1 with one line saying why the start is refused, ending with TEXT (default
`run: station verify DIR`); exit 2 on bad arguments. The lines start with `vllm-station:` — the unit's
journal reads as the unit speaking.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vllm_station.checkpoint.stamp import STAMP_NAME, StampError, StampMissing, changed_files, read_stamp
from vllm_station.errors import EXIT_FAIL, EXIT_OK, UsageError

PREFIX = "vllm-station"


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="gate", metavar="GATE", required=True)
    stamp = sub.add_parser(
        "stamp",
        help="refuse the start unless DIR holds a valid verify stamp (of REV)",
        description="refuse the start unless DIR holds a valid verify stamp (of REV)",
    )
    stamp.add_argument("dir", metavar="DIR", type=Path, help="the checkpoint directory")
    stamp.add_argument("--revision", metavar="REV", help="the stamp must name this revision")
    stamp.add_argument(
        "--fix",
        metavar="TEXT",
        help="what the refusal tells the operator to do (default: run: station verify DIR)",
    )


def _short(revision: str) -> str:
    return revision[:12]


def check_stamp(directory: Path, revision: str | None, fix: str | None) -> tuple[bool, str]:
    """(start allowed, the one line to log). Pure apart from reading the stamp."""
    fix = fix or f"run: station verify {directory}"
    refuse = f"{PREFIX}: refusing to start:"
    if not directory.is_dir():
        what = "does not exist" if not directory.exists() else "is not a directory"
        return False, f"{refuse} the checkpoint directory {directory} {what}; {fix}"
    path = directory / STAMP_NAME
    try:
        stamp = read_stamp(path)
    except StampMissing:
        return False, f"{refuse} the checkpoint in {directory} is not verified ({path} missing); {fix}"
    except StampError as err:
        return False, f"{refuse} the verify stamp {path} is unusable: {err.problem}; {fix}"
    if revision is not None:
        if stamp.revision is None:
            how = "no 'revision' key" if not stamp.has_revision else "revision null"
            return False, (
                f"{refuse} the verify stamp {path} names no revision ({how}), expected {revision}: the "
                f"checkpoint was verified without one (a copy without the download's hash record); "
                f"`station verify {directory} --revision {revision}` records the revision it was told; {fix}"
            )
        if stamp.revision != revision:
            return False, (
                f"{refuse} the checkpoint in {directory} is revision {stamp.revision}, "
                f"expected {revision} ({path}); {fix}"
            )
    changed = changed_files(stamp, directory)
    if changed:
        more = f" (and {len(changed) - 3} more)" if len(changed) > 3 else ""
        return False, (
            f"{refuse} the checkpoint in {directory} changed since it was verified ({path}): "
            f"{'; '.join(changed[:3])}{more}; {fix}"
        )
    named = f"revision {_short(stamp.revision)}" if stamp.revision else "no revision recorded"
    return True, f"{PREFIX}: checkpoint {directory} verified ({named}, {path})"


def run(args: argparse.Namespace) -> int:
    if args.gate != "stamp":  # argparse allows only the gates above
        raise UsageError(f"unknown gate {args.gate!r}")
    if args.revision is not None and not args.revision.strip():
        raise UsageError("--revision must not be empty")
    ok, line = check_stamp(args.dir, args.revision, args.fix)
    print(line, file=sys.stderr)
    return EXIT_OK if ok else EXIT_FAIL
