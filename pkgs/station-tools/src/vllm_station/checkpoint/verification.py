"""The checkpoint verification core behind `station verify` and `station download` (no CLI).

Checks, in order (every problem is collected, each naming its file; nothing stops at the first one):

1. ``config.json`` parses; ``architectures`` and ``quantization_config.quant_algo`` (falling back to
   ``hf_quant_config.json``'s ``quantization.quant_algo``, the ModelOpt layout) match the expected
   architectures / quant algo.
2. ``model.safetensors.index.json`` (or a lone ``model.safetensors``): every listed shard exists and is a
   regular file, the expected shard count matches the number of distinct shards.
3. Each shard's header (`vllm_station.checkpoint.safetensors`): offsets, dtype sizes, exact tiling of the
   data area up to the end of the file. Only the headers are read: seconds for hundreds of GB.
4. The index and the headers agree: every tensor of every shard is in the index and the index places every
   tensor in a shard that holds it.
5. ``sha256``: every file recorded by ``station download`` in ``.station-hashes.json`` is streamed (16 MiB
   reads, a few files at once, pages dropped from the page cache behind the reader) and compared with the
   hub's record. Without a record there is nothing to compare with, and it fails rather than pretend.

The stamp (`vllm_station.checkpoint.stamp`) is removed when verification starts and written (atomically)
only when every check passed, so an interrupted or failed run never leaves a stamp behind.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import shlex
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vllm_station.checkpoint.files import join_limited, load_json, now_utc, read_error
from vllm_station.checkpoint.hashes import HASHES_NAME, HashRecord, RecordedFile, hash_file, read_hash_record
from vllm_station.checkpoint.layout import CONFIG_NAME, INDEX_NAME, QUANT_CONFIG_NAME, SINGLE_NAME
from vllm_station.checkpoint.safetensors import ShardError, read_shard_header
from vllm_station.checkpoint.stamp import STAMP_NAME, Stamp, StampFile, remove_stamp
from vllm_station.checkpoint.stamp import write_stamp as write_stamp_file
from vllm_station.errors import UsageError
from vllm_station.report import table

log = logging.getLogger("vllm_station.checkpoint")

EXCLUDED_DIRS = frozenset({".cache"})  # huggingface_hub's local-dir metadata (.cache/huggingface/...)
EXCLUDED_FILES = frozenset({STAMP_NAME, HASHES_NAME})


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
    # an old stamp verify could not remove: it still stands and still says "verified" (the error follows)
    stamp_left: str | None = None
    partial: bool = False  # Ctrl-C stopped the checks: what ran is reported, nothing is stamped


def _kind_problem(mode: int) -> str | None:
    """Why a file of this mode does not belong in a checkpoint, or None for a plain regular file."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):  # fmt: skip
        if test(mode):
            return f"it is {name}: a checkpoint holds regular files only; remove it"
    if not stat.S_ISREG(mode):
        return "it is not a regular file: a checkpoint holds regular files only; remove it"
    if mode & (stat.S_ISUID | stat.S_ISGID):
        return (f"mode {stat.S_IMODE(mode):04o} has the setuid/setgid bit: a checkpoint holds data, not "
                "programs; chmod ug-s it")  # fmt: skip
    return None


def list_files(directory: Path) -> tuple[list[FileEntry], list[Problem]]:
    """Every regular file under directory (relative paths), minus station's own files and .cache/.

    Anything else is a problem, so it is never stamped: a FIFO, a device node or a socket (a hostile
    copy source could plant them), a setuid/setgid file, a symlink that leaves the directory or does not
    end at a regular file, a symlink to a directory (never walked, so never checked)."""
    entries: list[FileEntry] = []
    problems: list[Problem] = []
    top = os.path.realpath(directory)

    def walk_error(exc: OSError) -> None:
        rel = Path(exc.filename).relative_to(directory).as_posix() if exc.filename else str(directory)
        problems.append(Problem(rel, read_error(exc)))

    def inside(path: Path) -> bool:
        real = os.path.realpath(path)
        return real == top or real.startswith(top.rstrip("/") + "/")

    for root, dirs, files in os.walk(directory, onerror=walk_error):
        rel_root = Path(root).relative_to(directory)
        dirs[:] = sorted(d for d in dirs if not (rel_root == Path(".") and d in EXCLUDED_DIRS))
        for name in [d for d in dirs if os.path.islink(Path(root) / d)]:
            problems.append(Problem((rel_root / name).as_posix(),
                                    "a symlink to a directory: copy the directory itself"))  # fmt: skip
        for name in sorted(files):
            rel = (rel_root / name).as_posix()
            if rel in EXCLUDED_FILES or name.endswith(".incomplete"):
                continue
            path = Path(root) / name
            try:
                if os.path.islink(path) and not inside(path):
                    problems.append(Problem(rel, f"a symlink out of {directory}: copy the file itself"))
                    continue
                st = os.stat(path)
            except OSError as exc:
                problems.append(Problem(rel, read_error(exc)))
                continue
            why = _kind_problem(st.st_mode)
            if why is not None:
                problems.append(Problem(rel, why))
                continue
            entries.append(FileEntry(path=rel, size=st.st_size))
    entries.sort(key=lambda e: e.path)
    return entries, problems


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
        problems.append(Problem(str(directory), read_error(exc)))
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
            left = directory / STAMP_NAME
            report.stamp_left = str(left)
            problems.append(
                Problem(
                    str(left),
                    f"cannot remove the previous stamp: {exc.strerror or exc}; it still stands and still "
                    f"says this checkpoint is verified — remove it by hand (rm -r {shlex.quote(str(left))}) "
                    "before anything starts from this directory",
                )
            )
            report.seconds = round(time.monotonic() - started, 3)
            return report
    try:
        _run_checks(directory, expect, report, sha256, hash_workers, on_progress)
    except OSError as exc:  # a safety net: whatever could not be read is a failure, never a traceback
        problems.append(Problem(str(exc.filename or directory), read_error(exc)))
    except KeyboardInterrupt:  # a partial report: what was checked, and no stamp
        report.partial = True
        problems.append(Problem(str(directory), "interrupted (Ctrl-C) before every check ran; not stamped"))

    report.ok = not problems
    report.seconds = round(time.monotonic() - started, 3)
    if report.ok and write_stamp:
        stamp = Stamp(
            repo=report.repo,
            revision=report.revision,
            verified_at=now_utc(),
            sha256_checked=report.sha256_checked,
            architectures=report.architectures,
            quant_algo=report.quant_algo,
            files=[StampFile(f.path, f.size, f.sha256) for f in report.files],
        )
        try:
            path = write_stamp_file(directory, stamp)
        except OSError as exc:
            problems.append(Problem(STAMP_NAME, f"cannot write the stamp: {exc.strerror or exc}"))
            report.ok = False
            return report
        report.stamp = str(path)
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
        if report.revision and record.revision and report.revision != record.revision:
            problems.append(
                Problem(
                    HASHES_NAME,
                    f"records revision {record.revision}, but revision {report.revision} was given: "
                    "the files belong to another download",
                )
            )
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
                    Problem(shard, "tensors missing from the index: " + join_limited(not_indexed))
                )
            if misplaced:
                problems.append(
                    Problem(
                        shard, "the index places these tensors in another shard: " + join_limited(misplaced)
                    )
                )
            absent = sorted(t for t, s in weight_map.items() if s == shard and t not in tensors)
            if absent:
                problems.append(Problem(shard, "indexed tensors not in this shard: " + join_limited(absent)))
    report.tensors = tensor_total

    if sha256:
        _check_hashes(directory, files, shard_names, record, report, hash_workers, on_progress)


def _check_config(directory: Path, expect: Expectations, report: VerifyReport) -> None:
    problems = report.problems
    try:
        config = load_json(directory / CONFIG_NAME)
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
            hq = load_json(directory / QUANT_CONFIG_NAME)
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
            index = load_json(index_path)
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
            report.warnings.append(f"shards not referenced by {INDEX_NAME} (ignored): " + join_limited(stray))
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


class _HashPool(concurrent.futures.ThreadPoolExecutor):
    """Leaving on an exception (Ctrl-C) cancels the queued files: only those being hashed finish."""

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.shutdown(wait=True, cancel_futures=exc_type is not None)


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
        digest, blob = hash_file(directory / entry.path, want_blob=rec.sha256 is None)
        return entry, rec, digest, blob

    hashed_ok = True
    with _HashPool(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(one, item) for item in todo]
        for fut, (entry, _rec) in zip(futures, todo, strict=True):
            try:
                entry, rec, digest, blob = fut.result()
            except OSError as exc:
                problems.append(Problem(entry.path, read_error(exc)))
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


def parse_expectations(arch: str | None, quant_algo: str | None, shards: int | None) -> Expectations:
    """Expectations from operator text: `arch` is "A" or "A,B". Raises UsageError."""
    if shards is not None and shards < 1:
        raise UsageError(f"--expect-shards must be at least 1, got {shards}")
    arches = [a.strip() for a in arch.split(",") if a.strip()] if arch is not None else None
    if arch is not None and not arches:  # '' or ',' would expect nothing and check nothing
        raise UsageError(
            f"--expect-arch {arch!r}: give an architecture, e.g. GlmMoeDsaForCausalLM (A,B: a list)"
        )
    if quant_algo is not None and not quant_algo.strip():
        raise UsageError(f"--expect-quant-algo {quant_algo!r}: give a quant_algo, e.g. MIXED_PRECISION")
    return Expectations(arch=arches, quant_algo=quant_algo, shards=shards)


def summary_line(report: VerifyReport) -> str:
    gb = report.total_bytes / 1e9
    verdict = "OK" if report.ok else "NOT VERIFIED"
    return (
        f"verify {report.dir}: {verdict} — {report.shards} shards, {report.tensors:,} tensors, {gb:,.2f} GB, "
        f"architectures {','.join(report.architectures) or '-'}, quant_algo {report.quant_algo or '-'}, "
        f"sha256 {'checked' if report.sha256_checked else 'not checked'} ({report.seconds:.2f} s)"
    )


def report_text(report: VerifyReport) -> str:
    """The human report (stdout): the summary line, a table of problems, the stamp written.
    Warnings are not in it: callers print `report.warnings` to stderr."""
    lines = [summary_line(report)]
    if report.problems:
        lines.append(table(["file", "problem"], [(p.path, p.problem) for p in report.problems]))
    if report.stamp:
        lines.append(f"stamp: {report.stamp}")
    return "\n".join(lines)


def failure_message(report: VerifyReport) -> str:
    bad = sorted({p.path for p in report.problems})
    if report.stamp_left is not None:
        stamp = f"the old stamp {report.stamp_left} could NOT be removed and still stands"
    else:
        stamp = f"no {STAMP_NAME} was written and any old one is removed"
    return (
        f"{report.dir} is NOT verified ({len(report.problems)} problem(s) in {', '.join(bad)}); "
        f"{stamp}. First: {report.problems[0].path}: {report.problems[0].problem}"
    )
