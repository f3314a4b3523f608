"""`.station-verified.json`: the proof that `station verify` passed on a checkpoint directory.

Version 1, written atomically by verify only when every check passed (and removed when a verification
or a download starts)::

    {"version": 1, "repo": "org/name" | null, "revision": "<40-hex>" | null,
     "verified_at": "2026-01-01T00:00:00Z", "sha256_checked": false,
     "architectures": ["..."], "quant_algo": "NVFP4" | null,
     "files": [{"path": "config.json", "size": 1234, "sha256": "<hex>" | null}, ...]}

Every reader goes through `Stamp.from_json` (`read_stamp` for a file), which accepts only a complete
stamp: version 1, a `verified_at` time and a non-empty `files` list of relative paths with sizes. A
stamp says what was verified, not that it is still there: `changed_files` compares its list with the
directory (`station gate stamp` and preflight's `model` check refuse on any difference).

Readers: `station gate stamp` (the serving unit's start gate), preflight's `model` and `pair-revision`
checks, and the pair beacon that publishes the stamp to the peer.
"""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from vllm_station import bounded
from vllm_station.checkpoint.files import now_utc, read_error, write_json_atomic

STAMP_NAME = ".station-verified.json"
STAMP_VERSION = 1


class StampError(ValueError):
    """A stamp is missing, unreadable or not a version-1 stamp. `str(err)` names the problem."""

    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


class StampMissing(StampError):
    """There is no stamp: the checkpoint was never verified (or a verification/download is running)."""


@dataclass
class StampFile:
    path: str
    size: int | None
    sha256: str | None = None


@dataclass
class Stamp:
    repo: str | None
    revision: str | None
    verified_at: str | None
    sha256_checked: bool
    architectures: list[str]
    quant_algo: str | None
    files: list[StampFile]
    version: int = STAMP_VERSION
    has_revision: bool = True  # False when the JSON has no "revision" key at all
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "repo": self.repo,
            "revision": self.revision,
            "verified_at": self.verified_at,
            "sha256_checked": self.sha256_checked,
            "architectures": self.architectures,
            "quant_algo": self.quant_algo,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
        }

    def file_sizes(self) -> dict[str, int | None]:
        return {f.path: f.size for f in self.files}

    @classmethod
    def from_json(cls, data: Any, where: Path | str) -> Stamp:
        """A stamp from parsed JSON (a file, or the peer's beacon). Raises StampError."""
        if not isinstance(data, dict):
            raise StampError(where, f"not a JSON object ({type(data).__name__}): not a verify stamp")
        version = data.get("version")
        if type(version) is not int or version != STAMP_VERSION:  # `true == 1` in Python: not a version
            raise StampError(
                where, f"unknown stamp version {data.get('version')!r} (expected {STAMP_VERSION})"
            )
        entries = data.get("files")
        if not isinstance(entries, list):
            raise StampError(where, "no 'files' list: not a complete verify stamp")
        if not entries:
            raise StampError(where, "an empty 'files' list: verify never writes one, not a verify stamp")
        files: list[StampFile] = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise StampError(where, f"files[{i}] is not an object with a 'path' and a 'size'")
            path, size, sha = entry.get("path"), entry.get("size"), entry.get("sha256")
            if not isinstance(path, str) or not _is_relative_inside(path):
                raise StampError(where, f"files[{i}] has no relative 'path' inside the checkpoint: {path!r}")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise StampError(where, f"files[{i}] ({path}) has no 'size' in bytes: {size!r}")
            if sha is not None and not isinstance(sha, str):
                raise StampError(where, f"files[{i}] ({path}) has a 'sha256' that is not a string: {sha!r}")
            files.append(StampFile(path=path, size=size, sha256=sha))
        verified_at = data.get("verified_at")
        if not isinstance(verified_at, str) or not verified_at:
            raise StampError(where, f"no 'verified_at' time: {verified_at!r}; not a verify stamp")
        for key in ("repo", "revision", "verified_at", "quant_algo"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise StampError(where, f"'{key}' is not a string: {json.dumps(data[key])[:80]}")
        arch = data.get("architectures")
        return cls(
            repo=data.get("repo"),
            revision=data.get("revision"),
            verified_at=data.get("verified_at"),
            sha256_checked=data.get("sha256_checked") is True,
            architectures=[a for a in arch if isinstance(a, str)] if isinstance(arch, list) else [],
            quant_algo=data.get("quant_algo"),
            files=files,
            has_revision="revision" in data,
            raw=dict(data),
        )


def _is_relative_inside(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return bool(parts) and not path.startswith("/") and ".." not in parts


def changed_files(stamp: Stamp, directory: Path) -> list[str]:
    """How the directory differs from the files the stamp lists: each listed file must be there, a
    regular file of the listed size. One short line per difference ("NAME missing",
    "NAME 4097 B != 4096 B"); empty when the directory holds what was verified."""
    changed: list[str] = []
    for entry in stamp.files:
        try:
            st = (directory / entry.path).stat()
        except FileNotFoundError:
            changed.append(f"{entry.path} missing")
            continue
        except OSError as exc:
            changed.append(f"{entry.path} {read_error(exc)}")
            continue
        if not stat.S_ISREG(st.st_mode):
            changed.append(f"{entry.path} is not a regular file")
        elif entry.size is not None and st.st_size != entry.size:
            changed.append(f"{entry.path} {st.st_size} B != {entry.size} B")
    return changed


def stamp_path(dir_or_file: Path) -> Path:
    """The stamp of a checkpoint directory, or the path itself when it names a stamp file."""
    if dir_or_file.name != STAMP_NAME and dir_or_file.is_dir():
        return dir_or_file / STAMP_NAME
    return dir_or_file


def read_stamp(dir_or_file: Path) -> Stamp:
    """The stamp of a checkpoint directory (or a stamp file). Raises StampMissing or StampError."""
    path = stamp_path(Path(dir_or_file))
    try:
        text = bounded.read_text(path, limit=bounded.CONFIG_LIMIT)
    except FileNotFoundError as exc:
        raise StampMissing(path, "missing") from exc
    except OSError as exc:
        raise StampError(path, read_error(exc)) from exc
    except UnicodeDecodeError as exc:
        raise StampError(path, f"not UTF-8 text: {exc}") from exc
    try:
        data = bounded.loads_json(text)
    except json.JSONDecodeError as exc:
        raise StampError(path, f"not valid JSON: {exc}") from exc
    return Stamp.from_json(data, path)


def write_stamp(directory: Path, stamp: Stamp) -> Path:
    """Write the stamp atomically (a reader never sees half a stamp). Raises OSError."""
    path = directory / STAMP_NAME
    data = stamp.to_json()
    data["verified_at"] = stamp.verified_at or now_utc()
    write_json_atomic(path, data)
    return path


def remove_stamp(directory: Path) -> bool:
    """Remove a directory's stamp; True when one was there. Raises OSError when it cannot."""
    try:
        (directory / STAMP_NAME).unlink()
    except FileNotFoundError:
        return False
    return True
