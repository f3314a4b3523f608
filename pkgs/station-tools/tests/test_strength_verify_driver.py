"""The two drivers of `station verify` — `verify_checkpoint` and `_run_checks` — called in this process on
real checkpoints (test_verify.py drives the same paths through the `station verify` command; a mutation
benchmark cannot afford a Python start per mutant and test). Every report is compared field by field: an
operator, `station download` and the go-live gate all read them.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shlex
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from hubserver import make_checkpoint
from test_strength_checkpoint import SHARDS
from test_verify import record_hashes

from vllm_station.checkpoint import verification
from vllm_station.checkpoint.files import read_error
from vllm_station.checkpoint.hashes import read_hash_record
from vllm_station.checkpoint.safetensors import ShardError, read_shard_header
from vllm_station.checkpoint.stamp import STAMP_NAME, read_stamp
from vllm_station.checkpoint.verification import (
    Expectations,
    FileEntry,
    Problem,
    VerifyReport,
    verify_checkpoint,
)

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
HASHES_NAME = ".station-hashes.json"

INDEX = "model.safetensors.index.json"
REV_A, REV_B = "a" * 40, "b" * 40


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    d = tmp_path / "ckpt"
    make_checkpoint(d, shards=len(SHARDS), tensors_per_shard=4)
    return d


def seconds_ok(report: VerifyReport) -> bool:
    """The report's duration: a float, rounded to milliseconds, of this run (not a clock reading)."""
    s = report.seconds
    return isinstance(s, float) and 0.0 <= s < 60.0 and round(s, 3) == s


def fields(report: VerifyReport) -> dict[str, Any]:
    out = asdict(report)
    out.pop("seconds")
    return out


def empty_report(d: Path, problem: str, **over: Any) -> dict[str, Any]:
    """What a run that stopped before any check reports."""
    base: dict[str, Any] = {
        "ok": False, "dir": str(d), "repo": "org/model", "revision": REV_A, "architectures": [],
        "quant_algo": None, "shards": 0, "tensors": 0, "total_bytes": 0, "sha256_checked": False,
        "stamp": None, "membind": None, "problems": [{"path": str(d), "problem": problem}], "warnings": [],
        "files": [], "stamp_left": None, "partial": False,
    }  # fmt: skip
    return base | over


def verify(d: Path, **kw: Any) -> VerifyReport:
    return verify_checkpoint(d, repo="org/model", revision=REV_A, **kw)


# ---- before any check: what is not a directory, and the old stamp ----------------------------------------


def test_nothing_at_the_path(tmp_path: Path) -> None:
    d = tmp_path / "nope"
    report = verify(d)
    assert fields(report) == empty_report(d, "not a directory (nothing to verify)")
    assert seconds_ok(report)


def test_a_file_is_not_a_checkpoint_directory(tmp_path: Path) -> None:
    d = tmp_path / "model.safetensors"
    d.write_bytes(b"\0" * 16)
    report = verify(d)
    # stat() succeeds, listing fails: the listing's own error, as the operator would see it from ls
    assert fields(report) == empty_report(d, "cannot read: Not a directory")
    assert seconds_ok(report)
    below = d / "sub"  # a path through a file: stat() itself fails
    report = verify(below)
    assert fields(report) == empty_report(
        below, read_error(NotADirectoryError(errno.ENOTDIR, "Not a directory"))
    )
    assert seconds_ok(report)


def test_the_old_stamp_is_removed_first_and_that_is_logged(
    ckpt: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert verify(ckpt).ok and (ckpt / STAMP_NAME).is_file()
    with caplog.at_level(logging.INFO, logger="vllm_station.checkpoint"):
        (ckpt / SHARDS[2]).unlink()
        report = verify(ckpt)
    assert not report.ok and report.stamp is None and not (ckpt / STAMP_NAME).exists()
    assert [r.getMessage() for r in caplog.records if r.name == "vllm_station.checkpoint"] == [
        f"removed the previous stamp {ckpt / STAMP_NAME} before verifying"
    ]


def test_without_writing_a_stamp_the_old_one_is_left_alone(ckpt: Path) -> None:
    assert verify(ckpt).ok
    before = (ckpt / STAMP_NAME).read_bytes()
    report = verify(ckpt, write_stamp=False)
    assert report.ok and report.stamp is None
    assert (ckpt / STAMP_NAME).read_bytes() == before


def test_an_old_stamp_that_cannot_be_removed_stops_the_run(tmp_path: Path) -> None:
    d = tmp_path / "my ckpt"  # a space: the rm command in the message must still be one path
    make_checkpoint(d, shards=3, tensors_per_shard=4)
    stamp = d / STAMP_NAME
    stamp.mkdir()
    (stamp / "keep").write_text("x")  # unlink() of a non-empty directory fails for real, root or not
    report = verify(d)
    assert fields(report) == empty_report(
        d, "",
        problems=[{"path": str(stamp), "problem":
                   "cannot remove the previous stamp: Is a directory; it still stands and still says this "
                   f"checkpoint is verified — remove it by hand (rm -r {shlex.quote(str(stamp))}) before "
                   "anything starts from this directory"}],
        stamp_left=str(stamp),
    )  # fmt: skip
    assert "'" in shlex.quote(str(stamp))
    assert seconds_ok(report)


# ---- a good checkpoint: the report and the stamp ----------------------------------------------------------


def test_a_good_checkpoint_reports_everything_and_stamps(ckpt: Path) -> None:
    record_hashes(ckpt, revision=REV_A)
    report = verify(ckpt, expect=Expectations(shards=3))
    sizes = {p.name: p.stat().st_size for p in ckpt.iterdir() if p.name not in (STAMP_NAME, HASHES_NAME)}
    assert fields(report) | {"files": None} == {
        "ok": True, "dir": str(ckpt), "repo": "org/model", "revision": REV_A,
        "architectures": ["GlmMoeDsaForCausalLM"], "quant_algo": "MIXED_PRECISION", "shards": 3,
        "tensors": 12,
        "total_bytes": sum(sizes.values()), "sha256_checked": False, "stamp": str(ckpt / STAMP_NAME),
        "membind": None, "problems": [], "warnings": [], "files": None, "stamp_left": None,
        "partial": False,
    }  # fmt: skip
    assert report.files == [FileEntry(name, size) for name, size in sorted(sizes.items())]
    assert seconds_ok(report)
    stamp = read_stamp(ckpt)
    assert (stamp.repo, stamp.revision, stamp.sha256_checked) == ("org/model", REV_A, False)
    assert (stamp.architectures, stamp.quant_algo) == (["GlmMoeDsaForCausalLM"], "MIXED_PRECISION")
    assert [(f.path, f.size, f.sha256) for f in stamp.files] == [
        (n, s, None) for n, s in sorted(sizes.items())
    ]
    assert stamp.verified_at


def test_the_stamp_records_the_hashes_of_a_sha256_run(ckpt: Path) -> None:
    record_hashes(ckpt, revision=REV_A)
    report = verify_checkpoint(ckpt, sha256=True, hash_workers=2)
    assert report.ok and report.sha256_checked
    stamp = read_stamp(ckpt)
    assert stamp.sha256_checked is True
    assert {f.path: f.sha256 for f in stamp.files} == {f.path: f.sha256 for f in report.files}
    assert all(f.sha256 for f in stamp.files if f.path.endswith(".safetensors"))


def test_a_stamp_that_cannot_be_written_fails_the_run(ckpt: Path) -> None:
    """The stamp's place is taken while the files are hashed (a non-empty directory): the atomic rename
    onto it fails for real, and the run must not report success."""
    record_hashes(ckpt, revision=REV_A)

    def take_the_stamps_place(_name: str) -> None:
        (ckpt / STAMP_NAME).mkdir(exist_ok=True)
        (ckpt / STAMP_NAME / "keep").write_text("x")

    report = verify_checkpoint(ckpt, sha256=True, hash_workers=1, on_progress=take_the_stamps_place)
    assert report.ok is False and report.stamp is None
    assert report.problems == [
        Problem(
            STAMP_NAME,
            f"cannot write the stamp: the file {ckpt / STAMP_NAME}: is a directory; it is not replaced",
        )
    ]
    assert seconds_ok(report)


def test_an_unexpected_read_error_is_a_problem_not_a_traceback(
    ckpt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every check catches its own read errors; the net below them is for one that does not. An I/O error
    # cannot be made to happen here on demand, so the listing raises one.
    def failing(directory: Path) -> Any:
        raise OSError(errno.EIO, os.strerror(errno.EIO), str(directory / SHARDS[0]))

    monkeypatch.setattr(verification, "list_files", failing)
    report = verify(ckpt)
    assert report.ok is False and report.stamp is None and not (ckpt / STAMP_NAME).exists()
    assert report.problems == [Problem(str(ckpt / SHARDS[0]), "cannot read: Input/output error")]
    assert seconds_ok(report)

    def failing_nameless(directory: Path) -> Any:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(verification, "list_files", failing_nameless)
    assert verify(ckpt).problems == [Problem(str(ckpt), "cannot read: Input/output error")]


# ---- _run_checks: the hash record ------------------------------------------------------------------------


def test_repo_and_revision_come_from_the_record_when_not_given(ckpt: Path) -> None:
    record_hashes(ckpt, repo="zai-org/GLM-5.3-Flash", revision=REV_B)
    report = verify_checkpoint(ckpt)
    assert (report.ok, report.repo, report.revision) == (True, "zai-org/GLM-5.3-Flash", REV_B)
    report = verify_checkpoint(ckpt, repo="mirror/glm", revision=REV_B)
    assert (report.ok, report.repo, report.revision) == (True, "mirror/glm", REV_B)


def test_a_revision_other_than_the_recorded_one_is_refused(ckpt: Path) -> None:
    record_hashes(ckpt, revision=REV_B)
    report = verify(ckpt)
    assert report.problems == [
        Problem(HASHES_NAME, f"records revision {REV_B}, but revision {REV_A} was given: "
                "the files belong to another download")
    ]  # fmt: skip
    assert report.revision == REV_A and not report.ok


def test_a_record_without_a_revision_takes_the_given_one(ckpt: Path) -> None:
    record_hashes(ckpt)
    data = json.loads((ckpt / HASHES_NAME).read_text())
    del data["revision"]
    (ckpt / HASHES_NAME).write_text(json.dumps(data))
    report = verify(ckpt)
    assert (report.ok, report.revision) == (True, REV_A)


def test_an_unreadable_record_is_a_problem_and_the_checks_go_on(ckpt: Path) -> None:
    (ckpt / HASHES_NAME).write_text('{"files": []}')
    with pytest.raises(ValueError) as err:
        read_hash_record(ckpt)
    report = verify_checkpoint(ckpt)
    assert report.problems == [Problem(HASHES_NAME, str(err.value))]
    assert (report.repo, report.revision, report.tensors, report.shards) == (None, None, 12, 3)


# ---- _run_checks: the shards against the index -----------------------------------------------------------


def _index(d: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((d / INDEX).read_text())
    return data


def _write_index(d: Path, data: dict[str, Any]) -> None:
    (d / INDEX).write_text(json.dumps(data))


def test_a_tensor_the_index_leaves_out(ckpt: Path) -> None:
    idx = _index(ckpt)
    del idx["weight_map"]["model.layers.1.mlp.experts.2.weight"]
    _write_index(ckpt, idx)
    report = verify(ckpt)
    assert report.problems == [
        Problem(SHARDS[1], "tensors missing from the index: model.layers.1.mlp.experts.2.weight")
    ]
    assert report.tensors == 12


def test_a_tensor_the_index_places_in_another_shard(ckpt: Path) -> None:
    idx = _index(ckpt)
    idx["weight_map"]["model.layers.1.mlp.experts.2.weight"] = SHARDS[0]
    idx["weight_map"]["model.layers.1.mlp.experts.3.weight"] = SHARDS[0]
    _write_index(ckpt, idx)
    assert verify(ckpt).problems == [
        Problem(SHARDS[0], "indexed tensors not in this shard: "
                "model.layers.1.mlp.experts.2.weight; model.layers.1.mlp.experts.3.weight"),
        Problem(SHARDS[1], "the index places these tensors in another shard: "
                "model.layers.1.mlp.experts.2.weight; model.layers.1.mlp.experts.3.weight"),
    ]  # fmt: skip


def test_a_broken_shard_is_named_and_the_others_still_counted(ckpt: Path) -> None:
    with open(ckpt / SHARDS[1], "r+b") as f:
        f.truncate(os.path.getsize(ckpt / SHARDS[1]) - 1)
    with pytest.raises(ShardError) as err:
        read_shard_header(ckpt / SHARDS[1])
    report = verify(ckpt)
    assert report.problems == [Problem(SHARDS[1], str(err.value))]
    assert report.tensors == 8


def test_a_missing_shard_is_reported_once_and_the_next_still_read(ckpt: Path) -> None:
    (ckpt / SHARDS[1]).unlink()
    report = verify(ckpt)
    assert [p.path for p in report.problems] == [SHARDS[1]]
    assert report.tensors == 8  # shards 1 and 3


def test_without_sha256_nothing_is_hashed(ckpt: Path) -> None:
    record_hashes(ckpt, revision=REV_A)
    seen: list[str] = []
    report = verify(ckpt, on_progress=seen.append)
    assert report.ok and report.sha256_checked is False and seen == []
    assert all(f.sha256 is None for f in report.files)
