"""`station revisions …`: the revisions of one model kept side by side (`DIR/revisions/REV`).

- `station revisions list DIR [--json]`: each revision directory, verified or not, and when.
- `station revisions prune DIR --pin REV [--keep N] [--protect REV …] [--dry-run] [--json]`: keep the
  pinned revision, every protected one and the N newest verified revisions in all (default 2); delete
  the older verified ones. Unverified directories are left alone. The download unit runs it after the
  pinned revision verified (modules/download.nix). Exit 0; 1 when a deletion failed; 2 on bad arguments.
- `station revisions adopt DIR [--json]`: move a verified checkpoint that sits directly in DIR (the
  layout before revisions) into `DIR/revisions/<its stamp's revision>`, so that it is not downloaded again.

The layout and the rules are `vllm_station.checkpoint.revisions`'; this module is the command.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vllm_station import argtypes, options
from vllm_station.checkpoint.revisions import (
    adopt_flat_checkpoint,
    delete_revision,
    list_revisions,
    plan_prune,
    valid_revision,
)
from vllm_station.errors import EXIT_FAIL, EXIT_OK, UsageError
from vllm_station.report import dump_json


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = sub.add_parser(
        "list", help="the revisions under DIR/revisions", description="the revisions under DIR/revisions"
    )
    ls.add_argument("dir", metavar="DIR", type=Path, help="the model's directory (a download entry's dir)")
    options.add_json(ls, what="the revisions")
    prune = sub.add_parser(
        "prune",
        help="delete old verified revisions, keeping the pinned one and the N newest",
        description="delete old verified revisions, keeping the pinned one and the N newest",
    )
    prune.add_argument("dir", metavar="DIR", type=Path, help="the model's directory (a download entry's dir)")
    prune.add_argument("--pin", metavar="REV", required=True, help="the pinned revision: never deleted")
    prune.add_argument(
        "--keep",
        metavar="N",
        type=argtypes.count(lo=1, hi=1000),
        default=2,
        help="verified revisions kept in all, the pinned one included (default 2)",
    )
    prune.add_argument(
        "--protect",
        metavar="REV",
        action="append",
        default=[],
        help="another revision never deleted (repeatable)",
    )
    prune.add_argument("--dry-run", action="store_true", help="say what would be deleted; delete nothing")
    options.add_json(prune, what="what was (or would be) deleted")
    adopt = sub.add_parser(
        "adopt",
        help="move a checkpoint verified directly in DIR into DIR/revisions/REV",
        description="move a checkpoint verified directly in DIR into DIR/revisions/REV",
    )
    adopt.add_argument("dir", metavar="DIR", type=Path, help="the model's directory (a download entry's dir)")
    options.add_json(adopt, what="the move")


def _check_revision(flag: str, value: str) -> None:
    if not valid_revision(value):
        raise UsageError(
            f"{flag} {value!r} cannot name a revision directory (letters, digits, '.', '_', '-')"
        )


def run(args: argparse.Namespace) -> int:
    model_dir: Path = args.dir
    if args.action == "adopt":
        adoption = adopt_flat_checkpoint(model_dir)
        if args.json:
            dump_json(adoption)
        else:
            print(f"station revisions: {adoption.note}", file=sys.stderr)
        return EXIT_OK
    revisions = list_revisions(model_dir)
    if args.action == "list":
        if args.json:
            rows = [
                {
                    "name": r.name,
                    "path": str(r.path),
                    "verified": r.verified,
                    "verified_at": r.verified_at,
                    "stamp_revision": r.stamp_revision,
                    "problem": r.problem,
                }
                for r in revisions
            ]
            dump_json({"dir": str(model_dir), "revisions": rows})
        else:
            for rev in revisions:
                state = f"verified {rev.verified_at}" if rev.verified else str(rev.problem)
                print(f"{rev.name}  {state}")
        return EXIT_OK
    _check_revision("--pin", args.pin)
    for value in args.protect:
        _check_revision("--protect", value)
    plan = plan_prune(revisions, pinned=args.pin, keep=args.keep, protect=frozenset(args.protect))
    failed: dict[str, str] = {}
    deleted: list[str] = []
    for rev in plan.delete:
        if args.dry_run:
            continue
        try:
            delete_revision(rev, model_dir)
            deleted.append(rev.name)
        except (OSError, ValueError) as exc:
            failed[rev.name] = str(exc)
    report: dict[str, Any] = {
        "dir": str(model_dir),
        "pinned": args.pin,
        "keep": args.keep,
        "kept": [r.name for r in plan.keep],
        "deleted": deleted,
        "would_delete": [r.name for r in plan.delete] if args.dry_run else [],
        "unverified": [r.name for r in plan.unverified],
        "failed": failed,
        "reasons": plan.reasons,
    }
    if args.json:
        dump_json(report)
    else:
        for rev in plan.keep:
            print(f"keep    {rev.name}  ({plan.reasons[rev.name]})")
        for rev in plan.delete:
            verb = "would delete" if args.dry_run else ("FAILED" if rev.name in failed else "deleted")
            print(f"{verb:<7} {rev.name}  ({failed.get(rev.name) or plan.reasons[rev.name]})")
        for rev in plan.unverified:
            print(f"left    {rev.name}  ({plan.reasons[rev.name]})")
    return EXIT_FAIL if failed else EXIT_OK
