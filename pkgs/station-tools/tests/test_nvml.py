"""NVML's library is found where NixOS puts it: a real (tiny, fake) `libnvidia-ml.so.1` built with gcc,
loaded through pynvml, proving the candidate order and the skip that lists every path tried."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from vllm_station.host import nvml
from vllm_station.host.nvml import NvmlUnavailable, library_candidates, read_nvml

# The NVML calls read_nvml makes with no GPU: init, driver version, device count, shutdown. Everything
# else resolves to NVML_ERROR_FUNCTION_NOT_FOUND in pynvml, which read_nvml reads as "not supported".
FAKE_NVML_C = r"""
#include <stdio.h>
int nvmlInit_v2(void) { return 0; }
int nvmlInitWithFlags(unsigned int flags) { (void)flags; return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = 0; return 0; }
int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    snprintf(version, length, "%s", DRIVER);
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
    lib = directory / nvml.LIBRARY_NAME
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
        ctypes.CDLL(nvml.LIBRARY_NAME)
    except OSError:
        return False
    return True


def test_candidate_order(tmp_path: Path) -> None:
    env = {nvml.LIBRARY_ENV: "/opt/nvidia/libnvidia-ml.so.1"}
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
    candidates = library_candidates({nvml.LIBRARY_ENV: str(chosen)}, prefix=tmp_path / "root")
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
    (tmp_path / "run/opengl-driver/lib" / nvml.LIBRARY_NAME).write_text("not an ELF file\n")
    candidates = library_candidates({nvml.LIBRARY_ENV: str(tmp_path / "missing.so")}, prefix=tmp_path)
    with pytest.raises(NvmlUnavailable) as err:
        read_nvml(candidates=candidates)
    message = str(err.value)
    assert message.startswith("cannot load the NVML library libnvidia-ml.so.1 (the NVIDIA driver's); tried: ")
    for candidate in candidates:
        assert candidate in message
    assert "invalid ELF header" in message or "file too short" in message
    assert message.endswith(f"set {nvml.LIBRARY_ENV} to its path")
    assert pynvml.nvmlLib is None, "nothing half-loaded is left for the next attempt"


def test_gpu_check_skip_names_the_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Preflight's GPU check in a unit without the driver on its loader path: SKIP, naming the paths."""
    if system_nvml_loads():
        pytest.skip("this machine has a real libnvidia-ml.so.1 on the loader path")
    from preflight_config import make_config
    from sysfs_fixtures import gb300_root

    from vllm_station.preflight.core import Context, Status, run_checks

    monkeypatch.setenv(nvml.LIBRARY_ENV, str(tmp_path / "nope.so"))
    (result,) = run_checks(Context(root=gb300_root(tmp_path / "root"), config=make_config()), ["gpu"])
    assert result.status is Status.SKIP
    assert (
        f"{tmp_path / 'nope.so'}" in result.figure
        and "/run/opengl-driver/lib/libnvidia-ml.so.1" in result.figure
    )
