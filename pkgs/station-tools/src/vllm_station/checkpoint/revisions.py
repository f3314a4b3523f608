"""Revisions of one model side by side: `<dir>/revisions/<revision>/`, each with its own stamp.

The layout is modules/lib/contract.nix's `revisionDir` (a test pins the two together). A download unit
fetches the pinned revision into its own directory beside the ones already there, so a rollback (the
pin set back) finds the old revision verified and downloads nothing. `plan_prune` decides which old
revisions go once a new one verified; `prune` deletes them. Pure apart from reading stamps and
deleting directories; no CLI.

What is kept, in this order, and never deleted:
1. the pinned revision (the one the serving unit loads, or is about to) and every `protect`ed one;
2. the newest other *verified* revisions, by the time their stamp records, until `keep` verified
   revisions are kept in all (the pinned one counts when it is verified).
A directory without a usable stamp (an interrupted download of an abandoned revision, a copy being
made) is not a revision anyone can serve; it is reported and left alone, never deleted by pruning.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from vllm_station.checkpoint.stamp import STAMP_NAME, StampError, StampMissing, read_stamp

REVISIONS_DIR_NAME = "revisions"
# A revision names one directory: no separators, no dot-only names (a branch name passes, `a/b` does not).
_REVISION = re.compile(r"[A-Za-z0-9._-]+")


def valid_revision(revision: str) -> bool:
    return bool(_REVISION.fullmatch(revision)) and revision not in (".", "..")


def revisions_root(model_dir: Path) -> Path:
    return model_dir / REVISIONS_DIR_NAME


def revision_dir(model_dir: Path, revision: str) -> Path:
    """`<model_dir>/revisions/<revision>` (contract.nix `revisionDir`).

    ValueError for a name that is not one directory."""
    if not valid_revision(revision):
        raise ValueError(f"revision {revision!r} cannot name a directory (letters, digits, '.', '_', '-')")
    return revisions_root(model_dir) / revision


@dataclass(frozen=True)
class Revision:
    """One directory under `<model_dir>/revisions`."""

    name: str
    path: Path
    verified_at: str | None  # the stamp's time; None without a usable stamp
    stamp_revision: str | None  # what the stamp records (a branch pin records the commit)
    problem: str | None  # why it counts as unverified: "not verified (… missing)", "unusable stamp: …"

    @property
    def verified(self) -> bool:
        return self.problem is None


def list_revisions(model_dir: Path) -> list[Revision]:
    """Every directory under `<model_dir>/revisions`, sorted by name; [] when there is none."""
    root = revisions_root(model_dir)
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    out: list[Revision] = []
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path)
        try:
            stamp = read_stamp(path / STAMP_NAME)
        except StampError as err:
            problem = f"not verified ({STAMP_NAME} missing)" if err.problem == "missing" else err.problem
            out.append(Revision(entry.name, path, None, None, problem))
            continue
        out.append(Revision(entry.name, path, stamp.verified_at, stamp.revision, None))
    return out


@dataclass
class PrunePlan:
    keep: list[Revision] = field(default_factory=list)
    delete: list[Revision] = field(default_factory=list)
    unverified: list[Revision] = field(default_factory=list)  # left alone
    reasons: dict[str, str] = field(default_factory=dict)  # name -> why kept / deleted


def plan_prune(
    revisions: list[Revision], *, pinned: str, keep: int, protect: frozenset[str] = frozenset()
) -> PrunePlan:
    """Which revisions stay and which go (see the module's docstring). ValueError when keep < 1."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (the pinned revision), got {keep}")
    plan = PrunePlan()
    held = {pinned} | set(protect)
    kept_verified = 0
    for rev in revisions:
        if rev.name in held:
            plan.keep.append(rev)
            plan.reasons[rev.name] = "pinned" if rev.name == pinned else "protected"
            kept_verified += rev.verified
    # Newest first; a stamp without a time sorts last, then by name so that the order is total.
    others = sorted(
        (r for r in revisions if r.name not in held and r.verified),
        key=lambda r: (r.verified_at or "", r.name),
        reverse=True,
    )
    for rev in others:
        if kept_verified < keep:
            plan.keep.append(rev)
            plan.reasons[rev.name] = f"one of the {keep} newest verified"
            kept_verified += 1
        else:
            plan.delete.append(rev)
            plan.reasons[rev.name] = f"older than the {keep} kept verified revision(s)"
    for rev in revisions:
        if rev.name not in held and not rev.verified:
            plan.unverified.append(rev)
            plan.reasons[rev.name] = f"left alone: {rev.problem}"
    return plan


def delete_revision(rev: Revision, model_dir: Path) -> None:
    """Delete one revision's directory, its stamp first (a half-deleted revision never looks verified).

    Refuses a path that is not directly under `<model_dir>/revisions` (raises ValueError); OSError
    from the file system propagates.
    """
    root = revisions_root(model_dir)
    if rev.path.parent != root or rev.path.is_symlink() or not valid_revision(rev.name):
        raise ValueError(f"{rev.path} is not a revision directory under {root}")
    with contextlib.suppress(FileNotFoundError):
        (rev.path / STAMP_NAME).unlink()
    shutil.rmtree(rev.path)


@dataclass(frozen=True)
class Adoption:
    """What `adopt_flat_checkpoint` did with a checkpoint written straight into `<model_dir>`."""

    revision: str | None  # the revision directory it went to; None: nothing moved
    moved: list[str]
    note: str


def adopt_flat_checkpoint(model_dir: Path) -> Adoption:
    """Move a verified checkpoint that sits directly in `model_dir` (the layout before revisions) into
    `<model_dir>/revisions/<the revision its stamp records>`: renames on one file system, nothing copied,
    so an upgrade of the tools does not download it again. Nothing moves without a stamp naming a
    revision, or when that revision's directory exists already. OSError propagates."""
    try:
        stamp = read_stamp(model_dir / STAMP_NAME)
    except StampMissing:
        return Adoption(None, [], f"nothing to adopt: no checkpoint verified directly in {model_dir}")
    except StampError as err:
        return Adoption(None, [], f"nothing to adopt in {model_dir}: {err.problem}")
    if stamp.revision is None or not valid_revision(stamp.revision):
        note = f"{model_dir / STAMP_NAME} names no usable revision ({stamp.revision!r}); left as is"
        return Adoption(None, [], note)
    target = revision_dir(model_dir, stamp.revision)
    if target.exists():
        return Adoption(None, [], f"{target} exists already; {model_dir} left as is")
    target.mkdir(parents=True)
    moved: list[str] = []
    # The stamp last: a crash half-way leaves the flat copy unstamped, never a stamp over missing files.
    names = sorted(n for n in os.listdir(model_dir) if n not in (REVISIONS_DIR_NAME, STAMP_NAME))
    for name in [*names, STAMP_NAME]:
        os.rename(model_dir / name, target / name)
        moved.append(name)
    return Adoption(stamp.revision, moved, f"moved {len(moved)} entries of {model_dir} into {target}")
