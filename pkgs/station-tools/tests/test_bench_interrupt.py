"""Ctrl-C in the middle of `station bench`: it stops promptly (exit 130) and writes what finished.

A real `station bench` process (SIGINT reset to default in the child, as a terminal's Ctrl-C finds it)
against the simulator: one level finishes, one repeat of the next finishes, then the simulator's engine
wedges (no token ever) and the next repeat hangs. SIGINT to the process group must end it within 5 s,
and `--json`, `--csv` and `--save-responses` must hold the finished level and repeats, the JSON
marked partial. (`--plots` goes through the same writer; drawing them takes seconds on a loaded
2-core machine, so this timing test leaves them out: 0.2 s from SIGINT to exit without, 3-4 s with.)
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from simserver import SimServer

from vllm_station.errors import EXIT_INTERRUPTED
from vllm_station.sim.config import SimConfig

STOP_WITHIN_S = 5.0


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(SimConfig(ttft=0.01, itl=0.01)) as s:
        yield s


def _wait_for_line(proc: subprocess.Popen[bytes], needle: bytes, timeout: float) -> bytes:
    """stderr up to the line containing `needle` (the bench prints one line per finished phase)."""
    assert proc.stderr is not None
    seen = b""
    deadline = time.monotonic() + timeout
    fd = proc.stderr.fileno()
    while needle not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            pytest.fail(f"no {needle!r} on stderr (exit {proc.poll()}): {seen.decode(errors='replace')}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            seen += os.read(fd, 65536)
    return seen


def test_ctrl_c_mid_run_writes_the_finished_levels_and_repeats(sim: SimServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = [
        sys.executable, "-m", "vllm_station", "bench", "burst", "--base-url", sim.base_url, "-c", "1,2",
        "--warmup", "0", "--repeats", "3", "--output-len", "30", "--output", f"{out}.json",
        "--csv", f"{out}.csv", "--save-responses", f"{out}-responses",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("STATION_API_KEY", "OPENAI_API_KEY")}
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
        preexec_fn=_default_sigint,
    )
    try:
        _wait_for_line(proc, b"c2 repeat 1/3: 2/2 requests", timeout=60)
        assert sim.sim is not None
        sim.sim.set_engine("wedge")  # from now on no request gets a token: the run cannot finish
        time.sleep(0.6)  # a repeat that had already started (0.3 s of tokens) completes meanwhile
        assert proc.poll() is None
        os.killpg(proc.pid, signal.SIGINT)
        t0 = time.monotonic()
        try:
            stdout, stderr_rest = proc.communicate(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {STOP_WITHIN_S} s after SIGINT")
        took = time.monotonic() - t0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    stderr = stderr_rest.decode(errors="replace")
    assert proc.returncode == EXIT_INTERRUPTED, stderr
    assert took < STOP_WITHIN_S
    assert "Traceback" not in stderr, stderr
    assert "interrupted during c2 repeat" in stderr

    report = json.loads(Path(f"{out}.json").read_text())
    assert report["partial"] is True and report["passed"] is False
    during = report["interrupted_during"]  # "c2 repeat 2/3" or "c2 repeat 3/3"
    assert during in ("c2 repeat 2/3", "c2 repeat 3/3"), during
    c1, c2 = report["levels"]
    assert (c1["name"], len(c1["repeats"]), c1["ok"]) == ("c1", 3, 3)
    kept = int(during.split()[2].split("/")[0]) - 1  # the repeats of c2 that finished
    assert (c2["name"], len(c2["repeats"]), c2["ok"]) == ("c2", kept, 2 * kept)
    assert any("interrupted (Ctrl-C)" in n for n in report["notes"])
    assert b"c1" in stdout and b"interrupted" in stdout  # the table with its note

    assert len(Path(f"{out}.csv").read_text().splitlines()) == 3  # header, c1, c2
    saved = sorted(p.name for p in Path(f"{out}-responses").iterdir())
    assert saved == [f"c1-repeat{r}.jsonl" for r in (1, 2, 3)] + [
        f"c2-repeat{r}.jsonl" for r in range(1, kept + 1)
    ]
