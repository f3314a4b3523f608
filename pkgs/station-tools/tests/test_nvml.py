"""NVML's library is found where NixOS puts it: a real (tiny, fake) `libnvidia-ml.so.1` built with gcc,
loaded through pynvml, proving the candidate order and the skip that lists every path tried; the same
library reports GPUs and their running compute processes (named from a prepared /proc) when asked to."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from vllm_station.host.nvml import NvmlUnavailable, library_candidates, read_nvml

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
LIBRARY_NAME = "libnvidia-ml.so.1"
LIBRARY_ENV = "STATION_NVML_LIBRARY"

# The NVML calls read_nvml makes: init, driver version, device count, shutdown; with $FAKE_NVML_GPUS > 0
# also a handle, name, memory and the compute processes of each GPU, from $FAKE_NVML_PROCS
# ("GPU:PID:BYTES,…", BYTES "-" for "not available"), read at each call. Everything else resolves to
# NVML_ERROR_FUNCTION_NOT_FOUND in pynvml, which read_nvml reads as "not supported" — including
# nvmlDeviceGetGraphicsRunningProcesses_v3, whose absence pynvml reports as NVMLLibraryMismatchError.
FAKE_NVML_C = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { unsigned int pid; unsigned long long used; unsigned int gi, ci; } proc_info;
typedef struct { unsigned long long total, free, used; } memory_info;

int nvmlInit_v2(void) { return 0; }
int nvmlInitWithFlags(unsigned int flags) { (void)flags; return 0; }
int nvmlShutdown(void) { return 0; }
static unsigned int gpus(void) {
    const char *s = getenv("FAKE_NVML_GPUS");
    return s ? (unsigned int)atoi(s) : 0;
}
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = gpus(); return 0; }
int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    snprintf(version, length, "%s", DRIVER);
    return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    if (index >= gpus()) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *device = (void *)(uintptr_t)(index + 1);
    return 0;
}
int nvmlDeviceGetName(void *device, char *name, unsigned int length) {
    snprintf(name, length, "Fake GB300 %u", (unsigned int)((uintptr_t)device - 1));
    return 0;
}
/* the processes of one GPU from $FAKE_NVML_PROCS, into out[0..max) (out NULL: count only) */
static unsigned int procs_of(unsigned int gpu, proc_info *out, unsigned int max) {
    const char *spec = getenv("FAKE_NVML_PROCS");
    unsigned int n = 0;
    char buf[4096], *save = NULL;
    if (!spec) return 0;
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        unsigned int g, pid;
        char bytes[32];
        if (sscanf(item, "%u:%u:%31s", &g, &pid, bytes) != 3 || g != gpu) continue;
        if (out && n < max) {
            out[n].pid = pid;
            out[n].used = bytes[0] == '-' ? ~0ULL : strtoull(bytes, NULL, 10);
            out[n].gi = out[n].ci = 0xFFFFFFFFu;
        }
        n++;
    }
    return n;
}
int nvmlDeviceGetMemoryInfo(void *device, memory_info *m) {
    unsigned int gpu = (unsigned int)((uintptr_t)device - 1);
    proc_info p[64];
    unsigned int n = procs_of(gpu, p, 64);
    m->total = 288ULL << 30;
    m->used = 0;
    for (unsigned int i = 0; i < n && i < 64; i++) m->used += p[i].used == ~0ULL ? 0 : p[i].used;
    m->free = m->total - m->used;
    return 0;
}
int nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *count, proc_info *infos) {
    unsigned int gpu = (unsigned int)((uintptr_t)device - 1);
    unsigned int n = procs_of(gpu, NULL, 0);
    if (n == 0) { *count = 0; return 0; }
    if (infos == NULL || *count < n) { *count = n; return 7; } /* NVML_ERROR_INSUFFICIENT_SIZE */
    *count = procs_of(gpu, infos, *count);
    return 0;
}
"""


def build_fake(directory: Path, driver: str) -> Path:
    """`directory/libnvidia-ml.so.1` reporting driver version `driver` (no SONAME: never the real one)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc to build the fake NVML library")
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "fake_nvml.c"
    source.write_text(FAKE_NVML_C)
    lib = directory / LIBRARY_NAME
    subprocess.run(
        [gcc, "-shared", "-fPIC", f'-DDRIVER="{driver}"', "-o", str(lib), str(source)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return lib


@pytest.fixture(autouse=True)
def fresh_pynvml() -> Iterator[None]:
    """Each test loads the library itself: pynvml's loaded library and cached pointers are reset."""
    saved = pynvml.nvmlLib, dict(pynvml._nvmlGetFunctionPointer_cache)
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()
    yield
    pynvml.nvmlLib = saved[0]
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml._nvmlGetFunctionPointer_cache.update(saved[1])


def system_nvml_loads() -> bool:
    try:
        ctypes.CDLL(LIBRARY_NAME)
    except OSError:
        return False
    return True


def test_candidate_order(tmp_path: Path) -> None:
    env = {LIBRARY_ENV: "/opt/nvidia/libnvidia-ml.so.1"}
    assert library_candidates(env, prefix=tmp_path) == [
        "/opt/nvidia/libnvidia-ml.so.1",
        "libnvidia-ml.so.1",
        f"{tmp_path}/run/opengl-driver/lib/libnvidia-ml.so.1",
        f"{tmp_path}/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
        f"{tmp_path}/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1",
        f"{tmp_path}/usr/lib64/libnvidia-ml.so.1",
        f"{tmp_path}/usr/lib/libnvidia-ml.so.1",
    ]
    assert library_candidates({})[:3] == [
        "libnvidia-ml.so.1",
        "/run/opengl-driver/lib/libnvidia-ml.so.1",
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    ]


def test_env_var_wins_over_everything(tmp_path: Path) -> None:
    chosen = build_fake(tmp_path / "env", "111.11")
    build_fake(tmp_path / "root/run/opengl-driver/lib", "222.22")
    candidates = library_candidates({LIBRARY_ENV: str(chosen)}, prefix=tmp_path / "root")
    report = read_nvml(candidates=candidates)
    assert report.driver_version == "111.11" and report.gpus == []


def test_opengl_driver_dir_is_honoured(tmp_path: Path) -> None:
    """On NixOS the driver's library is only in /run/opengl-driver/lib, off a unit's loader path."""
    if system_nvml_loads():
        pytest.skip("this machine's loader finds a real libnvidia-ml.so.1 first (the order is tested above)")
    build_fake(tmp_path / "run/opengl-driver/lib", "222.22")
    build_fake(tmp_path / "usr/lib64", "333.33")
    report = read_nvml(candidates=library_candidates({}, prefix=tmp_path))
    assert report.driver_version == "222.22"


def test_none_loads_lists_every_path_tried(tmp_path: Path) -> None:
    if system_nvml_loads():
        pytest.skip("this machine has a real libnvidia-ml.so.1 on the loader path")
    (tmp_path / "run/opengl-driver/lib").mkdir(parents=True)
    (tmp_path / "run/opengl-driver/lib" / LIBRARY_NAME).write_text("not an ELF file\n")
    candidates = library_candidates({LIBRARY_ENV: str(tmp_path / "missing.so")}, prefix=tmp_path)
    with pytest.raises(NvmlUnavailable) as err:
        read_nvml(candidates=candidates)
    message = str(err.value)
    assert message.startswith("cannot load the NVML library libnvidia-ml.so.1 (the NVIDIA driver's); tried: ")
    for candidate in candidates:
        assert candidate in message
    assert "invalid ELF header" in message or "file too short" in message
    assert message.endswith(f"set {LIBRARY_ENV} to its path")
    assert pynvml.nvmlLib is None, "nothing half-loaded is left for the next attempt"


def test_gpu_check_skip_names_the_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Preflight's GPU check in a unit without the driver on its loader path: SKIP, naming the paths."""
    if system_nvml_loads():
        pytest.skip("this machine has a real libnvidia-ml.so.1 on the loader path")
    from preflight_config import make_config
    from sysfs_fixtures import gb300_root

    from vllm_station.commands.preflight.core import Context, run_checks
    from vllm_station.status import Status

    monkeypatch.setenv(LIBRARY_ENV, str(tmp_path / "nope.so"))
    (result,) = run_checks(Context(root=gb300_root(tmp_path / "root"), config=make_config()), ["gpu"])
    assert result.status is Status.SKIP
    assert (
        f"{tmp_path / 'nope.so'}" in result.figure
        and "/run/opengl-driver/lib/libnvidia-ml.so.1" in result.figure
    )


# --- running processes -------------------------------------------------------------------------------


def write_proc(root: Path, pid: int, comm: str, cmdline: bytes) -> None:
    """`root/proc/PID/{comm,cmdline}` as the kernel shows them (comm cut at 15 characters)."""
    directory = root / "proc" / str(pid)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "comm").write_text(comm[:15] + "\n")
    (directory / "cmdline").write_bytes(cmdline)


def test_running_compute_processes_named_from_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each GPU's compute processes with the memory they hold, named from /proc under the root; a process
    whose memory the driver does not report reads None; no graphics-process call (a driver without
    `…GraphicsRunningProcesses_v3`) is "not supported", not an error."""
    lib = build_fake(tmp_path / "lib", "580.95.05")
    root = tmp_path / "root"
    write_proc(root, 4242, "VLLM::Worker_TP0", b"VLLM::Worker_TP0\0")
    write_proc(root, 77, "python3", b"python3\0-c\0import torch\0")
    monkeypatch.setenv("FAKE_NVML_GPUS", "2")
    monkeypatch.setenv("FAKE_NVML_PROCS", f"0:4242:{218 * 1024**3},0:77:-,1:4243:{2 * 1024**3}")
    report = read_nvml(proc_root=root, candidates=[str(lib)])
    assert report.driver_version == "580.95.05"
    assert [g.name for g in report.gpus] == ["Fake GB300 0", "Fake GB300 1"]
    gpu0, gpu1 = report.gpus
    assert [(p.pid, p.used_bytes, p.kind) for p in gpu0.processes] == [
        (4242, 218 * 1024**3, "compute"),
        (77, None, "compute"),
    ]
    worker, other = gpu0.processes
    assert worker.name == "VLLM::Worker_TP"  # the kernel keeps 15 characters: the rank is cut off
    assert worker.cmdline == "VLLM::Worker_TP0" and worker.is_vllm
    assert other.cmdline == "python3 -c import torch" and not other.is_vllm
    assert gpu0.memory_used == 218 * 1024**3 and gpu0.memory_total == 288 * 1024**3
    (unnamed,) = gpu1.processes  # no /proc entry (another PID namespace): nameless, not an error
    assert (unnamed.pid, unnamed.name, unnamed.cmdline) == (4243, "", "")
