"""`vllm_station.process.stop_session`: a child in a session of its own is stopped with everything it
started (the simulator's subprocess, nginx in the gateway's tests): real processes, real signals."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllm_station.process import run_bounded, stop_session

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


# ---- run_bounded: a command to its end or its deadline, a bounded tail of its output ---------------


def test_run_bounded_stops_the_group_at_the_deadline_and_keeps_what_it_wrote() -> None:
    """The leader and its grandchild print, then outlive the deadline: both are stopped, the output kept."""
    ran = run_bounded([sys.executable, "-c", LEADER], timeout_s=3.0, grace_s=0.5)
    assert ran.timed_out and ran.exit_code is None and ran.error is None
    assert ran.seconds >= 3.0
    grandchild = int(ran.stdout.split()[-1])
    deadline = time.monotonic() + 30
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(grandchild), "the grandchild survived the deadline"


def test_run_bounded_keeps_the_tail_and_the_exit_code() -> None:
    code = "import sys; sys.stdout.write('x' * 100000 + 'END'); sys.stderr.write('oops'); sys.exit(7)"
    ran = run_bounded([sys.executable, "-c", code], timeout_s=60.0, keep=1000)
    assert (ran.exit_code, ran.timed_out, ran.cut) == (7, False, True)
    assert len(ran.stdout) == 1000 and ran.stdout.endswith("xEND") and ran.stderr == "oops"
    quiet = run_bounded([sys.executable, "-c", "print('hi')"], timeout_s=60.0)
    assert (quiet.exit_code, quiet.stdout, quiet.cut) == (0, "hi\n", False)


def test_run_bounded_reports_a_command_that_cannot_start(tmp_path: Path) -> None:
    ran = run_bounded([str(tmp_path / "no-such-program")], timeout_s=5.0)
    assert ran.exit_code is None and not ran.timed_out
    assert ran.error == f"cannot run {str(tmp_path / 'no-such-program')!r}: not found"
