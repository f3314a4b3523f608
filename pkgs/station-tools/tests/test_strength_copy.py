"""Mutants of `vllm_station.commands.copy` (scripts/bench-mutation): a file whose size changed at the source
after A verified it is refused after the copy (no stamp), the comparison with A's stamp per kind of difference
as literal messages, the space check exactly on its headroom, rsync's exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_copy as tc

from vllm_station.checkpoint.stamp import Stamp, StampFile
from vllm_station.commands.copy import CopyFailed, compare_with_stamp


@pytest.fixture
def src(tmp_path: Path) -> Path:
    d = tmp_path / "a" / "model"
    tc.build_source(d)
    return d


@pytest.fixture
def daemon(tmp_path: Path, src: Path) -> Iterator[tc.RsyncDaemon]:
    with tc.RsyncDaemon(tmp_path / "daemon", src) as d:
        yield d


def test_a_file_whose_size_changed_at_the_source_after_verify_is_refused(
    daemon: tc.RsyncDaemon, src: Path, tmp_path: Path
) -> None:
    """A's stamp lists config.json at its verified size; the file then grew on A (same name, valid JSON):
    the copy brings the new file, and B refuses it before any stamp is written."""
    config = json.loads((src / "config.json").read_text())
    config["comment"] = "edited on A after station verify"
    (src / "config.json").write_text(json.dumps(config))
    target = tmp_path / "b" / "model"
    r = tc.run_copy(daemon.url, target)
    assert r.returncode == 1, r.stderr
    assert (
        f"station copy: error: {target} does not match the file list of A's stamp after the copy (size "
        "differs from A's stamp: config.json): A's checkpoint changed after it was verified? run station "
        "verify on A, then copy again"
    ) in r.stderr
    assert not (target / ".station-verified.json").exists()
    # the grown file came over: the comparison, not rsync, refused it
    assert (target / "config.json").stat().st_size == (src / "config.json").stat().st_size


def stamp(files: dict[str, int | None]) -> Stamp:
    return Stamp(repo="org/m", revision="c" * 40, verified_at="2026-01-01T00:00:00Z", sha256_checked=False,
                 architectures=["X"], quant_algo=None,
                 files=[StampFile(p, s) for p, s in files.items()])  # fmt: skip


def files(directory: Path, sizes: dict[str, int]) -> Path:
    for name, size in sizes.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(b"x" * size)
    return directory


def refusal(directory: Path, st: Stamp) -> str:
    with pytest.raises(CopyFailed) as err:
        compare_with_stamp(directory, st)
    return str(err.value)


def test_exactly_the_stamped_files_at_their_sizes_pass(tmp_path: Path) -> None:
    d = files(tmp_path, {"a.json": 3, "sub/b.bin": 0})
    compare_with_stamp(d, stamp({"a.json": 3, "sub/b.bin": 0}))
    compare_with_stamp(d, stamp({"a.json": None, "sub/b.bin": 0}))  # a size the stamp does not record


@pytest.mark.parametrize(
    ("have", "want", "problem"),
    [
        ({"a.json": 4}, {"a.json": 3}, "size differs from A's stamp: a.json"),
        ({"a.json": 2}, {"a.json": 3}, "size differs from A's stamp: a.json"),
        ({"a.json": 0}, {"a.json": 1}, "size differs from A's stamp: a.json"),
        ({}, {"a.json": 3}, "missing: a.json"),
        ({"a.json": 3, "b.bin": 1}, {"a.json": 3}, "not in A's stamp: b.bin"),
        ({"b.bin": 1, "c": 2}, {"a.json": 3, "c": 3},
         "missing: a.json; not in A's stamp: b.bin; size differs from A's stamp: c"),
    ],
)  # fmt: skip
def test_each_difference_from_the_stamp_is_named(
    tmp_path: Path, have: dict[str, int], want: dict[str, int | None], problem: str
) -> None:
    d = files(tmp_path / "b", have) if have else (tmp_path / "b")
    d.mkdir(exist_ok=True)
    assert refusal(d, stamp(want)) == (
        f"{d} does not match the file list of A's stamp after the copy ({problem}): A's checkpoint changed "
        "after it was verified? run station verify on A, then copy again"
    )


def test_at_most_five_names_per_kind(tmp_path: Path) -> None:
    d = files(tmp_path, {f"f{i}": 1 for i in range(7)})
    text = refusal(d, stamp({f"f{i}": 2 for i in range(7)}))
    assert "(size differs from A's stamp: f0, f1, f2, f3, f4): " in text
