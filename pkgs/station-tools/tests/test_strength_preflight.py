"""Mutants of preflight's host checks (scripts/bench-mutation): page-cache's threshold at exactly the limit
and in GiB, host-memory's 10 % and 1 GiB boundaries and the drop_caches estimate, exactly as reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from preflight_config import make_config
from sysfs_fixtures import gb300_root, set_file_pages, write_proc_meminfo

from vllm_station.commands.preflight.checks import _existing_ancestor, assess_gpus
from vllm_station.commands.preflight.core import CheckResult, Context, run_checks
from vllm_station.host.nvml import GpuInfo, GpuProcess, NvmlReport
from vllm_station.status import Status

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


# ---- assess_gpus, the GPU verdict, exactly (the @check functions are outside mutmut's reach) ----


def _gpu(
    index: int, used: int, free: int, reserved: int | None, procs: list[GpuProcess],
    numa: int | None = None, addressing: str | None = None, c2c: bool | None = None,
) -> GpuInfo:  # fmt: skip
    total = 100 * GiB
    return GpuInfo(index, "GB300", f"GPU-{index}", total, used, free, reserved, procs, numa, addressing, c2c)


def test_assess_gpus_two_gpus_exactly() -> None:
    idle = _gpu(0, 1 * GiB, 99 * GiB, 1 * GiB, [], numa=1, addressing="ATS", c2c=True)
    procs = [GpuProcess(11, 20 * GiB, "compute", "python3", "python3 x.py"), GpuProcess(12, None, "graphics")]
    busy = _gpu(1, 30 * GiB, 70 * GiB, 0, procs, c2c=False)
    r = assess_gpus(NvmlReport("580.1", "13.0", None, [idle, busy]), 0.9)
    assert r.status is Status.FAIL
    assert r.figure == (
        "driver 580.1, 2 GPU(s); GPU0 GB300: 100.00 GiB total, 1.00 GiB used, 99.00 GiB free (memory on NUMA "
        "node 1, addressing ATS, C2C on); gpuMemoryUtilization 0.9 → 90.00 GiB fits in 99.00 GiB free; GPU1 "
        "GB300: 100.00 GiB total, 30.00 GiB used, 70.00 GiB free (C2C off); pid 11 python3 (compute) holds "
        "20.00 GiB; pid 12 ? (graphics) holds unknown amount; stranded: 20.00 GiB held by pid 11 (python3), "
        "12 (?) while no vLLM runs; gpuMemoryUtilization 0.9 wants 90.00 GiB but only 70.00 GiB is free"
    )
    assert r.threshold == (
        "free >= gpuMemoryUtilization 0.9 × total; no process holding memory when no vLLM runs"
    )
    assert r.fix == (
        "GPU1: stop pid 11 (python3), 12 (?) (a leftover vLLM/engine, a notebook, a test) — "
        "`kill <pid>`; for a dead container `docker rm -f vllm-station` / GPU1: free 20.00 GiB more "
        "(stop the holders above), or lower gpuMemoryUtilization below 0.70; vLLM refuses to start when "
        "free memory is below utilization × total"
    )
    assert r.details["findings"] == [
        {"gpu": 1, "finding": "stranded", "bytes": 20 * GiB, "pids": [11, 12]},
        {"gpu": 1, "finding": "does-not-fit", "wanted_bytes": 90 * GiB},
    ]
    assert (r.details["count"], r.details["gpu_memory_utilization"]) == (2, 0.9)
    assert (r.details["driver_version"], r.details["cuda_driver_version"]) == ("580.1", "13.0")
    assert r.details["gpus"][1]["processes"][0]["pid"] == 11


def test_assess_gpus_boundaries() -> None:
    exactly = assess_gpus(NvmlReport("d", None, None, [_gpu(0, 50 * GiB, 50 * GiB, 50 * GiB, [])]), 0.5)
    assert exactly.status is Status.PASS and exactly.fix is None, "free == utilization × total fits"
    assert exactly.details["findings"] == []
    noise = assess_gpus(NvmlReport("d", None, None, [_gpu(0, 2 * GiB, 98 * GiB, 1 * GiB, [])]), 0.5)
    assert noise.status is Status.PASS, "exactly 1 GiB nobody explains is noise"
    held = assess_gpus(NvmlReport("d", None, None, [_gpu(0, 2 * GiB + 1, 98 * GiB, 1 * GiB, [])]), 0.5)
    assert held.status is Status.WARN
    assert held.details["findings"] == [{"gpu": 0, "finding": "held-invisible", "bytes": GiB + 1}]
    assert "held: 1.00 GiB used by no process visible here (another PID namespace/container)" in held.figure
    assert held.fix == (
        "GPU0: find the holder with `nvidia-smi` on the host (containers: `docker ps`); a GPU whose "
        "holder is gone needs the process's container stopped or a reboot"
    )
    no_reserved = assess_gpus(NvmlReport("d", None, None, [_gpu(0, GiB, 99 * GiB, None, [])]), 0.5)
    assert no_reserved.status is Status.PASS, "1 GiB used without a reserved figure is still noise"


def test_assess_gpus_vllm_running_and_none_visible() -> None:
    engine = GpuProcess(4242, 90 * GiB, "compute", "VLLM::EngineCor")
    running = assess_gpus(NvmlReport("d", None, None, [_gpu(0, 91 * GiB, 9 * GiB, 1 * GiB, [engine])]), 0.9)
    assert running.status is Status.PASS
    assert running.figure.endswith(
        "; pid 4242 VLLM::EngineCor (compute) holds 90.00 GiB; vLLM is running on GPU0 (pid 4242)"
    )
    assert running.details["findings"] == [{"gpu": 0, "finding": "vllm-running"}]
    none = assess_gpus(NvmlReport("580.1", None, None, []), 0.9)
    assert (none.status, none.threshold) == (Status.FAIL, ">= 1 GPU")
    assert none.figure == "NVML (driver 580.1) sees no GPU"
    assert none.fix == "check `nvidia-smi`; the driver is loaded but no device is visible (DevicePolicy/CDI?)"
    assert none.details["count"] == 0 and "findings" not in none.details


def test_a_read_failure_names_the_file_and_the_fix(root: Path) -> None:
    meminfo = root / "sys/devices/system/node/node1/meminfo"
    meminfo.write_text("Node 1 MemTotal: 12 kB\n")
    r = run_one(root, "page-cache")
    assert (r.name, r.status) == ("page-cache", Status.FAIL)
    assert r.figure == f"cannot read {meminfo}: no FilePages, MemFree line"
    assert r.fix == (
        "the kernel file is missing or not in its usual format: check --root, or that /sys and /proc are "
        "mounted (a sandboxed unit needs them visible)"
    )
    assert r.details == {"path": str(meminfo), "problem": "no FilePages, MemFree line"}


def test_existing_ancestor(tmp_path: Path) -> None:
    assert _existing_ancestor(tmp_path) == tmp_path
    assert _existing_ancestor(tmp_path / "a" / "b") == tmp_path
    assert _existing_ancestor(Path("/no-such-dir-here/x")) == Path("/")


def test_assess_gpus_across_gpus() -> None:
    tight = _gpu(0, 60 * GiB, 40 * GiB, 60 * GiB, [])  # fits nothing at 0.5, held by nobody beyond reserved
    stranded = _gpu(1, 11 * GiB, 89 * GiB, 1 * GiB, [GpuProcess(5, 10 * GiB, "compute", "jupyter")])
    r = assess_gpus(NvmlReport("d", None, None, [tight, stranded]), 0.5)
    assert (r.name, r.status) == ("gpu", Status.FAIL), "a later WARN does not soften an earlier FAIL"
    held = _gpu(2, 3 * GiB, 97 * GiB, 1 * GiB, [])
    r = assess_gpus(NvmlReport("d", None, None, [tight, held]), 0.5)
    assert r.status is Status.FAIL
    engines = [GpuProcess(7, GiB, "compute", "vllm"), GpuProcess(8, GiB, "compute", "vllm")]
    running = _gpu(0, 3 * GiB, 97 * GiB, 1 * GiB, engines)
    r = assess_gpus(NvmlReport("d", None, None, [running, tight]), 0.5)
    assert "vLLM is running on GPU0 (pid 7, 8)" in r.figure
    assert r.status is Status.FAIL, "the GPU after a vLLM one is still assessed"
    assert assess_gpus(NvmlReport("d", None, None, []), 0.5).name == "gpu"


def test_no_reserved_figure_counts_as_zero() -> None:
    just_over = _gpu(0, GiB + 1, 99 * GiB, None, [])
    assert assess_gpus(NvmlReport("d", None, None, [just_over]), 0.5).status is Status.WARN


def test_a_gpu_line_without_modes_has_no_parentheses() -> None:
    plain = assess_gpus(NvmlReport("d", None, None, [_gpu(0, 0, 100 * GiB, 0, [])]), 0.5)
    assert "GPU0 GB300: 100.00 GiB total, 0.00 GiB used, 100.00 GiB free; " in plain.figure
