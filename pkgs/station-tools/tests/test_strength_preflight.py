"""Mutants of preflight's host checks (scripts/bench-mutation): page-cache's threshold at exactly the limit
and in GiB, host-memory's 10 % and 1 GiB boundaries and the drop_caches estimate, exactly as reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from preflight_config import make_config
from sysfs_fixtures import gb300_root, set_file_pages, write_proc_meminfo

from vllm_station.preflight.core import CheckResult, Context, Status, run_checks

GiB = 1024**3
KiB = 1024
TOTAL = 60 * GiB  # a host whose 10 % is a whole number of kB


def run_one(root: Path, name: str, **config: Any) -> CheckResult:
    (result,) = run_checks(Context(root=root, config=make_config(**config)), [name])
    return result


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return gb300_root(tmp_path / "root")


def test_page_cache_exactly_at_the_threshold_passes(root: Path) -> None:
    set_file_pages(root, 1, 4)
    r = run_one(root, "page-cache")
    assert r.status == Status.PASS and r.details["file_pages_bytes"] == 4 * GiB
    assert r.details["threshold_bytes"] == 4 * GiB
    assert r.threshold == "FilePages <= 4 GiB"
    set_file_pages(root, 1, 4 + KiB / GiB)
    r = run_one(root, "page-cache")
    assert r.status == Status.FAIL
    assert r.figure.endswith(" — page cache in HBM: vLLM would see 4.00 GiB less free GPU memory")


def test_page_cache_threshold_is_gib_not_gb(root: Path) -> None:
    set_file_pages(root, 1, 4.2e9 / GiB)  # 4.2 GB: below 4 GiB, above 4 GB
    assert run_one(root, "page-cache").status == Status.PASS
    set_file_pages(root, 1, 2.6)
    r = run_one(root, "page-cache", maxFilePagesGiB=2.5)
    assert (r.status, r.threshold) == (Status.FAIL, "FilePages <= 2.5 GiB")
    assert r.details["threshold_bytes"] == int(2.5 * GiB)


def host(root: Path, **meminfo: int) -> CheckResult:
    values = {"MemTotal": TOTAL, "MemAvailable": TOTAL // 2, "SwapTotal": 8 * GiB, "SwapFree": 8 * GiB}
    values.update(meminfo)
    write_proc_meminfo(root, **values)
    return run_one(root, "host-memory")


def test_host_memory_available_at_exactly_ten_percent_passes(root: Path) -> None:
    assert host(root, MemAvailable=TOTAL // 10).status == Status.PASS
    r = host(root, MemAvailable=TOTAL // 10 - KiB)
    assert r.status == Status.WARN and r.figure.endswith(" — less than 10% of host memory available")


def test_host_memory_swap_at_exactly_one_gib_warns(root: Path) -> None:
    assert host(root, SwapFree=8 * GiB - GiB + KiB).status == Status.PASS
    r = host(root, SwapFree=7 * GiB)
    assert r.status == Status.WARN and r.figure.endswith(" — 1.00 GiB swapped out")
    both = host(root, SwapFree=6 * GiB, MemAvailable=GiB)
    assert both.figure.endswith(" — less than 10% of host memory available; 2.00 GiB swapped out")
    assert both.threshold == "MemAvailable >= 10% of MemTotal; swap used < 1 GiB"
    assert both.details["swap_used_bytes"] == 2 * GiB and both.details["swap_total_bytes"] == 8 * GiB


def test_host_memory_without_mem_available_uses_mem_free(root: Path) -> None:
    write_proc_meminfo(root, MemTotal=TOTAL, MemFree=GiB)
    text = (root / "proc/meminfo").read_text()
    kept = [ln + "\n" for ln in text.splitlines() if "MemAvailable" not in ln]
    (root / "proc/meminfo").write_text("".join(kept))
    r = run_one(root, "host-memory")
    assert (r.status, r.details["mem_available_bytes"]) == (Status.WARN, GiB)


def test_drop_caches_estimate(tmp_path: Path) -> None:
    root = gb300_root(tmp_path / "a", file_pages_gib=3, active_file_gib=1)
    r = host(root)
    assert (r.details["gpu_node_file_pages_bytes"], r.details["drop_would_free_bytes"]) == (3 * GiB, 2 * GiB)
    assert r.figure.endswith("; drop_caches would free ~2.00 GiB of node 1's 3.00 GiB FilePages")
    small = gb300_root(tmp_path / "b", file_pages_gib=1.5, active_file_gib=0.75)
    r = host(small)
    assert r.details["drop_would_free_bytes"] == int(0.75 * GiB)
    assert r.figure.endswith(
        "; drop_caches would free ~0.75 GiB of node 1's 1.50 GiB FilePages (the rest, 0.75 GiB, is "
        "Active(file): in use, it comes back)"
    )
    exactly = gb300_root(tmp_path / "c", file_pages_gib=2, active_file_gib=1)
    assert "(the rest" not in host(exactly).figure, "exactly 1 GiB to free is worth a drop"
