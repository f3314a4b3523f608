"""Replace this process with a command (os.execvp), with the exit codes a shell would give.

Shared by the commands that prepare something and then become the program they wrap
(`station numa-exec`, `station exec`): 127 when the command is not found, 126 when it cannot run.
"""

from __future__ import annotations

import os
import shutil
import sys

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
