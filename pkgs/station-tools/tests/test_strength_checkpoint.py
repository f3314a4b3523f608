"""Mutants of the checkpoint contract that survived the other tests (issue 17, measured with
`scripts/bench-mutation --module verify`): `--sha256`'s comparison with the recorded hashes, the report's
summary line, table and failure message, the header reader's nesting / text / number rules, the hashing
pool's Ctrl-C behaviour, the cache-dropping hash loop, the KV-cache layout reader and the small helpers.
Everything runs in-process on real files; messages are compared whole, since operators read them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import threading
import time
from pathlib import Path

import pytest
from hubserver import git_blob_sha1, make_checkpoint
from test_strength_verify import refusal
from test_verify import record_hashes

from vllm_station.checkpoint import files
from vllm_station.checkpoint.files import join_limited, read_error
from vllm_station.checkpoint.hashes import (
    HashRecord,
    RecordedFile,
    hash_file,
    read_hash_record,
    write_hash_record,
)
from vllm_station.checkpoint.layout import KvCacheQuant, read_kv_cache_quant
from vllm_station.checkpoint.safetensors import read_shard_header
from vllm_station.checkpoint.stamp import (
    Stamp,
    StampError,
    StampFile,
    StampMissing,
    changed_files,
    read_stamp,
    remove_stamp,
    write_stamp,
)
from vllm_station.checkpoint.verification import (
    Expectations,
    Problem,
    VerifyReport,
    _HashPool,
    failure_message,
    list_files,
    parse_expectations,
    report_text,
    summary_line,
    verify_checkpoint,
)
from vllm_station.errors import UsageError

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
MAX_LISTED = 5
HASHES_NAME = ".station-hashes.json"
MAX_DEPTH = 64
HASH_CHUNK = 16 * 2**20

SHARDS = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]


def record(directory: Path, **override: RecordedFile | None) -> dict[str, RecordedFile]:
    """What `station download` records (test_verify's `record_hashes`), with overrides (None: leave that
    file out of the record)."""
    record_hashes(directory)
    rec = read_hash_record(directory)
    assert rec is not None
    for name, entry in override.items():
        if entry is None:
            rec.files.pop(name, None)
        else:
            rec.files[name] = entry
    write_hash_record(directory, rec)
    return rec.files


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    d = tmp_path / "ckpt"
    make_checkpoint(d, shards=3, tensors_per_shard=4)
    return d


def check(d: Path, progress: list[str] | None = None) -> VerifyReport:
    return verify_checkpoint(
        d,
        sha256=True,
        write_stamp=False,
        hash_workers=2,
        on_progress=None if progress is None else progress.append,
    )


# ---- --sha256 against the record ---------------------------------------------------------------------


def test_sha256_without_a_record_names_the_file_and_the_fix(ckpt: Path) -> None:
    report = check(ckpt)
    assert report.problems == [
        Problem(
            HASHES_NAME,
            "missing: --sha256 compares with the hub's hashes that `station download` records here; "
            "without them nothing can be compared (download with `station download`, or copy the "
            "directory together with this file)",
        )
    ]
    assert not report.sha256_checked


def test_every_file_hashed_is_reported_to_progress_and_checked(ckpt: Path) -> None:
    recorded = record(ckpt)
    progress: list[str] = []
    report = check(ckpt, progress)
    assert report.problems == [] and report.warnings == []
    assert report.sha256_checked is True
    assert sorted(progress) == sorted(recorded)
    assert {f.path: f.sha256 for f in report.files if f.sha256} == {
        n: hashlib.sha256((ckpt / n).read_bytes()).hexdigest() for n in recorded
    }


def test_recorded_but_missing_files_are_each_named_once_and_the_rest_still_checked(ckpt: Path) -> None:
    (ckpt / "aaa-notes.txt").write_text("notes\n")
    (ckpt / "zzz-extra.txt").write_text("extra\n")
    record(ckpt)
    (ckpt / "aaa-notes.txt").unlink()  # sorted first: the files after it are still compared
    (ckpt / "zzz-extra.txt").unlink()
    (ckpt / SHARDS[1]).unlink()  # the index check names it already
    (ckpt / "config.json").write_text((ckpt / "config.json").read_text() + " ")  # a size change after it
    report = check(ckpt)
    size = (ckpt / "config.json").stat().st_size
    assert sorted((p.path, p.problem) for p in report.problems) == sorted([
        ("aaa-notes.txt", f"recorded in {HASHES_NAME} but missing"),
        ("zzz-extra.txt", f"recorded in {HASHES_NAME} but missing"),
        (SHARDS[1], "listed in model.safetensors.index.json but missing"),
        ("config.json", f"size {size} differs from the recorded {size - 1}"),
    ])  # fmt: skip
    assert not report.sha256_checked


def test_size_changes_are_each_named_and_nothing_is_hashed_for_them(ckpt: Path) -> None:
    (ckpt / "notes.txt").write_text("notes\n")
    recorded = record(ckpt)
    for name in ("config.json", "notes.txt"):
        with open(ckpt / name, "a") as f:
            f.write(" ")  # still valid JSON
    progress: list[str] = []
    report = check(ckpt, progress)
    assert [(p.path, p.problem) for p in report.problems] == [
        (name, f"size {recorded[name].size + 1} differs from the recorded {recorded[name].size}")
        for name in ("config.json", "notes.txt")
    ]
    assert "config.json" not in progress and "notes.txt" not in progress
    assert not report.sha256_checked  # every hash that was compared matched: the sizes still fail it


def test_a_record_without_a_hash_or_without_the_file(ckpt: Path) -> None:
    (ckpt / "README.md").write_text("readme\n")
    record(ckpt, **{"tokenizer.json": RecordedFile(size=None)})
    (ckpt / "tokenizer.json").write_text("{}")
    report = check(ckpt)
    assert [(p.path, p.problem) for p in report.problems] == [
        ("tokenizer.json", f"{HASHES_NAME} records no hash for it")
    ]


def test_every_file_without_a_recorded_hash_is_named(ckpt: Path) -> None:
    for n in ("a.txt", "b.txt"):
        (ckpt / n).write_text(n)
    record(ckpt, **{n: RecordedFile(size=5) for n in ("a.txt", "b.txt")})
    assert [(p.path, p.problem) for p in check(ckpt).problems] == [
        (n, f"{HASHES_NAME} records no hash for it") for n in ("a.txt", "b.txt")
    ]


def test_files_the_record_lacks(ckpt: Path) -> None:
    (ckpt / "README.md").write_text("readme\n")
    record(ckpt, **{"README.md": None, "config.json": None, SHARDS[0]: None})
    report = check(ckpt)
    assert sorted((p.path, p.problem) for p in report.problems) == [
        ("config.json", f"no recorded hash in {HASHES_NAME} to compare with"),
        (SHARDS[0], f"no recorded hash in {HASHES_NAME} to compare with"),
    ]
    assert report.warnings == [f"README.md: not in {HASHES_NAME}, not compared"]


def test_mismatches_show_both_hash_prefixes(ckpt: Path) -> None:
    (ckpt / "notes.txt").write_text("notes\n")
    recorded = record(ckpt)
    (ckpt / "notes.txt").write_text("Notes\n")  # same size
    data = bytearray((ckpt / SHARDS[0]).read_bytes())
    data[-2] ^= 0xFF  # in the data area: the header still holds
    (ckpt / SHARDS[0]).write_bytes(bytes(data))
    report = check(ckpt)
    sha = hashlib.sha256((ckpt / SHARDS[0]).read_bytes()).hexdigest()
    blob = git_blob_sha1(b"Notes\n")
    assert sorted((p.path, p.problem) for p in report.problems) == [
        (SHARDS[0], f"sha256 mismatch: recorded {recorded[SHARDS[0]].sha256[:16]}…, file has {sha[:16]}…"),
        ("notes.txt", f"git blob id mismatch: recorded {recorded['notes.txt'].git_blob_sha1[:16]}…, "
                      f"file has {blob[:16]}…"),
    ]  # fmt: skip
    assert not report.sha256_checked


def test_a_file_that_cannot_be_hashed_is_a_problem_not_a_traceback(ckpt: Path) -> None:
    record(ckpt, **{"notes.txt": RecordedFile(size=None, git_blob_sha1="0" * 40)})
    os.mkfifo(ckpt / "notes.txt")  # refused when listed (a checkpoint holds regular files only)
    report = check(ckpt)
    assert [p.path for p in report.problems] == ["notes.txt"]
    assert report.problems[0].problem.startswith("it is a FIFO (named pipe)")
    assert not report.sha256_checked


# ---- the hashing pool --------------------------------------------------------------------------------


def test_leaving_the_pool_on_an_exception_cancels_the_queue_and_waits_for_the_running() -> None:
    started = threading.Event()

    def slow() -> str:
        started.set()
        time.sleep(0.3)
        return "done"

    with pytest.raises(KeyboardInterrupt), _HashPool(max_workers=1) as pool:
        running = pool.submit(slow)
        queued = [pool.submit(slow) for _ in range(5)]
        started.wait(5)
        raise KeyboardInterrupt
    assert running.done() and running.result() == "done"  # waited for
    assert all(f.cancelled() for f in queued)


def test_leaving_the_pool_normally_runs_everything() -> None:
    with _HashPool(max_workers=1) as pool:
        futures = [pool.submit(time.sleep, 0.01) for _ in range(4)]
    assert all(f.done() and not f.cancelled() for f in futures)


# ---- hash_file ---------------------------------------------------------------------------------------


def test_hash_file_drops_each_chunk_from_the_cache_behind_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = os.urandom(HASH_CHUNK * 2 + 1000)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, off, n, advice: calls.append((off, n, advice)))
    digest, blob = hash_file(path, want_blob=True)
    assert digest == hashlib.sha256(data).hexdigest() and blob == git_blob_sha1(data)
    chunk = HASH_CHUNK
    assert calls == [(0, chunk, os.POSIX_FADV_DONTNEED), (chunk, chunk, os.POSIX_FADV_DONTNEED),
                     (2 * chunk, 1000, os.POSIX_FADV_DONTNEED)]  # fmt: skip
    assert hash_file(path, want_blob=False) == (digest, None)


# ---- the report ----------------------------------------------------------------------------------------


def _report(**kw: object) -> VerifyReport:
    base: dict[str, object] = dict(
        ok=True, dir="/m/ckpt", repo=None, revision=None, architectures=["A", "B"], quant_algo="NVFP4",
        shards=3, tensors=12345, total_bytes=1_005_000_001, sha256_checked=True, seconds=1.234, stamp=None,
    )  # fmt: skip
    base.update(kw)
    return VerifyReport(**base)  # type: ignore[arg-type]


def test_summary_line_ok_and_not() -> None:
    assert summary_line(_report()) == (
        "verify /m/ckpt: OK — 3 shards, 12,345 tensors, 1.01 GB, architectures A,B, quant_algo NVFP4, "
        "sha256 checked (1.23 s)"
    )
    assert summary_line(_report(ok=False, architectures=[], quant_algo=None, sha256_checked=False)) == (
        "verify /m/ckpt: NOT VERIFIED — 3 shards, 12,345 tensors, 1.01 GB, architectures -, quant_algo -, "
        "sha256 not checked (1.23 s)"
    )


def test_report_text_holds_the_summary_the_problems_and_the_stamp() -> None:
    bad = _report(ok=False, problems=[Problem("a.safetensors", "truncated"), Problem("config.json", "bad")])
    lines = report_text(bad).split("\n")
    assert lines[0] == summary_line(bad)
    assert lines[1].split() == ["file", "problem"]
    rows = [line for line in lines[2:] if line.strip() and set(line.replace(" ", "")) != {"-"}]
    assert [line.split(None, 1) for line in rows] == [
        ["a.safetensors", "truncated"], ["config.json", "bad"],
    ]  # fmt: skip
    good = _report(stamp="/m/ckpt/.station-verified.json")
    assert report_text(good) == summary_line(good) + "\nstamp: /m/ckpt/.station-verified.json"


def test_failure_message_names_the_files_and_the_stamp() -> None:
    problems = [Problem("b.json", "bad"), Problem("a.safetensors", "truncated"), Problem("b.json", "worse")]
    assert failure_message(_report(ok=False, problems=problems)) == (
        "/m/ckpt is NOT verified (3 problem(s) in a.safetensors, b.json); no .station-verified.json was "
        "written and any old one is removed. First: b.json: bad"
    )
    left = _report(ok=False, problems=problems[:1], stamp_left="/m/ckpt/.station-verified.json")
    assert failure_message(left) == (
        "/m/ckpt is NOT verified (1 problem(s) in b.json); the old stamp /m/ckpt/.station-verified.json "
        "could NOT be removed and still stands. First: b.json: bad"
    )


def test_write_stamp_keeps_a_given_time(tmp_path: Path) -> None:
    stamp = Stamp(repo="org/m", revision="a" * 40, verified_at="2020-01-02T03:04:05Z", sha256_checked=False,
                  architectures=["A"], quant_algo=None,
                  files=[StampFile("config.json", 2, None)])  # fmt: skip
    write_stamp(tmp_path, stamp)
    got = read_stamp(tmp_path)
    assert got is not None and got.verified_at == "2020-01-02T03:04:05Z"


# ---- helpers ----------------------------------------------------------------------------------------


def test_join_limited_at_and_over_the_limit() -> None:
    names = [f"f{i}" for i in range(MAX_LISTED + 2)]
    assert join_limited(names[:MAX_LISTED]) == "; ".join(names[:MAX_LISTED])
    assert join_limited(names) == "; ".join(names[:MAX_LISTED]) + "; and 2 more"


def test_read_error_messages() -> None:
    assert read_error(IsADirectoryError(21, "Is a directory")) == "cannot read: it is a directory, not a file"
    assert read_error(PermissionError(13, "Permission denied")) == "cannot read: Permission denied"
    assert read_error(OSError("plain")) == "cannot read: plain"
    assert files.now_utc().endswith("Z")


# ---- the header reader: nesting, text, numbers, shown values ------------------------------------------


def raw_shard(path: Path, header_text: str) -> Path:
    raw = header_text.encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    return path


def _nested(levels: int) -> str:
    # a tensor-less header whose __metadata__ is refused later anyway: the nesting rule comes first only
    # when a surrogate escape makes the reader walk the values; an ignored key inside a tensor holds it
    return (
        '{"t": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0], "x": '
        + "[" * levels
        + '"\\ud83d\\ude00"'
        + "]" * levels
        + "}}"
    )


def test_nesting_is_refused_just_past_max_depth(tmp_path: Path) -> None:
    # header (0) → "t" (1) → "x" (2) → lists from 3: a string at depth 2 + levels
    deepest_ok = MAX_DEPTH - 2
    assert read_shard_header(raw_shard(tmp_path / "ok.safetensors", _nested(deepest_ok)))["t"].end == 0
    assert refusal(raw_shard(tmp_path / "deep.safetensors", _nested(deepest_ok + 1))) == (
        f"header JSON is nested deeper than {MAX_DEPTH} levels"
    )


@pytest.mark.parametrize(
    "where",
    [
        '{"\\ud800": 1}',  # a key
        '{"v": "\\udfff"}',  # a value
        '["\\ud800"]',  # a list item
    ],
)
def test_a_lone_surrogate_anywhere_is_refused(tmp_path: Path, where: str) -> None:
    text = '{"t": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0], "x": ' + where + "}}"
    message = refusal(raw_shard(tmp_path / "s.safetensors", text))
    assert message.startswith("header holds a string that is not Unicode text: 'utf-8' codec can't encode")


def test_numbers_out_of_range_and_constants_are_refused(tmp_path: Path) -> None:
    base = '{"t": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0], "x": %s}}'
    assert refusal(raw_shard(tmp_path / "a.safetensors", base % "1e999")) == (
        "header holds the number 1e999, out of range"
    )
    assert (
        refusal(raw_shard(tmp_path / "b.safetensors", base % "NaN")) == "header holds NaN, which is not JSON"
    )
    assert read_shard_header(raw_shard(tmp_path / "c.safetensors", base % "1.5e300"))["t"].end == 0


def test_long_values_are_cut_at_80_characters_in_messages(tmp_path: Path) -> None:
    def dtype_refusal(value: str) -> str:
        text = '{"t": {"dtype": ' + json.dumps(value) + ', "shape": [0], "data_offsets": [0, 0]}}'
        return refusal(raw_shard(tmp_path / "d.safetensors", text))

    exact = "D" * 78  # json.dumps adds the quotes: 80 characters shown whole
    assert json.dumps(exact) in dtype_refusal(exact) and "…" not in dtype_refusal(exact)
    longer = "D" * 79
    assert json.dumps(longer)[:80] + "…" in dtype_refusal(longer)
    assert json.dumps(longer) not in dtype_refusal(longer)


# ---- the KV-cache layout ---------------------------------------------------------------------------------


def test_kv_cache_quant_from_config_first_then_hf_quant_config(tmp_path: Path) -> None:
    assert read_kv_cache_quant(tmp_path) == KvCacheQuant(
        None, "no kv_cache_quant_algo in config.json or hf_quant_config.json"
    )
    (tmp_path / "hf_quant_config.json").write_text(
        json.dumps({"quantization": {"kv_cache_quant_algo": "FP8"}})
    )
    assert read_kv_cache_quant(tmp_path) == KvCacheQuant(
        "FP8", "hf_quant_config.json quantization.kv_cache_quant_algo"
    )
    (tmp_path / "config.json").write_text(
        json.dumps({"quantization_config": {"kv_cache_quant_algo": "INT8"}})
    )
    assert read_kv_cache_quant(tmp_path) == KvCacheQuant(
        "INT8", "config.json quantization_config.kv_cache_quant_algo"
    )
    # a config.json without it (or with a non-string) falls through to hf_quant_config.json
    for config in ({"quantization_config": {"kv_cache_quant_algo": None}}, {"quantization_config": "x"}, [1]):
        (tmp_path / "config.json").write_text(json.dumps(config))
        assert read_kv_cache_quant(tmp_path).algo == "FP8"
    # the other file's section name is not this one's
    (tmp_path / "hf_quant_config.json").write_text(
        json.dumps({"quantization_config": {"kv_cache_quant_algo": "FP8"}})
    )
    assert read_kv_cache_quant(tmp_path).algo is None


def test_kv_cache_quant_names_an_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError) as err:
        read_kv_cache_quant(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'config.json'}: not valid JSON: ")


# ---- the stamp: every field read back, every refusal naming the stamp ------------------------------------

STAMP = {
    "version": 1, "repo": "org/m", "revision": "b" * 40, "verified_at": "2026-01-01T00:00:00Z",
    "sha256_checked": True, "architectures": ["A", 7, "B"], "quant_algo": "NVFP4",
    "files": [{"path": "config.json", "size": 12, "sha256": None}, {"path": "sub/w.safetensors", "size": 0,
                                                                    "sha256": "c" * 64}],
}  # fmt: skip


def test_a_stamp_reads_back_field_by_field(tmp_path: Path) -> None:
    (tmp_path / ".station-verified.json").write_text(json.dumps(STAMP))
    got = read_stamp(tmp_path)
    fields = (got.repo, got.revision, got.verified_at, got.sha256_checked, got.architectures, got.quant_algo)
    assert fields == (
        "org/m", "b" * 40, "2026-01-01T00:00:00Z", True, ["A", "B"], "NVFP4"
    )  # fmt: skip
    assert got.files == [StampFile("config.json", 12, None), StampFile("sub/w.safetensors", 0, "c" * 64)]
    assert got.has_revision is True and got.raw == STAMP
    unchecked = read_stamp_json(tmp_path, {**STAMP, "sha256_checked": "yes", "architectures": "A"})
    assert unchecked.sha256_checked is False and unchecked.architectures == []
    bare = {k: v for k, v in STAMP.items() if k not in ("repo", "revision", "quant_algo", "architectures")}
    got = read_stamp_json(tmp_path, bare)
    assert (got.repo, got.revision, got.quant_algo, got.has_revision, got.architectures) == (
        None, None, None, False, []
    )  # fmt: skip


def read_stamp_json(tmp_path: Path, data: object) -> Stamp:
    (tmp_path / ".station-verified.json").write_text(json.dumps(data))
    return read_stamp(tmp_path)


NOT_INSIDE = "files[0] has no relative 'path' inside the checkpoint: "


def stamp_refusal(tmp_path: Path, data: object) -> str:
    with pytest.raises(StampError) as err:
        read_stamp_json(tmp_path, data)
    assert err.value.path == str(tmp_path / ".station-verified.json")
    return err.value.problem


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"version": 2}, "unknown stamp version 2 (expected 1)"),
        ({"version": True}, "unknown stamp version True (expected 1)"),
        ({"files": None}, "no 'files' list: not a complete verify stamp"),
        ({"files": []}, "an empty 'files' list: verify never writes one, not a verify stamp"),
        ({"files": ["x"]}, "files[0] is not an object with a 'path' and a 'size'"),
        ({"files": [{"path": "../x", "size": 1}]}, f"{NOT_INSIDE}'../x'"),
        ({"files": [{"path": "/x", "size": 1}]}, f"{NOT_INSIDE}'/x'"),
        ({"files": [{"path": "", "size": 1}]}, f"{NOT_INSIDE}''"),
        ({"files": [{"path": "x", "size": -1}]}, "files[0] (x) has no 'size' in bytes: -1"),
        ({"files": [{"path": "x", "size": True}]}, "files[0] (x) has no 'size' in bytes: True"),
        ({"files": [{"path": "x", "size": 1.0}]}, "files[0] (x) has no 'size' in bytes: 1.0"),
        ({"files": [{"path": "x", "size": 1, "sha256": 5}]},
         "files[0] (x) has a 'sha256' that is not a string: 5"),
        ({"verified_at": ""}, "no 'verified_at' time: ''; not a verify stamp"),
        ({"repo": 1}, "'repo' is not a string: 1"),
        ({"revision": ["r"]}, "'revision' is not a string: [\"r\"]"),
        ({"quant_algo": {"a": "b" * 100}},
         "'quant_algo' is not a string: " + json.dumps({"a": "b" * 100})[:80]),
    ],
)
def test_a_stamp_refusal_names_the_stamp_and_the_problem(
    tmp_path: Path, change: dict[str, object], problem: str
) -> None:
    assert stamp_refusal(tmp_path, {**STAMP, **change}) == problem


def test_a_stamp_that_is_not_an_object_or_not_json(tmp_path: Path) -> None:
    assert stamp_refusal(tmp_path, [STAMP]) == "not a JSON object (list): not a verify stamp"
    (tmp_path / ".station-verified.json").write_text("{")
    with pytest.raises(StampError) as err:
        read_stamp(tmp_path)
    assert err.value.path == str(tmp_path / ".station-verified.json")
    assert err.value.problem.startswith("not valid JSON: ")
    (tmp_path / ".station-verified.json").write_bytes(b"\xff{}")
    with pytest.raises(StampError) as err:
        read_stamp(tmp_path)
    assert err.value.problem.startswith("not UTF-8 text: ")


def test_changed_files_one_line_per_difference(tmp_path: Path) -> None:
    stamp = read_stamp_json(tmp_path, {**STAMP, "files": [
        {"path": "same", "size": 3}, {"path": "gone", "size": 1}, {"path": "resized", "size": 4},
        {"path": "dir", "size": 0}, {"path": "any-size", "size": 1},
    ]})  # fmt: skip
    (tmp_path / "same").write_text("abc")
    (tmp_path / "resized").write_text("abcde")
    (tmp_path / "dir").mkdir()
    (tmp_path / "any-size").write_text("x")
    stamp.files[-1] = StampFile("any-size", None)
    assert changed_files(stamp, tmp_path) == [
        "gone missing", "resized 5 B != 4 B", "dir is not a regular file"
    ]  # fmt: skip


def test_a_missing_stamp_and_an_undecodable_one_name_the_stamp(tmp_path: Path) -> None:
    with pytest.raises(StampMissing) as missing:
        read_stamp(tmp_path)
    stamp_file = str(tmp_path / ".station-verified.json")
    assert (missing.value.path, missing.value.problem) == (stamp_file, "missing")
    assert str(missing.value) == f"{tmp_path / '.station-verified.json'}: missing"
    (tmp_path / ".station-verified.json").write_bytes(b"\xff{}")
    with pytest.raises(StampError) as err:
        read_stamp(tmp_path)
    assert err.value.path == str(tmp_path / ".station-verified.json")
    (tmp_path / ".station-verified.json").unlink()
    (tmp_path / ".station-verified.json").mkdir()
    with pytest.raises(StampError) as err:
        read_stamp(tmp_path / ".station-verified.json")
    assert (err.value.path, err.value.problem) == (
        str(tmp_path / ".station-verified.json"), "cannot read: it is a directory, not a regular file"
    )  # fmt: skip


def test_changed_files_names_an_unreadable_entry_and_goes_on(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    stamp = read_stamp_json(tmp_path, {**STAMP, "files": [{"path": "plain/inner", "size": 1},
                                                           {"path": "later", "size": 1}]})  # fmt: skip
    assert changed_files(stamp, tmp_path) == [
        "plain/inner cannot read: Not a directory", "later missing"
    ]  # fmt: skip


# ---- list_files ---------------------------------------------------------------------------------------


def test_list_files_leaves_out_the_tools_own_files_only_at_the_top(tmp_path: Path) -> None:
    for rel in (".cache/huggingface/x", "sub/.cache/y", "a.incomplete", "sub/b.incomplete", "keep.json",
                ".station-verified.json", ".station-hashes.json", "sub/.station-verified.json"):  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("12")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    entries, problems = list_files(tmp_path)
    assert [(e.path, e.size) for e in entries] == [
        ("keep.json", 2), ("sub/.cache/y", 2), ("sub/.station-verified.json", 2)
    ]  # fmt: skip
    assert problems == [Problem("dangling", "cannot read: No such file or directory")]


def test_list_files_of_a_file_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    entries, problems = list_files(tmp_path / "f")
    assert entries == [] and problems == [Problem(".", "cannot read: Not a directory")]


# ---- more of the hashing and the header's nesting --------------------------------------------------------


def test_every_file_that_cannot_be_hashed_is_named(ckpt: Path) -> None:
    record(ckpt, **{n: RecordedFile(size=None, git_blob_sha1="0" * 40) for n in ("a.txt", "b.txt")})
    for n in ("a.txt", "b.txt"):
        os.mkfifo(ckpt / n)
    assert [p.path for p in check(ckpt).problems] == ["a.txt", "b.txt"]


def _nested_dicts(levels: int) -> str:
    nested = '{"k": ' * levels + '"\\ud83d\\ude00"' + "}" * levels
    return '{"t": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0], "x": ' + nested + "}}"


def test_nesting_through_objects_is_refused_just_past_max_depth(tmp_path: Path) -> None:
    deepest_ok = MAX_DEPTH - 2
    assert read_shard_header(raw_shard(tmp_path / "ok.safetensors", _nested_dicts(deepest_ok)))["t"].end == 0
    assert refusal(raw_shard(tmp_path / "deep.safetensors", _nested_dicts(deepest_ok + 1))) == (
        f"header JSON is nested deeper than {MAX_DEPTH} levels"
    )


# ---- config.json and hf_quant_config.json ---------------------------------------------------------------


def plain(d: Path, **expect: object) -> VerifyReport:
    return verify_checkpoint(d, Expectations(**expect), write_stamp=False)  # type: ignore[arg-type]


def about(report: VerifyReport, path: str) -> list[str]:
    return [p.problem for p in report.problems if p.path == path]


def test_config_shapes(ckpt: Path) -> None:
    config = json.loads((ckpt / "config.json").read_text())
    assert plain(ckpt).problems == [] and plain(ckpt).architectures == ["GlmMoeDsaForCausalLM"]
    (ckpt / "config.json").write_text("[]")
    assert about(plain(ckpt), "config.json") == ["not a JSON object"]
    for arch in ("GlmMoeDsaForCausalLM", ["A", 1]):
        (ckpt / "config.json").write_text(json.dumps({**config, "architectures": arch}))
        report = plain(ckpt)
        assert about(report, "config.json") == [f"'architectures' is not a list of names: {arch!r}"]
        assert report.architectures == []
    (ckpt / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "architectures"}))
    report = plain(ckpt)
    assert report.problems == [] and report.architectures == []


HQ_ALGO = "hf_quant_config.json quantization.quant_algo"


def test_quant_algo_from_either_file_and_the_message_names_where_it_looked(tmp_path: Path) -> None:
    d = tmp_path / "c"
    make_checkpoint(d, shards=1, quant_algo=None)
    report = plain(d, quant_algo="NVFP4")
    assert report.quant_algo is None
    assert about(report, "config.json") == [
        "config.json quantization_config.quant_algo is absent, expected 'NVFP4'"
    ]
    hq = d / "hf_quant_config.json"
    hq.write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
    report = plain(d, quant_algo="NVFP4")
    assert report.quant_algo == "FP8"
    assert about(report, "config.json") == [f"{HQ_ALGO} is 'FP8', expected 'NVFP4'"]
    assert plain(d, quant_algo="FP8").problems == []
    for bad in ({"quantization": "FP8"}, {"quantization": {"quant_algo": 8}}, ["x"]):
        hq.write_text(json.dumps(bad))
        report = plain(d, quant_algo="FP8")
        assert report.quant_algo is None
        assert about(report, "config.json") == [f"{HQ_ALGO} is absent, expected 'FP8'"]
    hq.write_text("{")
    report = plain(d)
    assert [p.startswith("not valid JSON: ") for p in about(report, "hf_quant_config.json")] == [True]


# ---- the index and the shard list ---------------------------------------------------------------------


def test_index_lists_a_directory_and_stray_shards_are_named(ckpt: Path) -> None:
    shutil.copy(ckpt / SHARDS[0], ckpt / "extra.safetensors")
    report = plain(ckpt)
    assert report.problems == []
    assert report.warnings == [
        "shards not referenced by model.safetensors.index.json (ignored): extra.safetensors"
    ]
    (ckpt / SHARDS[2]).unlink()
    (ckpt / SHARDS[2]).mkdir()
    # (and its header cannot be read: the shard check says so too)
    assert about(plain(ckpt), SHARDS[2]) == [
        "listed in model.safetensors.index.json but not a regular file",
        "cannot read: it is a directory, not a regular file",
    ]


def test_no_index_and_no_single_file(tmp_path: Path) -> None:
    d = tmp_path / "c"
    make_checkpoint(d, shards=2)
    (d / "model.safetensors.index.json").unlink()
    missing = "missing: 2 .safetensors files but no index (and no single model.safetensors)"
    assert about(plain(d), "model.safetensors.index.json") == [missing]
    for shard in d.glob("*.safetensors"):
        shard.unlink()
    assert about(plain(d), "model.safetensors.index.json") == [
        "missing: no .safetensors files and no index (and no single model.safetensors)"
    ]


def test_a_single_file_checkpoint_with_the_wrong_shard_count_names_the_file(tmp_path: Path) -> None:
    d = tmp_path / "c"
    make_checkpoint(d, shards=1)
    (d / "model.safetensors.index.json").unlink()
    (d / "model-00001-of-00001.safetensors").rename(d / "model.safetensors")
    assert plain(d, shards=1).problems == []
    assert plain(d, shards=3).problems == [Problem("model.safetensors", "lists 1 shards, expected 3")]


# ---- the hash record ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[]", "not a station hash record (no 'files' object)"),
        ('{"files": []}', "not a station hash record (no 'files' object)"),
        ('{"repo": "x"}', "not a station hash record (no 'files' object)"),
        ('{"files": {"x": 1}}', "entry for 'x' is not an object"),
    ],
)
def test_an_unusable_hash_record_is_named(ckpt: Path, text: str, problem: str) -> None:
    (ckpt / HASHES_NAME).write_text(text)
    assert about(plain(ckpt), HASHES_NAME) == [problem]


# ---- the header reader's remaining rules --------------------------------------------------------------


def one_tensor(path: Path, entry: str) -> Path:
    return raw_shard(path, '{"t": ' + entry + "}")


def test_a_repeated_key_is_refused_anywhere(tmp_path: Path) -> None:
    t = '{"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}'
    assert refusal(raw_shard(tmp_path / "a.safetensors", '{"t": ' + t + ', "t": ' + t + "}")) == (
        "header repeats the key 't'"
    )
    inner = '{"t": {"dtype": "U8", "dtype": "U8", "shape": [0], "data_offsets": [0, 0]}}'
    assert refusal(raw_shard(tmp_path / "b.safetensors", inner)) == "header repeats the key 'dtype'"
    assert read_shard_header(raw_shard(tmp_path / "c.safetensors", '{"t": ' + t + ', "u": ' + t + "}"))
    # the key named is the repeated one, not the first
    later = '{"a": ' + t + ', "t": ' + t + ', "t": ' + t + "}"
    assert refusal(raw_shard(tmp_path / "d.safetensors", later)) == "header repeats the key 't'"


def test_keys_the_library_ignores_are_checked_for_nesting_without_any_escape(tmp_path: Path) -> None:
    def entry(levels: int) -> str:
        nested = "[" * levels + "1" + "]" * levels
        return '{"dtype": "U8", "shape": [0], "data_offsets": [0, 0], "x": ' + nested + "}"

    assert read_shard_header(one_tensor(tmp_path / "ok.safetensors", entry(MAX_DEPTH - 2)))["t"].end == 0
    assert refusal(one_tensor(tmp_path / "deep.safetensors", entry(MAX_DEPTH - 1))) == (
        f"header JSON is nested deeper than {MAX_DEPTH} levels"
    )


def test_bit_and_byte_boundaries(tmp_path: Path) -> None:
    # exactly 2^64 bits (2^61 one-byte elements): refused as too many bits
    entry = '{"dtype": "U8", "shape": [2305843009213693952], "data_offsets": [0, 0]}'
    assert refusal(one_tensor(tmp_path / "a.safetensors", entry)) == (
        "tensor 't' (U8 [2305843009213693952]) has more bits than 64 bits count"
    )
    # a byte count a float cannot hold exactly: compared as integers (then the data area is too short)
    big = 2**60 + 1
    entry = f'{{"dtype": "U8", "shape": [{big}], "data_offsets": [0, {big}]}}'
    message = refusal(one_tensor(tmp_path / "b.safetensors", entry))
    assert "needs" not in message
    # a span measured from a begin that is not 0
    two = raw_shard(tmp_path / "c.safetensors",
                    '{"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}, '
                    '"b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 14]}}')  # fmt: skip
    assert refusal(two) == "tensor 'b' (F32 [1]) needs 4 bytes, its offsets span 6"


def test_what_numpy_can_hold_with_a_zero_dimension(tmp_path: Path) -> None:
    def shape(dtype: str, dims: list[int]) -> Path:
        entry = json.dumps({"dtype": dtype, "shape": dims, "data_offsets": [0, 0]})
        return one_tensor(tmp_path / "s.safetensors", entry)

    assert read_shard_header(shape("U8", [0, 2**62]))["t"].shape == [0, 2**62]
    assert read_shard_header(shape("F32", [0, 2**61 - 1]))["t"].shape == [0, 2**61 - 1]
    assert "numpy and torch cannot hold" in refusal(shape("F32", [0, 2**61]))


def test_the_length_prefix(tmp_path: Path) -> None:
    p = tmp_path / "x.safetensors"
    p.write_bytes(b"\xff" * 8 + b"{}")
    assert refusal(p) == "header length 18446744073709551615 exceeds 100000000: not a safetensors file"
    p.write_bytes(struct.pack("<Q", 100_000_000) + b"{}")
    assert refusal(p) == "header length 100000000 runs past the end of the file (10 bytes): truncated?"
    p.write_bytes(struct.pack("<Q", 0))  # 8 bytes: a header of length 0, not a short file
    assert refusal(p).startswith("header is not valid JSON: ")
    p.write_bytes(b"\0" * 7)
    assert refusal(p) == "file is 7 bytes, too short for a safetensors header (truncated?)"


def test_header_text_errors(tmp_path: Path) -> None:
    p = tmp_path / "u.safetensors"
    raw = b'{"\xff": 1}'
    p.write_bytes(struct.pack("<Q", len(raw)) + raw)
    assert refusal(p).startswith("header is not UTF-8: ")
    deep = "[" * 100_000 + "]" * 100_000
    assert refusal(raw_shard(tmp_path / "d.safetensors", deep)) == "header JSON is nested too deeply"


# ---- load_json, parse_expectations, remove_stamp, the hash record's file, now_utc ----------------------


def test_config_json_missing_unreadable_or_not_text(ckpt: Path) -> None:
    (ckpt / "config.json").unlink()
    assert about(plain(ckpt), "config.json") == ["missing"]
    (ckpt / "config.json").mkdir()
    assert about(plain(ckpt), "config.json") == ["cannot read: it is a directory, not a regular file"]
    (ckpt / "config.json").rmdir()
    (ckpt / "config.json").write_bytes(b"\xff{}")
    assert [p.startswith("not UTF-8 text: ") for p in about(plain(ckpt), "config.json")] == [True]


def test_parse_expectations() -> None:
    expected = Expectations(arch=["A", "B"], quant_algo="NVFP4", shards=1)
    assert parse_expectations(" A, B,, ", "NVFP4", 1) == expected
    assert parse_expectations("A B", None, None) == Expectations(arch=["A B"])
    assert parse_expectations(None, None, None) == Expectations()
    for empty in ("", ",", " , "):  # would expect nothing and check nothing
        with pytest.raises(UsageError, match="--expect-arch"):
            parse_expectations(empty, None, None)
    with pytest.raises(UsageError, match="--expect-quant-algo"):
        parse_expectations(None, " ", None)
    with pytest.raises(UsageError) as err:
        parse_expectations(None, None, 0)
    assert str(err.value) == "--expect-shards must be at least 1, got 0"


def test_remove_stamp_says_whether_there_was_one(tmp_path: Path) -> None:
    assert remove_stamp(tmp_path) is False
    (tmp_path / ".station-verified.json").write_text("{}")
    assert remove_stamp(tmp_path) is True and not (tmp_path / ".station-verified.json").exists()


def test_the_hash_record_file_as_written(tmp_path: Path) -> None:
    rec = HashRecord(repo="org/m", revision="r" * 40, requested_revision="main", endpoint="https://hub",
                     files={"b": RecordedFile(2, "s" * 64),
                            "a": RecordedFile(1, None, "g" * 40)})  # fmt: skip
    write_hash_record(tmp_path, rec)
    text = (tmp_path / HASHES_NAME).read_text()
    data = json.loads(text)
    assert text == json.dumps(data, indent=2) + "\n"
    keys = ["version", "repo", "revision", "requested_revision", "endpoint", "recorded_at", "files"]
    assert list(data) == keys
    assert (data["version"], data["requested_revision"], data["endpoint"]) == (1, "main", "https://hub")
    assert list(data["files"]) == ["a", "b"]
    assert data["files"]["a"] == {"size": 1, "sha256": None, "git_blob_sha1": "g" * 40}
    back = read_hash_record(tmp_path)
    assert back is not None
    assert (back.repo, back.revision, back.requested_revision, back.endpoint) == (
        "org/m", "r" * 40, "main", "https://hub"
    )  # fmt: skip
    assert back.files == {"a": RecordedFile(1, None, "g" * 40), "b": RecordedFile(2, "s" * 64)}


def test_now_utc_is_utc_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import UTC, datetime

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        got = datetime.strptime(files.now_utc(), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        assert abs((got - datetime.now(UTC)).total_seconds()) < 5
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
