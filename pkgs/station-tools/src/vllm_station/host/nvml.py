"""NVML reader (nvidia-ml-py's `pynvml`): GPUs, memory, processes holding memory, memory modes.

`pynvml` is imported only inside `read_nvml()`; when the module or the driver library is missing it
raises `NvmlUnavailable` with the reason, so callers report SKIP instead of crashing. Queries a GPU or
driver does not support read as None.

The driver's `libnvidia-ml.so.1` is loaded from an ordered list of candidates (`library_candidates`):
`$STATION_NVML_LIBRARY`, the loader's search path, then the directories drivers install it in —
`/run/opengl-driver/lib` first: on NixOS the driver lives there and a systemd unit does not have it on
its loader path. The first that loads is handed to pynvml (its `nvmlLib`, set under its lock); when
none loads, the error lists every candidate tried and why.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from vllm_station import bounded

T = TypeVar("T")

LIBRARY_ENV = "STATION_NVML_LIBRARY"
LIBRARY_NAME = "libnvidia-ml.so.1"
# where drivers install the library, in the order tried after the loader's own search
LIBRARY_DIRS = (
    "/run/opengl-driver/lib",  # NixOS (hardware.graphics / nvidia driver)
    "/usr/lib/x86_64-linux-gnu",  # Debian, Ubuntu
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",  # Fedora, RHEL, SUSE
    "/usr/lib",
)

ADDRESSING_MODES = {0: "none", 1: "HMM", 2: "ATS"}


class NvmlUnavailable(Exception):
    """NVML cannot be used here (no module, no driver library, no GPU driver loaded)."""


@dataclass
class GpuProcess:
    pid: int
    used_bytes: int | None  # None: the driver does not say (e.g. another PID namespace)
    kind: str  # "compute" | "graphics"
    name: str = ""
    cmdline: str = ""

    @property
    def is_vllm(self) -> bool:
        text = f"{self.name} {self.cmdline}".lower()
        return "vllm" in text


@dataclass
class GpuInfo:
    index: int
    name: str
    uuid: str
    memory_total: int
    memory_used: int
    memory_free: int
    memory_reserved: int | None = None
    processes: list[GpuProcess] = field(default_factory=list)
    numa_node: int | None = None  # the NUMA node that exposes this GPU's memory (coherent/NUMA mode)
    addressing_mode: str | None = None  # none | HMM | ATS
    c2c_enabled: bool | None = None
    pci_bus_id: str | None = None


@dataclass
class NvmlReport:
    driver_version: str
    cuda_driver_version: str | None
    nvml_version: str | None
    gpus: list[GpuInfo]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _proc_text(pid: int, name: str, root: Path) -> str:
    try:
        raw = bounded.read_bytes(root / "proc" / str(pid) / name, limit=bounded.SYSFS_LIMIT)
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", errors="replace").strip()


def library_candidates(env: Mapping[str, str] | None = None, prefix: Path = Path("/")) -> list[str]:
    """Where `libnvidia-ml.so.1` is looked for, in order: `$STATION_NVML_LIBRARY`, the bare name (the
    loader's search path), then `LIBRARY_DIRS` under `prefix` (tests point it at a prepared tree)."""
    env = os.environ if env is None else env
    candidates: list[str] = []
    override = env.get(LIBRARY_ENV, "").strip()
    if override:
        candidates.append(override)
    candidates.append(LIBRARY_NAME)
    for directory in LIBRARY_DIRS:
        candidates.append(str(prefix / directory.lstrip("/") / LIBRARY_NAME))
    return list(dict.fromkeys(candidates))


def _load_error(candidate: str, err: OSError) -> str:
    text = str(err)
    return text[len(candidate) + 2 :] if text.startswith(f"{candidate}: ") else text


def load_library(candidates: Sequence[str] | None = None) -> str:
    """Load NVML for pynvml from the first candidate that loads; the path (or name) loaded. When pynvml
    already holds a library, that one stays. Raises NvmlUnavailable listing every candidate tried."""
    try:
        import pynvml
    except ImportError as err:
        raise NvmlUnavailable(f"the nvidia-ml-py module is not installed ({err})") from err
    with pynvml.libLoadLock:  # the lock pynvml's own loader takes: the library is set once
        if pynvml.nvmlLib is not None:
            return str(getattr(pynvml.nvmlLib, "_name", LIBRARY_NAME))
        tried: list[str] = []
        for candidate in library_candidates() if candidates is None else candidates:
            try:
                lib = ctypes.CDLL(candidate)
            except OSError as err:
                tried.append(f"{candidate} ({_load_error(candidate, err)})")
                continue
            pynvml.nvmlLib = lib
            # function pointers pynvml cached from an earlier library must not outlive it
            pynvml._nvmlGetFunctionPointer_cache.clear()
            return candidate
    raise NvmlUnavailable(
        f"cannot load the NVML library {LIBRARY_NAME} (the NVIDIA driver's); tried: {'; '.join(tried)} — "
        f"set {LIBRARY_ENV} to its path"
    )


def read_nvml(proc_root: Path = Path("/"), candidates: Sequence[str] | None = None) -> NvmlReport:
    """Read every GPU. `proc_root` is where process names are looked up (the host's /proc);
    `candidates` where the library is looked for (default: `library_candidates()`)."""
    load_library(candidates)
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise NvmlUnavailable(f"NVML could not start: {err}") from err

    # A driver without the versioned symbol an unversioned call maps to (`…RunningProcesses_v3`):
    # pynvml raises this, not an NVMLError.
    mismatch: type[Exception] = getattr(pynvml, "NVMLLibraryMismatchError", pynvml.NVMLError)

    def optional(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        try:
            return fn(*args, **kwargs)
        except (pynvml.NVMLError, mismatch):
            return None
        except AttributeError:  # an older nvidia-ml-py without this call
            return None

    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = optional(pynvml.nvmlSystemGetCudaDriverVersion)
        cuda_text = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None
        nvml_raw = optional(pynvml.nvmlSystemGetNVMLVersion)
        nvml_version = _text(nvml_raw) if nvml_raw is not None else None
        gpus: list[GpuInfo] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            mem_v2 = optional(pynvml.nvmlDeviceGetMemoryInfo, handle, version=pynvml.nvmlMemory_v2)
            processes: list[GpuProcess] = []
            for kind, getter in (
                ("compute", pynvml.nvmlDeviceGetComputeRunningProcesses),
                ("graphics", pynvml.nvmlDeviceGetGraphicsRunningProcesses),
            ):
                for p in optional(getter, handle) or []:
                    used = getattr(p, "usedGpuMemory", None)
                    processes.append(
                        GpuProcess(
                            pid=int(p.pid),
                            used_bytes=int(used) if isinstance(used, int) and used >= 0 else None,
                            kind=kind,
                            name=_proc_text(int(p.pid), "comm", proc_root),
                            cmdline=_proc_text(int(p.pid), "cmdline", proc_root)[:200],
                        )
                    )
            numa = optional(pynvml.nvmlDeviceGetNumaNodeId, handle)
            mode = optional(pynvml.nvmlDeviceGetAddressingMode, handle)
            c2c = optional(pynvml.nvmlDeviceGetC2cModeInfoV, handle)
            pci = optional(pynvml.nvmlDeviceGetPciInfo, handle)
            gpus.append(
                GpuInfo(
                    index=index,
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    uuid=_text(optional(pynvml.nvmlDeviceGetUUID, handle) or ""),
                    memory_total=int(mem.total),
                    memory_used=int(mem.used),
                    memory_free=int(mem.free),
                    memory_reserved=int(mem_v2.reserved) if mem_v2 is not None else None,
                    processes=processes,
                    numa_node=numa if isinstance(numa, int) and numa >= 0 else None,
                    addressing_mode=ADDRESSING_MODES.get(mode, str(mode)) if isinstance(mode, int) else None,
                    c2c_enabled=bool(c2c.isC2cEnabled) if c2c is not None else None,
                    pci_bus_id=_text(pci.busId) if pci is not None else None,
                )
            )
        return NvmlReport(driver, cuda_text, nvml_version, gpus)
    except pynvml.NVMLError as err:
        raise NvmlUnavailable(f"NVML query failed: {err}") from err
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
