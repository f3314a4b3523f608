"""`station revisions`: revisions of one model side by side, pruned on real checkpoints stamped by the
real `station verify` (the stamp's time is set in its JSON to order them, instead of waiting)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hubserver import make_checkpoint

from vllm_station import cli
from vllm_station.checkpoint.hashes import HashRecord, RecordedFile, write_hash_record
from vllm_station.checkpoint.revisions import list_revisions, revision_dir
from vllm_station.checkpoint.stamp import STAMP_NAME, read_stamp

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
REVISIONS_DIR_NAME = "revisions"

R1 = "1111111111111111111111111111111111111111"
R2 = "2222222222222222222222222222222222222222"
R3 = "3333333333333333333333333333333333333333"


def verified_checkpoint(directory: Path, revision: str, at: str, capsys: pytest.CaptureFixture[str]) -> Path:
    """A real 1-shard checkpoint in `directory`, verified by `station verify`; its stamp says `at`."""
    make_checkpoint(directory, shards=1, tensors_per_shard=2)
    files = {p.name: RecordedFile(size=p.stat().st_size) for p in directory.iterdir() if p.is_file()}
    write_hash_record(directory, HashRecord(repo="org/model", revision=revision, files=files))
    assert cli.main(["verify", str(directory)]) == 0
    capsys.readouterr()
    stamp = directory / STAMP_NAME
    data = json.loads(stamp.read_text())
    assert data["revision"] == revision
    data["verified_at"] = at
    stamp.write_text(json.dumps(data))
    return directory


@pytest.fixture
def model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """R1, R2, R3 verified in that order under <model>/revisions."""
    base = tmp_path / "glm53-flash"
    for i, rev in enumerate((R1, R2, R3), start=1):
        verified_checkpoint(revision_dir(base, rev), rev, f"2026-0{i}-01T00:00:00Z", capsys)
    return base


def prune(capsys: pytest.CaptureFixture[str], base: Path, *argv: str) -> tuple[int, dict[str, object]]:
    code = cli.main(["revisions", "prune", str(base), *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def on_disk(base: Path) -> set[str]:
    return {p.name for p in (base / REVISIONS_DIR_NAME).iterdir()}


def test_layout_is_one_directory_per_revision(tmp_path: Path) -> None:
    assert revision_dir(tmp_path, R1) == tmp_path / "revisions" / R1
    for bad in ("", ".", "..", "a/b", "../x", "a b"):
        with pytest.raises(ValueError, match="cannot name a directory"):
            revision_dir(tmp_path, bad)


def test_new_revision_keeps_the_previous_one_and_drops_the_older(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """keep=2 (the default): R3 pinned after R1 and R2 verified; R1 goes (two newer verified), R2 stays."""
    code, report = prune(capsys, model, "--pin", R3)
    assert code == 0
    assert report["deleted"] == [R1] and report["failed"] == {}
    assert set(report["kept"]) == {R2, R3}  # type: ignore[arg-type]
    assert on_disk(model) == {R2, R3}
    # What stays is still a verified checkpoint (the gate passes on it), for a rollback to R2.
    assert cli.main(["gate", "stamp", str(revision_dir(model, R2)), "--revision", R2]) == 0


def test_the_pinned_revision_is_never_deleted_even_when_oldest(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rollback pins R1 (the oldest): it stays, with the newest other one; R2 goes."""
    code, report = prune(capsys, model, "--pin", R1, "--keep", "2")
    assert code == 0
    assert on_disk(model) == {R1, R3}
    assert report["reasons"][R1] == "pinned"  # type: ignore[index]


def test_keep_one_leaves_only_the_pinned_revision(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = prune(capsys, model, "--pin", R2, "--keep", "1")
    assert code == 0
    assert on_disk(model) == {R2}


def test_protected_revisions_are_kept_beyond_keep(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = prune(capsys, model, "--pin", R3, "--keep", "1", "--protect", R1)
    assert code == 0
    assert on_disk(model) == {R1, R3}


def test_enough_revisions_deletes_nothing(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = prune(capsys, model, "--pin", R3, "--keep", "3")
    assert code == 0 and report["deleted"] == []
    assert on_disk(model) == {R1, R2, R3}


def test_unverified_directories_are_left_alone(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An interrupted download (no stamp) and a stamp that is not one are no revision to serve: kept,
    reported, never counted among the verified ones."""
    partial = revision_dir(model, "4444444444444444444444444444444444444444")
    partial.mkdir()
    (partial / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 1024)
    broken = revision_dir(model, "5555555555555555555555555555555555555555")
    broken.mkdir()
    (broken / STAMP_NAME).write_text("{not json")
    code, report = prune(capsys, model, "--pin", R3, "--keep", "2")
    assert code == 0
    assert report["deleted"] == [R1]
    assert set(report["unverified"]) == {partial.name, broken.name}  # type: ignore[arg-type]
    assert on_disk(model) == {R2, R3, partial.name, broken.name}
    assert "not verified" in report["reasons"][partial.name]  # type: ignore[index]


def test_an_unverified_pin_keeps_the_newest_verified_ones(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pruning by hand while the pin is still downloading: the pin is kept and does not count, so two
    verified revisions stay to serve or roll back to."""
    pin = revision_dir(model, "6666666666666666666666666666666666666666")
    pin.mkdir()
    code, _ = prune(capsys, model, "--pin", pin.name, "--keep", "2")
    assert code == 0
    assert on_disk(model) == {pin.name, R2, R3}


def test_dry_run_deletes_nothing(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = prune(capsys, model, "--pin", R3, "--dry-run")
    assert code == 0
    assert report["would_delete"] == [R1] and report["deleted"] == []
    assert on_disk(model) == {R1, R2, R3}


def test_a_link_under_revisions_is_neither_listed_nor_followed(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A symlink to a checkpoint elsewhere is not a revision of this model: never deleted through."""
    elsewhere = verified_checkpoint(tmp_path / "elsewhere", R1, "2025-01-01T00:00:00Z", capsys)
    (model / REVISIONS_DIR_NAME / "linked").symlink_to(elsewhere)
    code, _ = prune(capsys, model, "--pin", R3, "--keep", "1")
    assert code == 0
    assert on_disk(model) == {R3, "linked"}
    assert read_stamp(elsewhere).revision == R1  # untouched


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pin", "../etc"], "--pin '../etc' cannot name a revision directory"),
        (["--pin", R3, "--keep", "0"], "--keep"),
        (["--pin", R3, "--protect", "a/b"], "--protect 'a/b' cannot name"),
    ],
)
def test_bad_arguments_exit_2_and_delete_nothing(
    model: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert cli.main(["revisions", "prune", str(model), *argv]) == 2
    assert message in capsys.readouterr().err
    assert on_disk(model) == {R1, R2, R3}


def test_list_reports_each_revision(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (model / REVISIONS_DIR_NAME / "partial").mkdir()
    assert cli.main(["revisions", "list", str(model), "--json"]) == 0
    listed = {r["name"]: r for r in json.loads(capsys.readouterr().out)["revisions"]}
    assert set(listed) == {R1, R2, R3, "partial"}
    assert listed[R2]["verified_at"] == "2026-02-01T00:00:00Z" and listed[R2]["problem"] is None
    assert listed["partial"]["verified_at"] is None and "missing" in listed["partial"]["problem"]


def test_adopt_moves_a_flat_checkpoint_into_its_revision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The layout before revisions: the checkpoint verified directly in the entry's dir. adopt renames it
    into revisions/<its stamp's revision>, where the gate finds it verified: no new download."""
    base = verified_checkpoint(tmp_path / "glm53-flash", R1, "2026-01-01T00:00:00Z", capsys)
    before = sorted(p.name for p in base.iterdir())
    assert cli.main(["revisions", "adopt", str(base), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["revision"] == R1 and sorted(report["moved"]) == before
    assert sorted(p.name for p in base.iterdir()) == [REVISIONS_DIR_NAME]
    assert cli.main(["gate", "stamp", str(revision_dir(base, R1)), "--revision", R1]) == 0
    assert [r.name for r in list_revisions(base) if r.verified] == [R1]
    # A second run finds nothing to adopt and changes nothing.
    assert cli.main(["revisions", "adopt", str(base), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["revision"] is None
    assert sorted(p.name for p in base.iterdir()) == [REVISIONS_DIR_NAME]


def test_adopt_leaves_an_unverified_flat_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "m"
    make_checkpoint(base, shards=1, tensors_per_shard=1)
    before = sorted(p.name for p in base.iterdir())
    assert cli.main(["revisions", "adopt", str(base), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["revision"] is None
    assert sorted(p.name for p in base.iterdir()) == before
