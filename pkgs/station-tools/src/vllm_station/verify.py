"""`station verify DIR`: check a safetensors checkpoint before anything loads it; stamp it only if it passes.

Checks, in order (every problem is collected, each naming its file; nothing stops at the first one):

1. ``config.json`` parses; ``architectures`` and ``quantization_config.quant_algo`` (falling back to
   ``hf_quant_config.json``'s ``quantization.quant_algo``, the ModelOpt layout) match ``--expect-arch`` /
   ``--expect-quant-algo``.
2. ``model.safetensors.index.json`` (or a lone ``model.safetensors``): every listed shard exists and is a
   regular file, ``--expect-shards`` matches the number of distinct shards.
3. Each shard's header, read with the documented format (8-byte little-endian length, JSON header, data):
   the JSON parses, every tensor's offsets are sane, its byte length fits its dtype and shape, the tensors
   tile the data area exactly and the data area ends exactly at the end of the file (a truncated or padded
   shard fails). Only the headers are read: seconds for hundreds of GB.
4. The index and the headers agree: every tensor of every shard is in the index and the index places every
   tensor in a shard that holds it.
5. ``--sha256``: every file recorded by ``station download`` in ``.station-hashes.json`` is streamed (16 MiB
   reads, a few files at once, pages dropped from the page cache behind the reader) and compared with the
   hub's record: the LFS sha256 for large files, the git blob id (sha1 of ``blob <size>\\0<bytes>``) for
   small ones.
   Without a record there is nothing to compare with, and --sha256 fails rather than pretend.

The stamp ``.station-verified.json`` is removed when verification starts and written (atomically) only when
every check passed, so an interrupted or failed run never leaves a stamp behind.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import logging
import os
import stat
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vllm_station.errors import CheckFailed, UsageError
from vllm_station.report import dump_json, table

HELP = "verify a checkpoint: config, index, shard headers, optional sha256; write a stamp"

log = logging.getLogger("vllm_station.verify")

STAMP_NAME = ".station-verified.json"
HASHES_NAME = ".station-hashes.json"
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
QUANT_CONFIG_NAME = "hf_quant_config.json"
EXCLUDED_DIRS = frozenset({".cache"})  # huggingface_hub's local-dir metadata (.cache/huggingface/...)
EXCLUDED_FILES = frozenset({STAMP_NAME, HASHES_NAME})
MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit
HASH_CHUNK = 16 * 1024 * 1024
MAX_LISTED = 5  # problems of one kind per file before "and N more"

# bits per element; unknown dtypes skip the size check (still offsets and coverage)
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}  # fmt: skip


@dataclass
class Expectations:
    arch: list[str] | None = None
    quant_algo: str | None = None
    shards: int | None = None


@dataclass
class Problem:
    path: str
    problem: str


@dataclass
class FileEntry:
    path: str
    size: int
    sha256: str | None = None


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
            "recorded_at": _now(),
            "files": {
                p: {"size": f.size, "sha256": f.sha256, "git_blob_sha1": f.git_blob_sha1}
                for p, f in sorted(self.files.items())
            },
        }


@dataclass
class VerifyReport:
    ok: bool
    dir: str
    repo: str | None
    revision: str | None
    architectures: list[str]
    quant_algo: str | None
    shards: int
    tensors: int
    total_bytes: int
    sha256_checked: bool
    seconds: float
    stamp: str | None
    membind: str | None = None  # the memory policy while streaming (--sha256), read back from the kernel
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    files: list[FileEntry] = field(default_factory=list)


@dataclass
class TensorInfo:
    dtype: str
    shape: list[int]
    begin: int
    end: int


class ShardError(Exception):
    """One shard's header is unreadable or inconsistent (the message is the problem)."""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _read_error(exc: OSError) -> str:
    if isinstance(exc, IsADirectoryError):
        return "cannot read: it is a directory, not a file"
    return f"cannot read: {exc.strerror or exc}"


def read_shard_header(path: Path) -> dict[str, TensorInfo]:
    """Parse a safetensors header and check it against the file size. Raises ShardError."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise ShardError(f"file is {size} bytes, too short for a safetensors header (truncated?)")
            (header_len,) = struct.unpack("<Q", f.read(8))
            if header_len > MAX_HEADER_BYTES:
                raise ShardError(
                    f"header length {header_len} exceeds {MAX_HEADER_BYTES}: not a safetensors file"
                )
            if 8 + header_len > size:
                raise ShardError(
                    f"header length {header_len} runs past the end of the file ({size} bytes): truncated?"
                )
            raw = f.read(header_len)
    except OSError as exc:
        raise ShardError(_read_error(exc)) from exc
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ShardError(f"header is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise ShardError("header is not a JSON object")
    data_len = size - 8 - header_len
    tensors: dict[str, TensorInfo] = {}
    bad: list[str] = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = entry["dtype"]
            shape = entry["shape"]
            begin, end = entry["data_offsets"]
            if not (isinstance(dtype, str) and isinstance(shape, list)):
                raise TypeError
            if not all(isinstance(d, int) and d >= 0 for d in shape):
                raise TypeError
            if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end):
                raise TypeError
        except (KeyError, TypeError, ValueError):
            bad.append(f"tensor {name!r} has a malformed entry {json.dumps(entry)[:120]}")
            continue
        bits = DTYPE_BITS.get(dtype)
        if bits is not None:
            count = 1
            for d in shape:
                count *= d
            if (count * bits + 7) // 8 != end - begin:
                bad.append(
                    f"tensor {name!r} ({dtype} {shape}) needs {(count * bits + 7) // 8} bytes, "
                    f"its offsets span {end - begin}"
                )
        tensors[name] = TensorInfo(dtype=dtype, shape=shape, begin=begin, end=end)
    if bad:
        raise ShardError(_join_limited(bad))
    pos = 0
    for name, t in sorted(tensors.items(), key=lambda kv: (kv[1].begin, kv[1].end)):
        if t.begin != pos:
            what = "overlaps the previous tensor" if t.begin < pos else f"leaves a {t.begin - pos}-byte hole"
            raise ShardError(f"tensor {name!r} at offset {t.begin} {what} (expected {pos})")
        pos = t.end
    if pos > data_len:
        raise ShardError(
            f"truncated: the header describes {pos} data bytes, the file holds {data_len} "
            f"({pos - data_len} missing; file size {size})"
        )
    if pos < data_len:
        raise ShardError(f"{data_len - pos} unexpected bytes after the last tensor (file size {size})")
    return tensors


def _join_limited(items: list[str]) -> str:
    text = "; ".join(items[:MAX_LISTED])
    if len(items) > MAX_LISTED:
        text += f"; and {len(items) - MAX_LISTED} more"
    return text


def _load_json(path: Path) -> Any:
    """Parsed JSON or a ShardError-like message via ValueError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ValueError("missing") from exc
    except OSError as exc:
        raise ValueError(_read_error(exc)) from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc}") from exc


def read_hash_record(directory: Path) -> HashRecord | None:
    """The hashes `station download` recorded, or None when absent. Raises ValueError when unreadable."""
    path = directory / HASHES_NAME
    if not path.exists():
        return None
    data = _load_json(path)
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


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_hash_record(directory: Path, record: HashRecord) -> None:
    write_json_atomic(directory / HASHES_NAME, record.to_json())


def remove_stamp(directory: Path) -> bool:
    """Remove a stamp; True when one was there."""
    try:
        (directory / STAMP_NAME).unlink()
    except FileNotFoundError:
        return False
    return True


def list_files(directory: Path) -> tuple[list[FileEntry], list[Problem]]:
    """Every regular file under directory (relative paths), minus station's own files and .cache/."""
    entries: list[FileEntry] = []
    problems: list[Problem] = []

    def walk_error(exc: OSError) -> None:
        rel = Path(exc.filename).relative_to(directory).as_posix() if exc.filename else str(directory)
        problems.append(Problem(rel, _read_error(exc)))

    for root, dirs, files in os.walk(directory, onerror=walk_error):
        rel_root = Path(root).relative_to(directory)
        dirs[:] = sorted(d for d in dirs if not (rel_root == Path(".") and d in EXCLUDED_DIRS))
        for name in sorted(files):
            rel = (rel_root / name).as_posix()
            if rel in EXCLUDED_FILES or name.endswith(".incomplete"):
                continue
            try:
                st = os.stat(Path(root) / name)
            except OSError as exc:
                problems.append(Problem(rel, _read_error(exc)))
                continue
            entries.append(FileEntry(path=rel, size=st.st_size))
    entries.sort(key=lambda e: e.path)
    return entries, problems


def _hash_file(path: Path, want_blob: bool) -> tuple[str, str | None]:
    """(sha256, git blob sha1 or None) of a file, streamed; its pages are dropped from the cache behind us."""
    sha = hashlib.sha256()
    blob = None
    size = path.stat().st_size
    if want_blob:
        blob = hashlib.sha1(usedforsecurity=False)
        blob.update(f"blob {size}\0".encode())
    buf = bytearray(HASH_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
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


def _is_within(directory: Path, rel: str) -> bool:
    p = Path(rel)
    return not p.is_absolute() and ".." not in p.parts


def verify_checkpoint(
    directory: Path,
    expect: Expectations | None = None,
    *,
    sha256: bool = False,
    repo: str | None = None,
    revision: str | None = None,
    write_stamp: bool = True,
    hash_workers: int = 4,
    on_progress: Callable[[str], None] | None = None,
) -> VerifyReport:
    """Run every check on a checkpoint directory; write the stamp only when all pass."""
    started = time.monotonic()
    expect = expect or Expectations()
    directory = Path(directory)
    problems: list[Problem] = []
    warnings: list[str] = []
    report = VerifyReport(
        ok=False, dir=str(directory), repo=repo, revision=revision, architectures=[], quant_algo=None,
        shards=0, tensors=0, total_bytes=0, sha256_checked=False, seconds=0.0, stamp=None,
        problems=problems, warnings=warnings,
    )  # fmt: skip

    try:
        is_dir = stat.S_ISDIR(os.stat(directory).st_mode)
        os.listdir(directory)
    except FileNotFoundError:
        is_dir = False
    except OSError as exc:
        problems.append(Problem(str(directory), _read_error(exc)))
        report.seconds = round(time.monotonic() - started, 3)
        return report
    if not is_dir:
        problems.append(Problem(str(directory), "not a directory (nothing to verify)"))
        report.seconds = round(time.monotonic() - started, 3)
        return report
    if write_stamp:
        try:
            if remove_stamp(directory):
                log.info("removed the previous stamp %s before verifying", directory / STAMP_NAME)
        except OSError as exc:
            problems.append(Problem(STAMP_NAME, f"cannot remove the previous stamp: {exc.strerror or exc}"))
            report.seconds = round(time.monotonic() - started, 3)
            return report
    try:
        _run_checks(directory, expect, report, sha256, hash_workers, on_progress)
    except OSError as exc:  # a safety net: whatever could not be read is a failure, never a traceback
        problems.append(Problem(str(exc.filename or directory), _read_error(exc)))

    report.ok = not problems
    report.seconds = round(time.monotonic() - started, 3)
    if report.ok and write_stamp:
        stamp = {
            "version": 1,
            "repo": report.repo,
            "revision": report.revision,
            "verified_at": _now(),
            "sha256_checked": report.sha256_checked,
            "architectures": report.architectures,
            "quant_algo": report.quant_algo,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in report.files],
        }
        try:
            write_json_atomic(directory / STAMP_NAME, stamp)
        except OSError as exc:
            problems.append(Problem(STAMP_NAME, f"cannot write the stamp: {exc.strerror or exc}"))
            report.ok = False
            return report
        report.stamp = str(directory / STAMP_NAME)
    return report


def _run_checks(
    directory: Path,
    expect: Expectations,
    report: VerifyReport,
    sha256: bool,
    hash_workers: int,
    on_progress: Callable[[str], None] | None,
) -> None:
    problems = report.problems

    record: HashRecord | None = None
    try:
        record = read_hash_record(directory)
    except ValueError as exc:
        problems.append(Problem(HASHES_NAME, str(exc)))
    if record is not None:
        report.repo = report.repo or record.repo
        report.revision = report.revision or record.revision

    files, listing_problems = list_files(directory)
    problems.extend(listing_problems)
    report.files = files
    report.total_bytes = sum(f.size for f in files)

    _check_config(directory, expect, report)
    shard_names, weight_map = _check_index(directory, expect, report)

    # shard headers + agreement with the index
    tensor_total = 0
    for shard in shard_names:
        path = directory / shard
        if not path.exists():
            continue  # already reported by the index check
        try:
            tensors = read_shard_header(path)
        except ShardError as exc:
            problems.append(Problem(shard, str(exc)))
            continue
        tensor_total += len(tensors)
        if weight_map is not None:
            not_indexed = sorted(t for t in tensors if t not in weight_map)
            misplaced = sorted(t for t in tensors if t in weight_map and weight_map[t] != shard)
            if not_indexed:
                problems.append(
                    Problem(shard, "tensors missing from the index: " + _join_limited(not_indexed))
                )
            if misplaced:
                problems.append(
                    Problem(
                        shard, "the index places these tensors in another shard: " + _join_limited(misplaced)
                    )
                )
            absent = sorted(t for t, s in weight_map.items() if s == shard and t not in tensors)
            if absent:
                problems.append(Problem(shard, "indexed tensors not in this shard: " + _join_limited(absent)))
    report.tensors = tensor_total

    if sha256:
        _check_hashes(directory, files, shard_names, record, report, hash_workers, on_progress)


def _check_config(directory: Path, expect: Expectations, report: VerifyReport) -> None:
    problems = report.problems
    try:
        config = _load_json(directory / CONFIG_NAME)
    except ValueError as exc:
        problems.append(Problem(CONFIG_NAME, str(exc)))
        return
    if not isinstance(config, dict):
        problems.append(Problem(CONFIG_NAME, "not a JSON object"))
        return
    arch = config.get("architectures")
    if arch is not None and not (isinstance(arch, list) and all(isinstance(a, str) for a in arch)):
        problems.append(Problem(CONFIG_NAME, f"'architectures' is not a list of names: {arch!r}"))
        arch = None
    report.architectures = list(arch or [])
    if expect.arch is not None and report.architectures != expect.arch:
        problems.append(
            Problem(CONFIG_NAME, f"architectures is {report.architectures}, expected {expect.arch}")
        )

    quant_algo: str | None = None
    source = f"{CONFIG_NAME} quantization_config.quant_algo"
    qc = config.get("quantization_config")
    if isinstance(qc, dict) and isinstance(qc.get("quant_algo"), str):
        quant_algo = qc["quant_algo"]
    elif (directory / QUANT_CONFIG_NAME).exists():
        source = f"{QUANT_CONFIG_NAME} quantization.quant_algo"
        try:
            hq = _load_json(directory / QUANT_CONFIG_NAME)
        except ValueError as exc:
            problems.append(Problem(QUANT_CONFIG_NAME, str(exc)))
            hq = None
        q = hq.get("quantization") if isinstance(hq, dict) else None
        if isinstance(q, dict) and isinstance(q.get("quant_algo"), str):
            quant_algo = q["quant_algo"]
    report.quant_algo = quant_algo
    if expect.quant_algo is not None and quant_algo != expect.quant_algo:
        found = f"is {quant_algo!r}" if quant_algo is not None else "is absent"
        problems.append(Problem(CONFIG_NAME, f"{source} {found}, expected {expect.quant_algo!r}"))


def _check_index(
    directory: Path, expect: Expectations, report: VerifyReport
) -> tuple[list[str], dict[str, str] | None]:
    """The shard list and the weight map (None for a single unindexed shard)."""
    problems = report.problems
    index_path = directory / INDEX_NAME
    shards: list[str] = []
    weight_map: dict[str, str] | None = None
    if index_path.exists() or index_path.is_symlink():
        try:
            index = _load_json(index_path)
        except ValueError as exc:
            problems.append(Problem(INDEX_NAME, str(exc)))
            return [], None
        wm = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()) or not wm:
            problems.append(Problem(INDEX_NAME, "no 'weight_map' object of tensor -> shard file names"))
            return [], None
        weight_map = {str(k): v for k, v in wm.items()}
        for name in sorted(set(weight_map.values())):
            if not _is_within(directory, name):
                problems.append(Problem(INDEX_NAME, f"names a shard outside the directory: {name!r}"))
                continue
            shards.append(name)
            p = directory / name
            if not p.exists():
                problems.append(Problem(name, f"listed in {INDEX_NAME} but missing"))
            elif not p.is_file():
                problems.append(Problem(name, f"listed in {INDEX_NAME} but not a regular file"))
        on_disk = {f.path for f in report.files if f.path.endswith(".safetensors")}
        stray = sorted(on_disk - set(shards))
        if stray:
            report.warnings.append(
                f"shards not referenced by {INDEX_NAME} (ignored): " + _join_limited(stray)
            )
    elif (directory / SINGLE_NAME).exists():
        shards = [SINGLE_NAME]
    else:
        others = sorted(f.path for f in report.files if f.path.endswith(".safetensors"))
        what = f"{len(others)} .safetensors files but" if others else "no .safetensors files and"
        problems.append(Problem(INDEX_NAME, f"missing: {what} no index (and no single {SINGLE_NAME})"))
    report.shards = len(shards)
    if expect.shards is not None and len(shards) != expect.shards:
        where = INDEX_NAME if weight_map is not None else SINGLE_NAME
        problems.append(Problem(where, f"lists {len(shards)} shards, expected {expect.shards}"))
    return shards, weight_map


def _check_hashes(
    directory: Path,
    files: list[FileEntry],
    shard_names: list[str],
    record: HashRecord | None,
    report: VerifyReport,
    workers: int,
    on_progress: Callable[[str], None] | None,
) -> None:
    problems = report.problems
    if record is None:
        problems.append(
            Problem(
                HASHES_NAME,
                "missing: --sha256 compares with the hub's hashes that `station download` records here; "
                "without them nothing can be compared (download with `station download`, or copy the "
                "directory together with this file)",
            )
        )
        return
    by_path = {f.path: f for f in files}
    todo: list[tuple[FileEntry, RecordedFile]] = []
    for rel, rec in sorted(record.files.items()):
        entry = by_path.get(rel)
        if entry is None:
            if not any(p.path == rel for p in problems):
                problems.append(Problem(rel, f"recorded in {HASHES_NAME} but missing"))
            continue
        if rec.size is not None and entry.size != rec.size:
            problems.append(Problem(rel, f"size {entry.size} differs from the recorded {rec.size}"))
            continue
        if rec.sha256 is None and rec.git_blob_sha1 is None:
            problems.append(Problem(rel, f"{HASHES_NAME} records no hash for it"))
            continue
        todo.append((entry, rec))
    must_have = set(shard_names) | {CONFIG_NAME, INDEX_NAME}
    for f in files:
        if f.path not in record.files:
            if f.path in must_have:
                problems.append(Problem(f.path, f"no recorded hash in {HASHES_NAME} to compare with"))
            else:
                report.warnings.append(f"{f.path}: not in {HASHES_NAME}, not compared")

    def one(item: tuple[FileEntry, RecordedFile]) -> tuple[FileEntry, RecordedFile, str, str | None]:
        entry, rec = item
        digest, blob = _hash_file(directory / entry.path, want_blob=rec.sha256 is None)
        return entry, rec, digest, blob

    hashed_ok = True
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(one, item) for item in todo]
        for fut, (entry, _rec) in zip(futures, todo, strict=True):
            try:
                entry, rec, digest, blob = fut.result()
            except OSError as exc:
                problems.append(Problem(entry.path, _read_error(exc)))
                hashed_ok = False
                continue
            if rec.sha256 is not None and digest != rec.sha256.lower():
                problems.append(
                    Problem(
                        entry.path, f"sha256 mismatch: recorded {rec.sha256[:16]}…, file has {digest[:16]}…"
                    )
                )
                hashed_ok = False
            elif rec.sha256 is None and blob != (rec.git_blob_sha1 or "").lower():
                problems.append(
                    Problem(
                        entry.path,
                        f"git blob id mismatch: recorded {(rec.git_blob_sha1 or '')[:16]}…, file has "
                        f"{(blob or '')[:16]}…",
                    )
                )
                hashed_ok = False
            else:
                entry.sha256 = digest
                if on_progress is not None:
                    on_progress(entry.path)
    report.sha256_checked = hashed_ok and not problems


# ---------------------------------------------------------------------------------------------- CLI


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", metavar="DIR", type=Path, help="checkpoint directory")
    parser.add_argument(
        "--expect-arch", metavar="NAME", help="config.json architectures must be [NAME] (A,B: a list)"
    )
    parser.add_argument(
        "--expect-quant-algo", metavar="ALGO", help="quantization_config.quant_algo must be ALGO"
    )
    parser.add_argument("--expect-shards", metavar="N", type=int, help="the index must list exactly N shards")
    parser.add_argument(
        "--sha256",
        action="store_true",
        help=f"also stream every file and compare with the hub hashes recorded in {HASHES_NAME} "
        "(runs bound to NUMA node 0 where libnuma is available)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def expectations_from_args(args: argparse.Namespace) -> Expectations:
    if args.expect_shards is not None and args.expect_shards < 1:
        raise UsageError(f"--expect-shards must be at least 1, got {args.expect_shards}")
    arch = [a.strip() for a in args.expect_arch.split(",") if a.strip()] if args.expect_arch else None
    return Expectations(arch=arch, quant_algo=args.expect_quant_algo, shards=args.expect_shards)


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
    gb = report.total_bytes / 1e9
    verdict = "OK" if report.ok else "NOT VERIFIED"
    print(
        f"verify {report.dir}: {verdict} — {report.shards} shards, {report.tensors:,} tensors, {gb:,.2f} GB, "
        f"architectures {','.join(report.architectures) or '-'}, quant_algo {report.quant_algo or '-'}, "
        f"sha256 {'checked' if report.sha256_checked else 'not checked'} ({report.seconds:.2f} s)"
    )
    for w in report.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if report.problems:
        print(table(["file", "problem"], [(p.path, p.problem) for p in report.problems]))
    if report.stamp:
        print(f"stamp: {report.stamp}")


def failure_message(report: VerifyReport) -> str:
    bad = sorted({p.path for p in report.problems})
    return (
        f"{report.dir} is NOT verified ({len(report.problems)} problem(s) in {', '.join(bad)}); "
        f"no {STAMP_NAME} was written and any old one is removed. First: {report.problems[0].path}: "
        f"{report.problems[0].problem}"
    )


def run(args: argparse.Namespace) -> int:
    expect = expectations_from_args(args)
    membind = bind_for_streaming() if args.sha256 else None
    report = verify_checkpoint(
        args.dir,
        expect,
        sha256=args.sha256,
        on_progress=lambda p: log.info("sha256 ok: %s", p),
    )
    report.membind = membind
    render(report, args.json)
    if not report.ok:
        raise CheckFailed(failure_message(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    from vllm_station.cli import command_main

    return command_main("verify", argv)
