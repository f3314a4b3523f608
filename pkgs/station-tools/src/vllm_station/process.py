"""Processes: replace this one with a command (os.execvp), with the exit codes a shell would give; stop a
child that runs in a session of its own.

`exec_command` is shared by the commands that prepare something and then become the program they wrap
(`station numa-exec`, `station exec`): 127 when the command is not found, 126 when it cannot run.
`stop_session` stops a child started with `start_new_session=True` and whatever it started (a simulator,
nginx in the gateway's tests): its process group is terminated, then killed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from typing import Any

from vllm_station.errors import StationError, UsageError


class CommandNotFound(StationError):
    exit_code = 127


class CommandNotExecutable(StationError):
    exit_code = 126


def strip_separator(command: list[str], usage: str) -> list[str]:
    """argparse.REMAINDER keeps a leading `--`; no command at all is a usage error naming `usage`."""
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError(f"no command given: {usage}")
    return command


def find(command: list[str]) -> str:
    """The program's path, or CommandNotFound naming the PATH searched."""
    path = shutil.which(command[0]) if os.sep not in command[0] else command[0]
    if path is None or not os.path.exists(path):
        raise CommandNotFound(f"command not found: {command[0]!r} (PATH={os.environ.get('PATH', '')})")
    return path


def exec_command(command: list[str], env: dict[str, str] | None = None) -> None:
    """Flush, then exec `command` (with `env` if given). Returns only by raising."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if env is None:
            os.execvp(command[0], command)
        else:
            os.execvpe(command[0], command, env)
    except FileNotFoundError as exc:
        raise CommandNotFound(f"command not found: {command[0]!r} ({exc.strerror})") from exc
    except OSError as exc:
        raise CommandNotExecutable(f"cannot execute {command[0]!r}: {exc.strerror}") from exc


def stop_session(proc: subprocess.Popen[Any], grace_s: float = 10.0) -> None:
    """SIGTERM to the process group of `proc` (a session leader: `start_new_session=True`), SIGKILL if it
    is not gone after `grace_s`; reaped either way. A group already gone is no error."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace_s)
