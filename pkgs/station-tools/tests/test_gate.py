"""`station gate stamp DIR`: the serving unit's start gate, against stamps written by the real
`station verify` on real safetensors checkpoints — every branch, the exact lines the journal shows."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from hubserver import make_checkpoint

from vllm_station import cli
from vllm_station.checkpoint.hashes import HashRecord, RecordedFile, write_hash_record
from vllm_station.checkpoint.stamp import STAMP_NAME, read_stamp
from vllm_station.commands import gate

REV = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


def station(*argv: str) -> int:
    """`station ARGV` through the real CLI once it lists `gate`; else gate's own parser and runner."""
    if "gate" in cli.COMMANDS or "gate" in cli.ALIASES or argv[0] != "gate":
        return cli.main(list(argv))
    parser = argparse.ArgumentParser(prog="station gate")
    gate.configure(parser)
    try:
        args = parser.parse_args(list(argv[1:]))
    except SystemExit as exc:
        return int(exc.code or 0)
    return gate.run(args)


def checkpoint(directory: Path, revision: str | None = REV) -> Path:
    """A real 2-shard checkpoint; with `revision`, the hash record `station download` leaves beside it."""
    make_checkpoint(directory, shards=2, tensors_per_shard=2)
    if revision is not None:
        files = {p.name: RecordedFile(size=p.stat().st_size) for p in directory.iterdir() if p.is_file()}
        write_hash_record(directory, HashRecord(repo="org/model", revision=revision, files=files))
    return directory


@pytest.fixture
def verified(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    d = checkpoint(tmp_path / "ckpt")
    assert station("verify", str(d)) == 0
    capsys.readouterr()
    return d


def gate_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_verified_checkpoint_passes(verified: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stamp = verified / STAMP_NAME
    assert station("gate", "stamp", str(verified)) == 0
    assert gate_line(capsys) == f"vllm-station: checkpoint {verified} verified (revision {REV[:12]}, {stamp})"
    assert station("gate", "stamp", str(verified), "--revision", REV) == 0
    assert gate_line(capsys) == f"vllm-station: checkpoint {verified} verified (revision {REV[:12]}, {stamp})"


def test_never_verified_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = checkpoint(tmp_path / "ckpt")
    assert station("gate", "stamp", str(d), "--revision", REV) == 1
    assert gate_line(capsys) == (
        f"vllm-station: refusing to start: the checkpoint in {d} is not verified "
        f"({d / STAMP_NAME} missing); run: station verify {d}"
    )


def test_failed_verification_leaves_nothing_to_pass(
    verified: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = next(verified.glob("*.safetensors"))
    with shard.open("ab") as f:
        f.write(b"\0" * 8)  # padded: verify fails and removes the old stamp
    assert station("verify", str(verified)) == 1
    capsys.readouterr()
    assert station("gate", "stamp", str(verified)) == 1
    assert "is not verified" in gate_line(capsys)


def test_other_revision_is_refused_with_the_fix(verified: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fix = "run: systemctl start vllm-station-download"
    assert station("gate", "stamp", str(verified), "--revision", OTHER, "--fix", fix) == 1
    assert gate_line(capsys) == (
        f"vllm-station: refusing to start: the checkpoint in {verified} is revision {REV}, expected {OTHER} "
        f"({verified / STAMP_NAME}); {fix}"
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"version": 1, "files": [', "not valid JSON"),
        ("[]", "not a JSON object (list): not a verify stamp"),
        ('{"version": 2, "files": []}', "unknown stamp version 2 (expected 1)"),
        ('{"version": 1, "revision": "x"}', "no 'files' list"),
        # hand-written stamps: present, parseable, and not proof of anything
        ('{"version": 1, "verified_at": "2026-01-01T00:00:00Z", "files": []}', "an empty 'files' list"),
        ('{"version": 1, "files": [{"path": "config.json", "size": 2}]}', "no 'verified_at' time: None"),
        (
            '{"version": 1, "verified_at": "t", "files": [{"path": "config.json"}]}',
            "files[0] (config.json) has no 'size' in bytes: None",
        ),
        ('{"version": 1, "verified_at": "t", "files": ["config.json"]}', "files[0] is not an object"),
        (
            '{"version": 1, "verified_at": "t", "files": [{"path": "../x", "size": 1}]}',
            "files[0] has no relative 'path'",
        ),
        (
            '{"version": 1, "verified_at": "t", "files": [{"path": "/etc/x", "size": 1}]}',
            "files[0] has no relative 'path' inside the checkpoint: '/etc/x'",
        ),
        (
            '{"version": true, "verified_at": "t", "files": [{"path": "a", "size": 1}]}',
            "unknown stamp version",
        ),
        (b"\xff\xfe", "not UTF-8 text"),
    ],
)
def test_corrupt_stamp_is_refused(
    verified: Path, capsys: pytest.CaptureFixture[str], content: str | bytes, problem: str
) -> None:
    stamp = verified / STAMP_NAME
    if isinstance(content, bytes):
        stamp.write_bytes(content)
    else:
        stamp.write_text(content)
    assert station("gate", "stamp", str(verified), "--fix", "FIX") == 1
    line = gate_line(capsys)
    assert line.startswith(
        f"vllm-station: refusing to start: the verify stamp {stamp} is unusable: {problem}"
    )
    assert line.endswith("; FIX")


def test_unreadable_stamp_is_refused(verified: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stamp = verified / STAMP_NAME
    stamp.unlink()
    stamp.mkdir()  # unreadable whoever runs the test (root reads any mode)
    assert station("gate", "stamp", str(verified)) == 1
    assert gate_line(capsys) == (
        f"vllm-station: refusing to start: the verify stamp {stamp} is unusable: "
        f"cannot read: it is a directory, not a regular file; run: station verify {verified}"
    )


def test_missing_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "nowhere"
    assert station("gate", "stamp", str(d)) == 1
    assert gate_line(capsys) == (
        f"vllm-station: refusing to start: the checkpoint directory {d} does not exist; "
        f"run: station verify {d}"
    )
    d.write_text("a file")
    assert station("gate", "stamp", str(d)) == 1
    assert "is not a directory" in gate_line(capsys)


def test_copy_without_revision_refused_until_verify_records_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy without the download's hash record: verify stamps it with no revision. The gate without
    --revision lets it start; with --revision it refuses and says how to record the revision."""
    d = checkpoint(tmp_path / "copy", revision=None)
    assert station("verify", str(d)) == 0
    capsys.readouterr()
    assert read_stamp(d).revision is None
    assert station("gate", "stamp", str(d)) == 0
    assert (
        gate_line(capsys) == f"vllm-station: checkpoint {d} verified (no revision recorded, {d / STAMP_NAME})"
    )
    assert station("gate", "stamp", str(d), "--revision", REV) == 1
    assert gate_line(capsys) == (
        f"vllm-station: refusing to start: the verify stamp {d / STAMP_NAME} names no revision "
        f"(revision null), expected {REV}: the checkpoint was verified without one (a copy without the "
        f"download's hash record); `station verify {d} --revision {REV}` records the revision it was told; "
        f"run: station verify {d}"
    )
    # a stamp from elsewhere without the key at all
    data = json.loads((d / STAMP_NAME).read_text())
    del data["revision"]
    (d / STAMP_NAME).write_text(json.dumps(data))
    assert station("gate", "stamp", str(d), "--revision", REV) == 1
    assert "names no revision (no 'revision' key)" in gate_line(capsys)
    # what the message says to do works
    assert station("verify", str(d), "--revision", REV) == 0
    capsys.readouterr()
    assert station("gate", "stamp", str(d), "--revision", REV) == 0
    assert f"verified (revision {REV[:12]}," in gate_line(capsys)


def test_verify_revision_must_match_the_hash_record(
    verified: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert station("verify", str(verified), "--revision", OTHER) == 1
    err = capsys.readouterr().err
    assert f"records revision {REV}, but revision {OTHER} was given" in err
    assert not (verified / STAMP_NAME).exists()


@pytest.mark.parametrize(
    "argv",
    [("gate",), ("gate", "stamp"), ("gate", "ticket", "/x"), ("gate", "stamp", "/x", "--revision", " ")],
)
def test_usage_errors_exit_2(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert station(*argv) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_listed_file_missing_is_refused_by_name(verified: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard = "model-00002-of-00002.safetensors"
    (verified / shard).unlink()
    assert station("gate", "stamp", str(verified), "--revision", REV, "--fix", "FIX") == 1
    assert gate_line(capsys) == (
        f"vllm-station: refusing to start: the checkpoint in {verified} changed since it was verified "
        f"({verified / STAMP_NAME}): {shard} missing; FIX"
    )


def test_a_resized_file_is_refused_by_name(verified: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard = "model-00001-of-00002.safetensors"
    size = (verified / shard).stat().st_size
    with open(verified / shard, "ab") as f:
        f.write(b"\0")
    (verified / "config.json").unlink()
    (verified / "config.json").mkdir()
    assert station("gate", "stamp", str(verified), "--fix", "FIX") == 1
    line = gate_line(capsys)
    assert "changed since it was verified" in line
    assert "config.json is not a regular file" in line
    assert f"{shard} {size + 1} B != {size} B" in line
    assert line.endswith("; FIX")


def test_a_stamp_listing_more_files_than_four_names_three(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "ck"
    d.mkdir()
    files = [{"path": f"f{i}", "size": 1} for i in range(5)]
    (d / STAMP_NAME).write_text(
        json.dumps({"version": 1, "verified_at": "t", "revision": REV, "files": files})
    )
    assert station("gate", "stamp", str(d), "--fix", "FIX") == 1
    assert gate_line(capsys).endswith("f0 missing; f1 missing; f2 missing (and 2 more); FIX")
