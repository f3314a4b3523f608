"""`station numa-exec --membind 0 -- CMD ARGS…`: bind this process's memory to NUMA nodes, then exec CMD.

The policy is set with set_mempolicy(MPOL_BIND) on this process, read back from the kernel, and the process
then replaces itself with CMD (os.execvp): CMD inherits the policy, like `numactl --membind`.
Exit codes: CMD's own once it runs; 2 for a bad node list or no command; 1 when NUMA is unavailable;
127 when CMD is not found; 126 when it cannot be executed.
"""

from __future__ import annotations

import argparse
import logging

from vllm_station import process

log = logging.getLogger("vllm_station.commands.numa_exec")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--membind",
        metavar="NODES",
        default="0",
        help="NUMA nodes for all memory of CMD, like numactl: 0, 0,1, 0-3 (default: 0)",
    )
    # dest must not be "command": cli.py uses that name for the subcommand
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to run")


def exec_bound(nodes_spec: str, command: list[str]) -> None:
    """Bind, check the command exists, exec. Returns only by raising."""
    from vllm_station.host import numa

    command = process.strip_separator(command, "station numa-exec --membind 0 -- CMD ARGS…")
    wanted = numa.parse_nodes(nodes_spec)
    process.find(command)
    policy = numa.set_membind(wanted)
    log.debug("memory policy %s, exec %s", policy.describe(), command)
    process.exec_command(command)


def run(args: argparse.Namespace) -> int:
    exec_bound(args.membind, list(args.cmd))
    return 1  # not reached: exec_bound replaces the process or raises
