"""This host's TCP connections as the kernel lists them (`/proc/self/net/tcp` and `tcp6`).

`connections_to(addr, port)` returns the state of every connection whose remote end is `addr:port`
(IPv4-mapped IPv6 addresses count as the IPv4 address). The pair's worker beacon reads it to tell a
worker engine that waits for its head from one that holds, or held, a session with a head
(`vllm_station.commands.pair.beacon`). `/proc/self/net`: under systemd's `ProcSubset=pid` the top-level
`/proc/net` link is hidden, the process's own directory is not; both show the network namespace of
the reading process.
"""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

from vllm_station import bounded
from vllm_station.errors import StationError

# include/net/tcp_states.h
STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
    "0C": "NEW_SYN_RECV",
}
TABLES = ("tcp", "tcp6")
MAX_TABLE_BYTES = 64 * 1024 * 1024  # a host with ~400,000 sockets; read no more than this

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(hex_addr: str) -> Address:
    """The kernel prints each 32-bit word of the address in host byte order."""
    raw = bytes.fromhex(hex_addr)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    addr: Address = ipaddress.ip_address(raw)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _endpoint(field: str) -> tuple[Address, int]:
    hex_addr, hex_port = field.split(":")
    return _address(hex_addr), int(hex_port, 16)


def parse_table(text: str) -> list[tuple[Address, int, Address, int, str]]:
    """(local address, local port, remote address, remote port, state) of each line of a tcp table."""
    rows: list[tuple[Address, int, Address, int, str]] = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4:
            continue
        try:
            local, local_port = _endpoint(fields[1])
            remote, remote_port = _endpoint(fields[2])
        except ValueError:
            continue
        rows.append((local, local_port, remote, remote_port, STATES.get(fields[3].upper(), fields[3])))
    return rows


def connections_to(addr: str, port: int, *, proc: Path = Path("/proc/self/net")) -> list[str]:
    """The states of this network namespace's TCP connections to `addr:port` (`addr` bare or in [])."""
    want = ipaddress.ip_address(addr.strip("[]"))
    if isinstance(want, ipaddress.IPv6Address) and want.ipv4_mapped is not None:
        want = want.ipv4_mapped
    states: list[str] = []
    read_any = False
    problems: list[str] = []
    for table in TABLES:
        path = proc / table
        try:
            # procfs reports a size of 0: read up to the bound, not by the size
            with bounded.open_regular(path) as fh:
                text = fh.read(MAX_TABLE_BYTES).decode("ascii", errors="replace")
        except FileNotFoundError:
            continue  # no IPv6 in this kernel
        except OSError as err:
            problems.append(f"{path}: {err.strerror or err}")
            continue
        read_any = True
        states += [st for _, _, remote, rport, st in parse_table(text) if remote == want and rport == port]
    if not read_any:
        raise StationError(
            "cannot read this host's TCP connections: " + ("; ".join(problems) or f"no {proc}/tcp")
        )
    return states
