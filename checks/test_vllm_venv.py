"""Tier `realvllm`: the vLLM CPU venv the tests serve with asks Linux for the AMX tile state in every process.

vLLM 0.32's bfloat16 CPU attention runs AMX instructions without that permission; a server whose first
request is one token (`station wait-ready`'s probe) then dies with SIGILL in its worker on a CPU with AMX
(scripts/vllm-sitecustomize.py, which scripts/setup-vllm installs as the venv's sitecustomize, says more).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from nixenv import CACHE, REPO

pytestmark = pytest.mark.realvllm

VENV = Path(os.environ.get("STATION_VLLM_VENV", str(CACHE / "vllm-venv")))
# the permitted extended features of this process, read with arch_prctl(ARCH_GET_XCOMP_PERM) (x86_64: 158)
PERMITTED = r"""
import ctypes
mask = ctypes.c_uint64(0)
rc = ctypes.CDLL(None, use_errno=True).syscall(158, 0x1022, ctypes.byref(mask))
print(rc, mask.value)
"""
XTILEDATA = 1 << 18


def _venv_python() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no vLLM venv at {VENV}: scripts/setup-vllm makes it (scripts/check runs it)")
    return python


def _amx() -> bool:
    flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    return "amx_tile" in flags.split()


def test_the_venvs_sitecustomize_is_the_repositorys() -> None:
    python = _venv_python()
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()  # fmt: skip
    installed = Path(site) / "sitecustomize.py"
    assert installed.exists(), f"{installed} missing: run scripts/setup-vllm"
    assert installed.read_bytes() == (REPO / "scripts/vllm-sitecustomize.py").read_bytes()


def test_every_process_of_the_venv_holds_the_amx_tile_permission() -> None:
    python = _venv_python()
    if os.uname().machine != "x86_64" or not _amx():
        pytest.skip("this CPU has no AMX tiles (nothing to ask for; vLLM picks another kernel)")
    with_site = subprocess.run([str(python), "-c", PERMITTED], capture_output=True, text=True, timeout=60, check=True)
    rc, mask = map(int, with_site.stdout.split())
    assert rc == 0 and mask & XTILEDATA, f"the venv's python holds no AMX permission: {with_site.stdout}"
    # without site (so without sitecustomize) the same process has none: the permission is the file's doing
    bare = subprocess.run([str(python), "-S", "-c", PERMITTED], capture_output=True, text=True, timeout=60, check=True)
    rc, mask = map(int, bare.stdout.split())
    assert rc == 0 and not mask & XTILEDATA, f"a bare interpreter already holds it: {bare.stdout}"
