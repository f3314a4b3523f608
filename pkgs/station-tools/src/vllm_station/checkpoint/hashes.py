"""`.station-hashes.json`: the hub's hashes `station download` records, and the streaming hasher that
`station verify --sha256` compares them with (the LFS sha256 for large files, the git blob id — sha1 of
``blob <size>\\0<bytes>`` — for small ones)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_station import bounded
from vllm_station.checkpoint.files import load_json, now_utc, write_json_atomic

HASHES_NAME = ".station-hashes.json"
HASH_CHUNK = 16 * 1024 * 1024


@dataclass
class RecordedFile:
    size: int | None
    sha256: str | None = None
    git_blob_sha1: str | None = None


@dataclass
class HashRecord:
    """`.station-hashes.json`, written by `station download` from the hub's metadata."""

    repo: str | None
    revision: str | None
    files: dict[str, RecordedFile]
    requested_revision: str | None = None
    endpoint: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "repo": self.repo,
            "revision": self.revision,
            "requested_revision": self.requested_revision,
            "endpoint": self.endpoint,
            "recorded_at": now_utc(),
            "files": {
                p: {"size": f.size, "sha256": f.sha256, "git_blob_sha1": f.git_blob_sha1}
                for p, f in sorted(self.files.items())
            },
        }


def read_hash_record(directory: Path) -> HashRecord | None:
    """The hashes `station download` recorded, or None when absent. Raises ValueError when unreadable."""
    path = directory / HASHES_NAME
    if not path.exists():
        return None
    data = load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise ValueError("not a station hash record (no 'files' object)")
    files: dict[str, RecordedFile] = {}
    for rel, entry in data["files"].items():
        if not isinstance(entry, dict):
            raise ValueError(f"entry for {rel!r} is not an object")
        files[str(rel)] = RecordedFile(
            size=entry.get("size"), sha256=entry.get("sha256"), git_blob_sha1=entry.get("git_blob_sha1")
        )
    return HashRecord(
        repo=data.get("repo"),
        revision=data.get("revision"),
        files=files,
        requested_revision=data.get("requested_revision"),
        endpoint=data.get("endpoint"),
    )


def write_hash_record(directory: Path, record: HashRecord) -> None:
    write_json_atomic(directory / HASHES_NAME, record.to_json())


def hash_file(path: Path, want_blob: bool) -> tuple[str, str | None]:
    """(sha256, git blob sha1 or None) of a file, streamed; its pages are dropped from the cache behind us."""
    sha = hashlib.sha256()
    blob = None
    size = path.stat().st_size
    if want_blob:
        blob = hashlib.sha1(usedforsecurity=False)
        blob.update(f"blob {size}\0".encode())
    buf = bytearray(HASH_CHUNK)
    view = memoryview(buf)
    with bounded.open_regular(path) as f:
        fd = f.fileno()
        done = 0
        while True:
            n = f.readinto(buf)
            if not n:
                break
            sha.update(view[:n])
            if blob is not None:
                blob.update(view[:n])
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, done, n, os.POSIX_FADV_DONTNEED)
            done += n
    return sha.hexdigest(), blob.hexdigest() if blob is not None else None
