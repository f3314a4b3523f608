"""Mutants of `vllm_station.commands.watchdog` (scripts/bench-mutation): the wedge count — reset by any other
verdict in between (an interrupted wedge), a restart exactly at `--wedge-verdicts` and not one look before,
the count anew after a restart — on scripted looks (the looks' evidence is what test_watchdog.py takes from
real servers; here the decision alone, look by look), and the detection bound's formula exactly."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from vllm_station.api.args import endpoint_from_args
from vllm_station.commands.watchdog import Look, Options, Watchdog
from vllm_station.errors import UsageError


def look(kind: str, n: int, tokens: float) -> Look:
    """One look's evidence: `wedged` (the probe timed out), `busy` (so did it, but the counters moved:
    `tokens` is higher than before), `ok`, `refused` (nothing listens)."""
    signature = {"vllm:generation_tokens_total": tokens}
    if kind == "ok":
        return Look(float(n), True, 0.01, None, None, signature, {})
    failure = "refused" if kind == "refused" else "transport"
    return Look(float(n), False, 0.4, "timed out", failure, signature, {})


class Scripted(Watchdog):
    """The watchdog's own decisions on looks given in order (no server; the restart is recorded)."""

    def __init__(self, kinds: list[str], wedge_verdicts: int) -> None:
        endpoint = endpoint_from_args(argparse.Namespace(base_url="http://127.0.0.1:9", api_key_file=None,
                                                         ca_file=None))  # fmt: skip
        self.restarted: list[int] = []
        self.lines: list[str] = []
        super().__init__(Options(interval_s=10.0, probe_timeout_s=5.0, wedge_verdicts=wedge_verdicts),
                         endpoint, restart=self._restart_unit, say=self.lines.append)  # type: ignore[arg-type]
        self.kinds: Iterator[tuple[int, str]] = enumerate(["wedged", *kinds])  # the first look: no baseline
        self.n = 0
        self.tokens = 5.0

    def _restart_unit(self) -> str:
        self.restarted.append(self.n)
        return "restarted"

    def look(self) -> Look:
        self.n, kind = next(self.kinds)
        if kind == "busy":
            self.tokens += 1
        return look(kind, self.n, self.tokens)


def verdicts(kinds: list[str], wedge_verdicts: int) -> tuple[list[tuple[str, int]], list[int]]:
    dog = Scripted(kinds, wedge_verdicts)
    try:
        seen = [(v.verdict, v.streak) for v in (dog.step() for _ in range(len(kinds) + 1))]
    finally:
        dog.close()
    return seen[1:], dog.restarted


def test_an_ok_look_between_wedged_looks_starts_the_count_anew() -> None:
    seen, restarted = verdicts(["wedged", "wedged", "ok", "wedged", "wedged", "wedged"], 3)
    assert seen == [("wedged", 1), ("wedged", 2), ("ok", 0), ("wedged", 1), ("wedged", 2), ("wedged", 3)]
    assert restarted == [6]  # the third wedged look in a row, not the fourth wedged look in all


def test_a_busy_look_between_wedged_looks_starts_the_count_anew() -> None:
    seen, restarted = verdicts(["wedged", "wedged", "busy", "wedged", "wedged"], 3)
    assert seen == [("wedged", 1), ("wedged", 2), ("busy", 0), ("wedged", 1), ("wedged", 2)]
    assert restarted == []


def test_a_down_look_between_wedged_looks_starts_the_count_anew() -> None:
    seen, restarted = verdicts(["wedged", "refused", "wedged", "wedged"], 2)
    assert seen == [("wedged", 1), ("down", 0), ("no-baseline", 0), ("wedged", 1)]
    assert restarted == []


@pytest.mark.parametrize("n", [1, 2, 4])
def test_the_restart_comes_exactly_at_n_wedged_looks(n: int) -> None:
    seen, restarted = verdicts(["wedged"] * (n + 1), n)
    assert [s for _, s in seen][:n] == list(range(1, n + 1))
    assert restarted == [n]  # at the n-th, never before
    assert seen[n] == ("no-baseline", 0)  # after the restart: a new process, a new baseline


def test_the_restart_is_said_with_the_count_and_the_time() -> None:
    dog = Scripted(["wedged", "wedged"], 2)
    try:
        for _ in range(3):
            dog.step()
    finally:
        dog.close()
    said = [line for line in dog.lines if line.startswith("restarting")]
    assert len(said) == 1
    assert said[0].startswith(
        "restarting the server (restarted): 2 consecutive wedge verdicts over 20 s (each: the 1-token probe "
        "failed and /metrics showed no progress); last: 1-token probe failed after 0.4 s (timed out); no "
        "progress in /metrics since the last look"
    )
    assert [line.split(":")[0] for line in dog.lines if line.startswith("verdict wedged")] == [
        "verdict wedged (1/2)",
        "verdict wedged (2/2)",
    ]


@pytest.mark.parametrize(
    ("interval", "timeout", "n", "bound"),
    [(30.0, 20.0, 3, 110.0), (10.0, 10.0, 1, 20.0), (5.0, 0.5, 4, 20.5)],
)
def test_detection_bound_exactly(interval: float, timeout: float, n: int, bound: float) -> None:
    opts = Options(interval_s=interval, probe_timeout_s=timeout, wedge_verdicts=n)
    assert opts.detection_bound_s == bound


def test_probe_timeout_exactly_the_interval_is_allowed_one_more_is_not() -> None:
    Options(interval_s=10.0, probe_timeout_s=10.0)
    with pytest.raises(UsageError) as err:
        Options(interval_s=10.0, probe_timeout_s=10.5)
    assert str(err.value) == (
        "--probe-timeout (10.5 s) must not exceed --interval (10 s): one look must end before the next begins"
    )
    Options(wedge_verdicts=1)
    with pytest.raises(UsageError) as err:
        Options(wedge_verdicts=0)
    assert str(err.value) == "--wedge-verdicts must be 1 or more, got 0"
