"""bench's progress lines on stderr: the level of how many and the time left; none with --quiet."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from simserver import SimServer

from vllm_station.cli import main
from vllm_station.commands.bench.modes import Progress, eta_text
from vllm_station.sim.config import SimConfig


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(SimConfig(ttft=0.002, itl=0.001, output_len=8)) as s:
        yield s


def _bench(sim: SimServer, *extra: str) -> int:
    return main(["bench", "sweep", "--base-url", sim.base_url, "-c", "1,4", "--output-len", "8", *extra])


def test_each_phase_says_its_level_of_how_many_and_the_time_left(
    sim: SimServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _bench(sim) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if " requests, " in ln]
    assert [ln.split(" — ")[1].split(":")[0] for ln in lines] == [
        "c1 warm-up", "c1 repeat 1/1", "c4 warm-up", "c4 repeat 1/1",
    ]  # fmt: skip
    assert [ln.split(",")[0] for ln in lines] == ["level 1/2"] * 2 + ["level 2/2"] * 2
    assert all(re.search(r", ~\d+ (s|min) left — ", ln) for ln in lines), lines
    assert ", ~0 s left — c4 repeat 1/1: 16/16 requests, 0 failed" in lines[-1]  # all the work is done


def test_quiet_prints_no_progress(sim: SimServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert _bench(sim, "--quiet") == 0
    captured = capsys.readouterr()
    assert "level " not in captured.err and "requests, " not in captured.err
    assert "c4" in captured.out  # the table still comes


def test_the_estimate_counts_rounds_of_requests_per_concurrency() -> None:
    p = Progress(enabled=False)
    p.plan([2.0, 2.0])  # e.g. c1 with 2 requests, then c4 with 8
    assert p.seconds_left() is None  # nothing done: no estimate
    p.start_level(1, 4)  # the first level took 2 rounds
    p.done = 4  # one round of the second level: 3 of 4 rounds done
    p._level_t0 -= 1.5  # that round took 1.5 s: the one left will take as long
    left = p.seconds_left()
    assert left is not None and left == pytest.approx(1.5, abs=0.05)
    p.start_level(1, 4)
    p.done = 0  # a level without an answer yet: the last level's time per round
    assert p.seconds_left() == pytest.approx(1.5 * 2, abs=0.1)
    assert (eta_text(40.4), eta_text(119), eta_text(180)) == ("~40 s left", "~119 s left", "~3 min left")
