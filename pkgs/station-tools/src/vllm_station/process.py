"""Processes: replace this one with a command (os.execvp), with the exit codes a shell would give; stop a
child that runs in a session of its own.

`exec_command` is shared by the commands that prepare something and then become the program they wrap
(`station numa-exec`, `station exec`): 127 when the command is not found, 126 when it cannot run.
`stop_session` stops a child started with `start_new_session=True` and whatever it started (a simulator,
nginx in the gateway's tests): its process group is terminated, then killed.
`run_bounded` runs a command to its end or its deadline (then its whole process group is stopped) and keeps
a bounded tail of what it wrote (`station rollout`'s remote commands, switches and checks); `stop_running`
stops every such command still running (Ctrl-C in the caller).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, cast

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


@dataclass(frozen=True)
class Ran:
    """What `run_bounded` saw of one command."""

    argv: tuple[str, ...]
    exit_code: int | None  # None: killed at its deadline, or it never started (`error` says why)
    timed_out: bool
    seconds: float
    stdout: str  # the last `keep` bytes of each stream, decoded (invalid UTF-8 replaced)
    stderr: str
    cut: bool  # the output kept is the tail of a longer one
    error: str | None = None  # could not start: not found, not executable


_running: set[subprocess.Popen[bytes]] = set()
_running_lock = threading.Lock()


def _drain(pipe: io.BufferedReader, keep: int, into: list[bytes], cut: list[bool]) -> None:
    """Read `pipe` to its end, keeping its last `keep` bytes (memory stays bounded whatever it writes)."""
    tail = bytearray()
    with contextlib.suppress(OSError, ValueError):  # the pipe closed under us (a grandchild held it)
        for chunk in iter(lambda: pipe.read1(65536), b""):
            tail += chunk
            if len(tail) > keep:
                del tail[: len(tail) - keep]
                cut[0] = True
    into.append(bytes(tail))


def run_bounded(
    argv: list[str],
    *,
    timeout_s: float,
    keep: int = 65536,
    grace_s: float = 10.0,
    env: dict[str, str] | None = None,
) -> Ran:
    """Run `argv` (stdin /dev/null, in a session of its own) until it exits or `timeout_s` passes; at the
    deadline its process group is stopped (`stop_session`). A command that cannot start is a `Ran` with
    `error`, not an exception. Ctrl-C stops it too, then propagates."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, env=env,
        )  # fmt: skip
    except OSError as exc:
        why = "not found" if isinstance(exc, FileNotFoundError) else (exc.strerror or str(exc))
        return Ran(tuple(argv), None, False, 0.0, "", "", False, f"cannot run {argv[0]!r}: {why}")
    with _running_lock:
        _running.add(proc)
    outs: list[list[bytes]] = [[], []]
    cut = [False]
    assert proc.stdout is not None and proc.stderr is not None
    readers = [
        threading.Thread(target=_drain, args=(cast(io.BufferedReader, pipe), keep, into, cut), daemon=True)
        for pipe, into in ((proc.stdout, outs[0]), (proc.stderr, outs[1]))
    ]
    for r in readers:
        r.start()
    timed_out = False
    try:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            stop_session(proc, grace_s)
    except BaseException:  # Ctrl-C: the command goes with us
        stop_session(proc, grace_s)
        raise
    finally:
        with _running_lock:
            _running.discard(proc)
    for r in readers:  # a grandchild that left the group may hold a pipe open: do not wait for it forever
        r.join(timeout=grace_s)
    for pipe in (proc.stdout, proc.stderr):
        pipe.close()
    text = [(o[0] if o else b"").decode("utf-8", errors="replace") for o in outs]
    code = None if timed_out else proc.returncode
    return Ran(tuple(argv), code, timed_out, time.monotonic() - start, text[0], text[1], cut[0])


def stop_running(grace_s: float = 10.0) -> int:
    """Stop every command `run_bounded` is still running (other threads' included); how many there were."""
    with _running_lock:
        procs = list(_running)
    for proc in procs:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            stop_session(proc, grace_s)
    return len(procs)
