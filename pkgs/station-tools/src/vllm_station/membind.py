"""Bind this process's memory to NUMA nodes before any bulk I/O (`station download`, `station copy`).

The policy (set_mempolicy(MPOL_BIND) through libnuma, read back from the kernel) covers every page this
process and the children it starts afterwards (rsync) allocate, the page cache they fill included: on a
GB300 that is LPDDR (node 0), never the GPU's HBM node. Call it first, before any thread is started.
"""

from __future__ import annotations

from vllm_station.errors import StationError


def bind_memory(spec: str, purpose: str) -> str:
    """Bind to the nodes of `spec` ("0", "0,1", "0-3"); the kernel's read-back, e.g. "bind:0".

    A machine without libnuma/NUMA support raises a StationError that names `--no-membind` (to `purpose`
    without a binding); a node that does not exist is a UsageError.
    """
    from vllm_station.host import numa

    try:
        policy = numa.set_membind(numa.parse_nodes(spec))
    except numa.NumaUnavailable as exc:
        raise StationError(f"{exc} — to {purpose} without a NUMA binding pass --no-membind") from exc
    except OSError as exc:
        raise StationError(f"cannot bind memory to NUMA nodes {spec}: {exc}") from exc
    return policy.describe()
