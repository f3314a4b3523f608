"""Mutants of `station prestart` that survived the other tests (issue 17): the threshold's boundary and unit.

The documented rule is "refuse when FilePages is above the threshold; at or below passes", the threshold in
GiB (2^30 bytes). A figure exactly on the threshold must pass and one kB more must refuse; a figure between
4 GB (decimal) and 4 GiB must pass with the default 4.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sysfs_fixtures import gb300_root, set_file_pages

from vllm_station.cli import main

GiB = 1024**3
KiB = 1024


def run_json(root: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, object]]:
    rc = main(["prestart", "--root", str(root), "--gpu-node", "1", "--settle-seconds", "0", "--no-drop",
               "--json", *extra])
    return rc, json.loads(capsys.readouterr().out)


def test_exactly_at_the_threshold_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = gb300_root(tmp_path / "root", file_pages_gib=4)
    rc, report = run_json(root, capsys, "--max-file-pages-gib", "4")
    assert report["file_pages_bytes"] == 4 * GiB, "the fixture puts FilePages exactly on 4 GiB"
    assert (rc, report["status"]) == (0, "ok"), "at the threshold is 'at or below': the start goes on"
    assert report["message"] == "NUMA node 1 FilePages 4.00 GiB <= 4 GiB"


def test_one_kib_above_the_threshold_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = gb300_root(tmp_path / "root")
    set_file_pages(root, 1, 4 + KiB / GiB)
    rc, report = run_json(root, capsys, "--max-file-pages-gib", "4")
    assert report["file_pages_bytes"] == 4 * GiB + KiB
    assert (rc, report["status"]) == (1, "above-threshold")


@pytest.mark.parametrize("threshold", ["4", "2.5"])
def test_fractional_and_whole_thresholds_at_the_boundary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], threshold: str
) -> None:
    limit = float(threshold)
    root = gb300_root(tmp_path / "root", file_pages_gib=limit)
    assert run_json(root, capsys, "--max-file-pages-gib", threshold)[0] == 0
    set_file_pages(root, 1, limit + KiB / GiB)
    assert run_json(root, capsys, "--max-file-pages-gib", threshold)[0] == 1


def test_threshold_is_gib_not_gb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """4.2 GB = 3.91 GiB: below the default 4 GiB, above a (wrong) decimal 4 GB."""
    root = gb300_root(tmp_path / "root", file_pages_gib=4.2e9 / GiB)
    rc, report = run_json(root, capsys)  # the default threshold, 4
    assert 4 * 10**9 < report["file_pages_bytes"] < 4 * GiB  # type: ignore[operator]
    assert report["threshold_gib"] == 4.0
    assert (rc, report["status"]) == (0, "ok")
    assert report["file_pages_gib"] == round(report["file_pages_bytes"] / GiB, 3)  # type: ignore[operator]
