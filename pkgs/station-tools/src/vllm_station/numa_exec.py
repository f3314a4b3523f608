"""`station numa-exec --membind 0 -- CMD ARGS…`: bind this process's memory to NUMA nodes, then exec CMD.

The policy is set with set_mempolicy(MPOL_BIND) on this process, read back from the kernel, and the process
then replaces itself with CMD (os.execvp): CMD inherits the policy, like `numactl --membind`.
Exit codes: CMD's own once it runs; 2 for a bad node list or no command; 1 when NUMA is unavailable;
127 when CMD is not found; 126 when it cannot be executed.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys

from vllm_station.errors import StationError, UsageError

log = logging.getLogger("vllm_station.numa_exec")


class CommandNotFound(StationError):
    exit_code = 127


class CommandNotExecutable(StationError):
    exit_code = 126


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

    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no command given: station numa-exec --membind 0 -- CMD ARGS…")
    wanted = numa.parse_nodes(nodes_spec)
    path = shutil.which(command[0]) if os.sep not in command[0] else command[0]
    if path is None or not os.path.exists(path):
        raise CommandNotFound(f"command not found: {command[0]!r} (PATH={os.environ.get('PATH', '')})")
    policy = numa.set_membind(wanted)
    log.debug("memory policy %s, exec %s", policy.describe(), command)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)
    except FileNotFoundError as exc:
        raise CommandNotFound(f"command not found: {command[0]!r} ({exc.strerror})") from exc
    except OSError as exc:
        raise CommandNotExecutable(f"cannot execute {command[0]!r}: {exc.strerror}") from exc


def run(args: argparse.Namespace) -> int:
    exec_bound(args.membind, list(args.cmd))
    return 1  # not reached: exec_bound replaces the process or raises
