"""Pure readers of sysfs and procfs under a root directory (`/` on a host, a prepared tree in tests).

Sizes are returned in bytes. Errors are `HostReadError` (a `StationError`) naming the file and what was
wrong with it; a NUMA node that does not exist is `NodeNotFound`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from vllm_station import bounded
from vllm_station.errors import StationError

# Said by prestart and preflight when the GPU's memory is no NUMA node (CDMM driver mode, or a
# discrete GPU): instead of passing quietly, both outputs name why the page-cache gate has nothing to do.
CDMM_MESSAGE = "CDMM: GPU memory is not a NUMA node; the page-cache trap cannot occur"

NODE_DIR = "sys/devices/system/node"
_MEMINFO_LINE = re.compile(r"^(?:Node\s+\d+\s+)?([A-Za-z0-9_()]+):\s+(\d+)(?:\s+(kB))?\s*$")


class HostReadError(StationError):
    """A sysfs/proc file is missing, unreadable or not in the expected format."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class NodeNotFound(HostReadError):
    """The NUMA node does not exist on this machine."""


def read_text(path: Path) -> str:
    try:
        return bounded.read_text(path, limit=bounded.SYSFS_LIMIT, encoding="ascii", errors="replace")
    except FileNotFoundError as err:
        raise HostReadError(path, "missing") from err
    except IsADirectoryError as err:
        raise HostReadError(path, "unreadable: is a directory") from err
    except OSError as err:
        raise HostReadError(path, f"unreadable: {err.strerror or err}") from err


def parse_meminfo(text: str, path: Path) -> dict[str, int]:
    """`/proc/meminfo` or `nodeN/meminfo` text → {key: bytes} (unit-less counters stay counts)."""
    values: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _MEMINFO_LINE.match(line.strip())
        if m is None:
            raise HostReadError(path, f"garbled line {lineno}: {line.strip()[:80]!r}")
        key, number, unit = m.groups()
        values[key] = int(number) * (1024 if unit else 1)
    if not values:
        raise HostReadError(path, "empty")
    return values


def proc_meminfo(root: Path) -> dict[str, int]:
    path = root / "proc/meminfo"
    return parse_meminfo(read_text(path), path)


def node_dir(root: Path, node: int) -> Path:
    return root / NODE_DIR / f"node{node}"


def node_meminfo(root: Path, node: int) -> dict[str, int]:
    """`/sys/devices/system/node/node<N>/meminfo` in bytes; `NodeNotFound` when the node is absent."""
    directory = node_dir(root, node)
    if not directory.is_dir():
        raise NodeNotFound(directory, f"NUMA node {node} does not exist on this machine")
    path = directory / "meminfo"
    return parse_meminfo(read_text(path), path)


def parse_cpulist(text: str, path: Path) -> list[int]:
    """Kernel cpulist format ("0-3,8,10-11", "" for none) → sorted CPU numbers."""
    cpus: set[int] = set()
    text = text.strip()
    if not text:
        return []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = part.split("-", 1)
                first, last = int(lo), int(hi)
                if last < first:
                    raise ValueError(part)
                cpus.update(range(first, last + 1))
            else:
                cpus.add(int(part))
        except ValueError as err:
            raise HostReadError(path, f"garbled cpulist {text[:80]!r}") from err
    return sorted(cpus)


def nodes(root: Path) -> list[int]:
    """NUMA nodes present: the `nodeN` directories (a machine without NUMA sysfs has none)."""
    base = root / NODE_DIR
    if not base.is_dir():
        return []
    found = []
    for entry in base.iterdir():
        m = re.fullmatch(r"node(\d+)", entry.name)
        if m and entry.is_dir():
            found.append(int(m.group(1)))
    return sorted(found)


def node_cpus(root: Path, node: int) -> list[int]:
    path = node_dir(root, node) / "cpulist"
    return parse_cpulist(read_text(path), path)


@dataclass
class NodeInfo:
    node: int
    cpus: list[int]
    mem_total: int
    mem_free: int
    file_pages: int
    active_file: int
    inactive_file: int
    meminfo: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def has_cpus(self) -> bool:
        return bool(self.cpus)

    @property
    def has_memory(self) -> bool:
        return self.mem_total > 0


def node_info(root: Path, node: int) -> NodeInfo:
    info = node_meminfo(root, node)
    path = node_dir(root, node) / "meminfo"
    for key in ("MemTotal", "MemFree", "FilePages"):
        if key not in info:
            raise HostReadError(path, f"no {key} line")
    return NodeInfo(
        node=node,
        cpus=node_cpus(root, node),
        mem_total=info["MemTotal"],
        mem_free=info["MemFree"],
        file_pages=info["FilePages"],
        active_file=info.get("Active(file)", 0),
        inactive_file=info.get("Inactive(file)", 0),
        meminfo=info,
    )


def numa_layout(root: Path) -> list[NodeInfo]:
    return [node_info(root, n) for n in nodes(root)]


def memory_only_nodes(layout: list[NodeInfo]) -> list[int]:
    """Nodes with memory and no CPUs — on a GB300 that is the GPU's HBM exposed as a NUMA node."""
    return [n.node for n in layout if n.has_memory and not n.has_cpus]


# --- /proc/net/tcp -------------------------------------------------------------------------------

TCP_LISTEN = "0A"


@dataclass(frozen=True)
class Listener:
    address: str
    port: int
    inode: int
    family: str


def _decode_address(hex_addr: str, family: str) -> str:
    raw = bytes.fromhex(hex_addr)
    if family == "tcp":
        return ".".join(str(b) for b in raw[::-1])
    # IPv6: four little-endian 32-bit words
    words = [raw[i : i + 4][::-1] for i in range(0, 16, 4)]
    flat = b"".join(words)
    groups = [f"{int.from_bytes(flat[i : i + 2], 'big'):x}" for i in range(0, 16, 2)]
    return ":".join(groups)


def tcp_listeners(root: Path, port: int | None = None) -> list[Listener]:
    """Sockets in LISTEN state from `/proc/net/tcp` and `/proc/net/tcp6` (one missing: no such family,
    e.g. IPv6 off). Both missing is a HostReadError: "no listener" must not be concluded from no file."""
    if not any((root / "proc/net" / family).exists() for family in ("tcp", "tcp6")):
        raise HostReadError(
            root / "proc/net/tcp", "missing (and tcp6 too): cannot tell which ports are in use"
        )
    found: list[Listener] = []
    for family in ("tcp", "tcp6"):
        path = root / "proc/net" / family
        if not path.exists():
            continue
        lines = read_text(path).splitlines()
        for lineno, line in enumerate(lines[1:], 2):
            parts = line.split()
            if not parts:
                continue
            try:
                local, state, inode = parts[1], parts[3], int(parts[9])
                hex_addr, hex_port = local.split(":")
                local_port = int(hex_port, 16)
                address = _decode_address(hex_addr, family)
            except (IndexError, ValueError) as err:
                raise HostReadError(path, f"garbled line {lineno}: {line.strip()[:80]!r}") from err
            if state != TCP_LISTEN or (port is not None and local_port != port):
                continue
            found.append(Listener(address, local_port, inode, family))
    return found


@dataclass(frozen=True)
class SocketOwner:
    pid: int
    comm: str
    cgroup: str


def socket_owners(root: Path, inodes: set[int]) -> list[SocketOwner]:
    """Processes holding any of the socket inodes (scans `/proc/<pid>/fd`; unreadable pids skipped)."""
    owners: list[SocketOwner] = []
    targets = {f"socket:[{i}]" for i in inodes}
    proc = root / "proc"
    if not targets or not proc.is_dir():
        return owners
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                link = str(fd.readlink())
            except OSError:
                continue
            if link in targets:
                owners.append(
                    SocketOwner(
                        int(entry.name),
                        _read_optional(entry / "comm").strip(),
                        _read_optional(entry / "cgroup").strip(),
                    )
                )
                break
    return owners


def _read_optional(path: Path) -> str:
    try:
        return bounded.read_text(path, limit=bounded.SYSFS_LIMIT, errors="replace")
    except OSError:
        return ""
