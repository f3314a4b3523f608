"""cffi binding to libnuma: node count, per-node memory, bind the current process's memory, read it back.

Why ABI mode (``ffi.dlopen``) and not API mode
----------------------------------------------
API mode compiles a C extension when the package is built: every install (pip in CI, the dev venv, the Nix
build) would then need a C compiler *and* libnuma's headers, and the otherwise pure-Python wheel would become
platform-specific. We call eight functions whose ABI has been stable since libnuma 2.0 (``libnuma.so.1``,
versioned symbols), so ABI mode costs us nothing real. The library is opened lazily, inside a cached function,
never at import: ``import vllm_station.host.numa`` works on a machine without libnuma, and only a command
that needs NUMA fails, with one clear error listing every name and path it tried.

Where the library comes from: ``$STATION_LIBNUMA`` when set (the Nix package pins it to its own libnuma, so
the host's loader path does not matter), otherwise ``ctypes.util.find_library("numa")``, ``libnuma.so.1``,
``libnuma.so``.

Errors: ``numa_available()`` is called first (-1: the kernel has no NUMA support, or get_mempolicy is
blocked); every -1 return of a system-call wrapper raises ``OSError(errno, strerror, context)`` with
``ffi.errno`` read right after the call. The policy is set with libnuma's ``set_mempolicy`` wrapper rather
than ``numa_set_membind``, because the latter returns ``void`` and only prints its error.

Read-back: :func:`get_mempolicy` asks the kernel for the calling thread's policy; :func:`policy_of_pid` reads
another process's policy from ``/proc/<pid>/numa_maps`` (the kernel prints the task policy for every mapping
without a policy of its own); :func:`mems_allowed` reads ``Mems_allowed_list`` from ``/proc/<pid>/status``
(the cpuset limit, which a bind must stay within — it does not change when a policy is set).
"""

from __future__ import annotations

import ctypes.util
import functools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_station import bounded
from vllm_station.errors import StationError, UsageError

ENV_LIBNUMA = "STATION_LIBNUMA"

# <numaif.h>
MPOL_DEFAULT = 0
MPOL_PREFERRED = 1
MPOL_BIND = 2
MPOL_INTERLEAVE = 3
MPOL_LOCAL = 4
MPOL_PREFERRED_MANY = 5
MPOL_WEIGHTED_INTERLEAVE = 6
_MPOL_MODE_FLAGS = (1 << 15) | (1 << 14) | (1 << 13)  # STATIC_NODES, RELATIVE_NODES, NUMA_BALANCING
MODE_NAMES = {
    MPOL_DEFAULT: "default",
    MPOL_PREFERRED: "preferred",
    MPOL_BIND: "bind",
    MPOL_INTERLEAVE: "interleave",
    MPOL_LOCAL: "local",
    MPOL_PREFERRED_MANY: "preferred-many",
    MPOL_WEIGHTED_INTERLEAVE: "weighted-interleave",
}

_CDEF = """
struct bitmask { unsigned long size; unsigned long *maskp; };
int numa_available(void);
int numa_max_node(void);
int numa_num_configured_nodes(void);
int numa_num_possible_nodes(void);
long long numa_node_size64(int node, long long *freep);
struct bitmask *numa_allocate_nodemask(void);
void numa_bitmask_free(struct bitmask *bmp);
struct bitmask *numa_bitmask_setbit(struct bitmask *bmp, unsigned int n);
int numa_bitmask_isbitset(const struct bitmask *bmp, unsigned int n);
struct bitmask *numa_get_mems_allowed(void);
long get_mempolicy(int *mode, unsigned long *nmask, unsigned long maxnode, void *addr, unsigned flags);
long set_mempolicy(int mode, const unsigned long *nmask, unsigned long maxnode);
"""
# libnuma's entry point: a library without it (libz, say) is not libnuma
_SYMBOLS = ("numa_available",)


class NumaUnavailable(StationError):
    """libnuma cannot be loaded, or the kernel has no NUMA support."""


@dataclass(frozen=True)
class NodeMemory:
    node: int
    total_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class MemPolicy:
    """A memory policy as the kernel reports it."""

    mode: int
    mode_name: str
    nodes: list[int]

    def describe(self) -> str:
        if not self.nodes:
            return self.mode_name
        return f"{self.mode_name}:{format_nodes(self.nodes)}"


@dataclass(frozen=True)
class _Lib:
    ffi: Any
    lib: Any
    path: str


def _candidates() -> tuple[list[str], str]:
    pinned = os.environ.get(ENV_LIBNUMA)
    if pinned:
        return [pinned], f"${ENV_LIBNUMA}={pinned}"
    names: list[str] = []
    found = ctypes.util.find_library("numa")
    if found:
        names.append(found)
    for name in ("libnuma.so.1", "libnuma.so"):
        if name not in names:
            names.append(name)
    return names, "the dynamic loader's search path"


def _has_symbol(lib: Any, name: str) -> bool:
    try:
        getattr(lib, name)
    except AttributeError:
        return False
    return True


@functools.cache
def _load() -> _Lib:
    """Open libnuma once; raise NumaUnavailable naming everything tried. Never called at import."""
    try:
        import cffi  # untyped: listed in the mypy overrides (pyproject.toml)
    except ImportError as exc:  # pragma: no cover - cffi is a hard dependency
        raise NumaUnavailable(
            f"the cffi module is missing ({exc}); install the package's dependencies"
        ) from exc
    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    names, origin = _candidates()
    tried: list[str] = []
    for name in names:
        try:
            lib = ffi.dlopen(name)
        except OSError as exc:
            tried.append(f"{name} ({exc})")
            continue
        # cffi resolves symbols lazily: a library that is not libnuma fails here, not at the first call
        missing = [sym for sym in _SYMBOLS if not _has_symbol(lib, sym)]
        if missing:
            tried.append(f"{name} (not libnuma: it has no {', '.join(missing[:3])})")
            continue
        return _Lib(ffi=ffi, lib=lib, path=name)
    raise NumaUnavailable(
        f"libnuma could not be loaded from {origin}; tried: " + "; ".join(tried) + ". Install libnuma "
        f"(Debian/Ubuntu: apt-get install libnuma1) or set {ENV_LIBNUMA}=/path/to/libnuma.so.1"
    )


@functools.cache
def _numa() -> _Lib:
    """libnuma, after `numa_available()` said the kernel supports NUMA."""
    handle = _load()
    if handle.lib.numa_available() < 0:
        raise NumaUnavailable(
            f"this kernel reports no NUMA support (numa_available() = -1 via {handle.path}): "
            "memory binding is impossible here; run without binding (e.g. `station download --no-membind`)"
        )
    return handle


def library_path() -> str:
    """The name or path libnuma was opened from."""
    return _load().path


def available() -> bool:
    """True when libnuma loads and the kernel supports NUMA; never raises."""
    try:
        _numa()
    except NumaUnavailable:
        return False
    return True


def _raise_errno(ffi: Any, context: str) -> None:
    err = ffi.errno
    raise OSError(err, os.strerror(err), context)


def node_count() -> int:
    """Number of memory nodes configured on this machine (numa_num_configured_nodes)."""
    return int(_numa().lib.numa_num_configured_nodes())


def max_node() -> int:
    return int(_numa().lib.numa_max_node())


def nodes() -> list[int]:
    """The nodes this process may use (numa_get_mems_allowed: online nodes within its cpuset)."""
    h = _numa()
    mask = h.lib.numa_get_mems_allowed()
    if mask == h.ffi.NULL:
        _raise_errno(h.ffi, "numa_get_mems_allowed()")
    try:
        limit = int(h.lib.numa_max_node())
        return [n for n in range(limit + 1) if h.lib.numa_bitmask_isbitset(mask, n)]
    finally:
        h.lib.numa_bitmask_free(mask)


def node_memory(node: int) -> NodeMemory:
    """Total and free memory of one node (numa_node_size64)."""
    h = _numa()
    if node < 0 or node > int(h.lib.numa_max_node()):
        raise UsageError(f"NUMA node {node} does not exist on this machine (nodes: {format_nodes(nodes())})")
    free = h.ffi.new("long long *")
    total = int(h.lib.numa_node_size64(node, free))
    if total < 0:
        _raise_errno(h.ffi, f"numa_node_size64({node})")
    return NodeMemory(node=node, total_bytes=total, free_bytes=int(free[0]))


# The kernel's largest CONFIG_NODES_SHIFT is 10: node numbers stay below 1024.
MAX_NODE = 1023


def parse_nodes(spec: str) -> list[int]:
    """Parse a node list like numactl: "0", "0,2", "0-3", "0-1,4". Raises UsageError."""
    result: set[int] = set()
    text = spec.strip()
    if not text:
        raise UsageError("empty NUMA node list: give nodes like 0, 0,1 or 0-3")
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if m is None:
            raise UsageError(f"cannot parse NUMA node list {spec!r}: give nodes like 0, 0,1 or 0-3")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise UsageError(f"cannot parse NUMA node list {spec!r}: range {lo}-{hi} runs backwards")
        if hi > MAX_NODE:
            raise UsageError(
                f"NUMA node list {spec!r}: node {hi} is above {MAX_NODE} (the kernel supports at most "
                f"{MAX_NODE + 1} nodes)"
            )
        result.update(range(lo, hi + 1))
    return sorted(result)


def format_nodes(node_list: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (the kernel's list format)."""
    items = sorted(set(node_list))
    parts: list[str] = []
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        parts.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(parts)


def _mask_for(h: _Lib, node_list: Iterable[int]) -> Any:
    mask = h.ffi.gc(h.lib.numa_allocate_nodemask(), h.lib.numa_bitmask_free)
    if mask == h.ffi.NULL:
        _raise_errno(h.ffi, "numa_allocate_nodemask()")
    for n in node_list:
        if n >= int(mask.size):
            raise OSError(
                22, os.strerror(22), f"NUMA node {n} is beyond this kernel's {int(mask.size)} possible"
            )
        h.lib.numa_bitmask_setbit(mask, n)
    return mask


def set_mempolicy_raw(mode: int, node_list: Iterable[int]) -> None:
    """set_mempolicy(2) for the calling thread, no checks beyond the kernel's: OSError on failure."""
    h = _numa()
    wanted = list(node_list)
    mask = _mask_for(h, wanted)
    # the kernel drops the last bit of maxnode (libnuma passes size + 1 as well)
    rc = h.lib.set_mempolicy(mode, mask.maskp, mask.size + 1)
    if rc < 0:
        _raise_errno(
            h.ffi, f"set_mempolicy({MODE_NAMES.get(mode, mode)}, nodes {format_nodes(wanted) or '-'})"
        )


def set_membind(node_list: Iterable[int]) -> MemPolicy:
    """Bind the memory of the current process (MPOL_BIND) to these nodes and return the kernel's read-back.

    Every node must exist and be allowed to this process: the kernel would silently drop an unknown node
    from a set that still contains a valid one, so the set is checked here first (UsageError naming it).
    Call it before starting threads: the policy is per thread and inherited by threads and children created
    afterwards.
    """
    wanted = sorted(set(node_list))
    if not wanted:
        raise UsageError("no NUMA node given to bind to")
    have = nodes()
    missing = [n for n in wanted if n not in have]
    if missing:
        highest = max_node()
        absent = [n for n in missing if n > highest]
        if absent:
            raise UsageError(
                f"NUMA node {format_nodes(absent)} does not exist on this machine "
                f"(nodes with memory here: {format_nodes(have) or 'none'}); pick from those"
            )
        raise UsageError(
            f"NUMA node {format_nodes(missing)} is not allowed to this process (cpuset Mems_allowed: "
            f"{format_nodes(have) or 'none'}); pick from those or widen the cpuset"
        )
    set_mempolicy_raw(MPOL_BIND, wanted)
    policy = get_mempolicy()
    if policy.mode != MPOL_BIND or policy.nodes != wanted:
        raise StationError(
            f"set_mempolicy(bind, {format_nodes(wanted)}) succeeded but the kernel reports "
            f"{policy.describe()}"
        )
    return policy


def get_mempolicy() -> MemPolicy:
    """The calling thread's memory policy, from get_mempolicy(2)."""
    h = _numa()
    mode = h.ffi.new("int *")
    mask = _mask_for(h, [])
    rc = h.lib.get_mempolicy(mode, mask.maskp, mask.size + 1, h.ffi.NULL, 0)
    if rc < 0:
        _raise_errno(h.ffi, "get_mempolicy()")
    bits = int(mask.size)
    node_list = [n for n in range(bits) if h.lib.numa_bitmask_isbitset(mask, n)]
    m = int(mode[0]) & ~_MPOL_MODE_FLAGS
    return MemPolicy(mode=m, mode_name=MODE_NAMES.get(m, f"mode{m}"), nodes=node_list)


def mems_allowed(pid: int | str = "self", proc: Path = Path("/proc")) -> list[int]:
    """Mems_allowed_list from /proc/<pid>/status (the cpuset's memory nodes for that process)."""
    path = proc / str(pid) / "status"
    try:
        text = bounded.read_text(path, limit=bounded.SYSFS_LIMIT, errors="replace")
    except OSError as exc:
        raise StationError(f"cannot read {path}: {exc.strerror}") from exc
    for line in text.splitlines():
        if line.startswith("Mems_allowed_list:"):
            value = line.split(":", 1)[1].strip()
            return parse_nodes(value) if value else []
    raise StationError(f"{path} has no Mems_allowed_list line (kernel without cpusets?)")


_NUMA_MAPS_POLICY = re.compile(r"^[0-9a-f]+ (\S+)")


def policy_of_pid(pid: int | str = "self", proc: Path = Path("/proc")) -> str:
    """The task policy of any process as the kernel prints it in /proc/<pid>/numa_maps ("bind:0", "default").

    Mappings with a policy of their own (mbind) print that one; the most common string across mappings is
    the task policy.
    """
    path = proc / str(pid) / "numa_maps"
    try:
        text = bounded.read_text(path, limit=bounded.SYSFS_LIMIT * 16, errors="replace")
    except OSError as exc:
        raise StationError(f"cannot read {path}: {exc.strerror}") from exc
    counts: dict[str, int] = {}
    for line in text.splitlines():
        m = _NUMA_MAPS_POLICY.match(line)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    if not counts:
        raise StationError(f"{path} lists no mappings")
    return max(counts.items(), key=lambda kv: kv[1])[0]
