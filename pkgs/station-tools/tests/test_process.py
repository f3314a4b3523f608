"""`vllm_station.process.stop_session`: a child in a session of its own is stopped with everything it
started (the simulator's subprocess, nginx in the gateway's tests): real processes, real signals."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllm_station.process import stop_session

# A session leader that starts a grandchild, prints the grandchild's pid, then waits; with "ignore" both
# ignore SIGTERM (a server stuck in its shutdown).
LEADER = """
import signal, subprocess, sys, time
IGNORE = "if sys.argv[1:] == ['ignore']: signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
exec(IGNORE)
CHILD = "import signal, sys, time\\n" + IGNORE + "print('up', flush=True)\\ntime.sleep(600)"
child = subprocess.Popen([sys.executable, "-c", CHILD, *sys.argv[1:]], stdout=subprocess.PIPE)
child.stdout.readline()
print(child.pid, flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    """No such process, or a zombie its new parent has not reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


@pytest.mark.parametrize("mode", ["ignore", "default"])
def test_stop_session_ends_the_group_and_reaps_the_leader(mode: str) -> None:
    """SIGTERM to the group; a leader still there after the grace period is killed with its group."""
    argv = [sys.executable, "-c", LEADER, mode]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    grandchild = int(proc.stdout.readline())
    assert not _gone(grandchild) and proc.poll() is None
    stop_session(proc, grace_s=0.5)
    assert proc.returncode == -(15 if mode == "default" else 9)  # reaped, by the signal the mode leaves
    deadline = time.monotonic() + 30  # the grandchild's new parent reaps it; a loaded machine may be slow
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(grandchild), f"{mode}: the grandchild survived: the group was not signalled"
    stop_session(proc, grace_s=0.5)  # a group already gone: no error
    proc.stdout.close()
