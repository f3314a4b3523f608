"""Mutants of `station bench`'s pure parts that survived the other tests (issue 17).

`--expect` thresholds exactly on a measured value (>= vs >, <= vs <), every metric's source, totals vs
per-level checks, and the exact result records. Values are binary fractions so "exactly on" is exact.
"""

from __future__ import annotations

import pytest

from vllm_station.bench import expect
from vllm_station.bench.expect import ExpectResult
from vllm_station.bench.metrics import LevelReport, summarise_level
from vllm_station.bench.parse import RequestResult
from vllm_station.errors import UsageError


def _ok(i: int, start: float, ttft: float, tokens: int, itl: float) -> RequestResult:
    e2e = ttft + itl * (tokens - 1)
    return RequestResult(
        index=i, ok=True, failure=None, detail="", t_start=start, t_end=start + e2e, queue=0.0,
        ttft=ttft, e2e=e2e, output_tokens=tokens, prompt_tokens=64, token_source="usage", itl=itl,
        gaps=[itl] * (tokens - 1),
    )  # fmt: skip


def _failed(i: int, kind: str) -> RequestResult:
    return RequestResult(
        index=i, ok=False, failure=kind, detail="boom", t_start=0.0, t_end=0.5, queue=0.0, ttft=None,
        e2e=None, output_tokens=0, prompt_tokens=None, token_source="usage", itl=None,
    )  # fmt: skip


@pytest.fixture
def c1() -> LevelReport:
    """One request: TTFT 0.5 s, 3 tokens 0.25 s apart → E2E 1.0 s, 3 tok/s, 1 req/s."""
    return summarise_level("c1", "sweep", 1, 64, 3, [[_ok(0, 0.0, 0.5, 3, 0.25)]])


@pytest.fixture
def c2() -> LevelReport:
    """Two repeats at concurrency 2: 4 and 1 tok/s (mean 2.5), 2 and 0.5 req/s; one timeout."""
    rep1 = [_ok(0, 0.0, 0.25, 2, 0.75), _ok(1, 0.0, 0.25, 2, 0.75)]  # both end at 1.0: 4 tok/s, 2 req/s
    rep2 = [_ok(2, 0.0, 0.5, 2, 1.5), _failed(3, "timeout")]  # ends at 2.0: 1 tok/s, 0.5 req/s
    return summarise_level("c2", "sweep", 2, 64, 2, [rep1, rep2])


def results(texts: list[str], levels: list[LevelReport]) -> list[ExpectResult]:
    return expect.evaluate(expect.parse(texts), levels)


@pytest.mark.parametrize(
    ("op", "passed"), [(">=", True), (">", False), ("<=", True), ("<", False), ("==", True), ("!=", False)]
)
def test_threshold_exactly_on_the_measured_value(c1: LevelReport, op: str, passed: bool) -> None:
    for metric, value in [("ttft", 0.5), ("e2e_p99", 1.0), ("tok_s", 3.0), ("itl_max", 0.25)]:
        (r,) = results([f"c1.{metric}{op}{value}"], [c1])
        assert r.value == value, metric
        assert r.passed is passed, f"c1.{metric} = {value} {op} {value}"


@pytest.mark.parametrize(("op", "passed"), [(">=", True), (">", False), ("<=", True), ("<", False)])
def test_totals_exactly_on_the_threshold(c1: LevelReport, c2: LevelReport, op: str, passed: bool) -> None:
    ok, failures = results([f"ok{op}4", f"failures{op}1"], [c1, c2])
    assert (ok.value, ok.passed) == (4.0, passed)
    assert (failures.value, failures.passed) == (1.0, passed)


def test_exact_result_records(c1: LevelReport, c2: LevelReport) -> None:
    assert results(["c1.ttft>=0.5"], [c1, c2]) == [
        ExpectResult("c1.ttft>=0.5", "c1", 0.5, True, "c1.ttft = 0.5 (>= 0.5)")
    ]
    assert results(["failures==0"], [c1, c2]) == [
        ExpectResult("failures==0", None, 1.0, False, "failures = 1 over the run")
    ]
    assert results(["ok>=4"], [c1, c2]) == [ExpectResult("ok>=4", None, 4.0, True, "ok = 4 over the run")]


def test_an_unlevelled_metric_holds_at_every_level(c1: LevelReport, c2: LevelReport) -> None:
    got = results(["ttft<=0.25"], [c1, c2])
    assert [(r.level, r.value, r.passed) for r in got] == [("c1", 0.5, False), ("c2", 0.25, True)]
    assert [r.expr for r in got] == ["ttft<=0.25", "ttft<=0.25"]
    assert got[1].detail == "c2.ttft = 0.25 (<= 0.25)"


def test_every_metric_reads_its_own_figure(c2: LevelReport) -> None:
    want = {
        "tok_s": 2.5, "tok_s_min": 1.0, "tok_s_max": 4.0, "req_s": 1.25, "ok": 3.0, "failures": 1.0,
        "ttft": 0.25, "ttft_mean": pytest.approx(1 / 3), "ttft_min": 0.25, "ttft_max": 0.5,
        "itl_p50": 0.75, "e2e_median": 1.0, "queue_max": 0.0, "user_tok_s_min": pytest.approx(2 / 3),
    }  # fmt: skip
    for metric, value in want.items():
        assert expect.value_of(c2, metric) == value, metric


def test_an_unmeasured_metric_fails_and_the_others_still_run(c1: LevelReport) -> None:
    empty = summarise_level("c4", "sweep", 4, 64, 3, [[_failed(0, "connect")]])
    got = results(["ttft<=1", "c1.tok_s>=1"], [empty, c1])
    assert got == [
        ExpectResult("ttft<=1", "c4", None, False, "c4: ttft not measured"),
        ExpectResult("ttft<=1", "c1", 0.5, True, "c1.ttft = 0.5 (<= 1)"),
        ExpectResult("c1.tok_s>=1", "c1", 3.0, True, "c1.tok_s = 3 (>= 1)"),
    ]


def test_expectation_text_and_number_errors() -> None:
    (e,) = expect.parse(["  c1.tok_s >= 100  "])
    assert (e.text, e.level, e.metric, e.op, e.threshold) == ("c1.tok_s >= 100", "c1", "tok_s", ">=", 100.0)
    with pytest.raises(UsageError) as err:
        expect.parse(["c1.tok_s>=1.2.3"])
    assert str(err.value) == "--expect 'c1.tok_s>=1.2.3': '1.2.3' is not a number"
    assert expect.parse(["p2k.ttft<1", ",", "c8.e2e<=2"])[0].level == "p2048"
    assert len(expect.parse(["p2k.ttft<1", ",", "c8.e2e<=2"])) == 2
