"""Mutants of `station bench`'s pure parts that survived the other tests (issue 17).

`--expect` thresholds exactly on a measured value (>= vs >, <= vs <), every metric's source, totals vs
per-level checks, and the exact result records. Values are binary fractions so "exactly on" is exact.
"""

from __future__ import annotations

import json
from dataclasses import astuple

import pytest

from vllm_station.commands.bench import expect
from vllm_station.commands.bench.expect import ExpectResult
from vllm_station.commands.bench.metrics import (
    Dist,
    LevelReport,
    Span,
    percentile,
    summarise_level,
    summarise_repeat,
)
from vllm_station.commands.bench.parse import RequestResult, parse
from vllm_station.commands.bench.wire import RawResult
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
        ExpectResult("c1.ttft>=0.5", "c1", 0.5, True, "c1.ttft = 0.5 s, needs >= 0.5")
    ]
    assert results(["failures==0"], [c1, c2]) == [
        ExpectResult("failures==0", None, 1.0, False, "failures = 1 over the run, needs == 0")
    ]
    assert results(["ok>=4"], [c1, c2]) == [
        ExpectResult("ok>=4", None, 4.0, True, "ok = 4 over the run, needs >= 4")
    ]


def test_an_unlevelled_metric_holds_at_every_level(c1: LevelReport, c2: LevelReport) -> None:
    got = results(["ttft<=0.25"], [c1, c2])
    assert [(r.level, r.value, r.passed) for r in got] == [("c1", 0.5, False), ("c2", 0.25, True)]
    assert [r.expr for r in got] == ["ttft<=0.25", "ttft<=0.25"]
    assert got[1].detail == "c2.ttft = 0.25 s, needs <= 0.25"


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
        ExpectResult("ttft<=1", "c1", 0.5, True, "c1.ttft = 0.5 s, needs <= 1"),
        ExpectResult("c1.tok_s>=1", "c1", 3.0, True, "c1.tok_s = 3 tok/s, needs >= 1"),
    ]


def test_expectation_text_and_number_errors() -> None:
    (e,) = expect.parse(["  c1.tok_s >= 100  "])
    assert (e.text, e.level, e.metric, e.op, e.threshold) == ("c1.tok_s >= 100", "c1", "tok_s", ">=", 100.0)
    with pytest.raises(UsageError) as err:
        expect.parse(["c1.tok_s>=1.2.3"])
    assert str(err.value) == "--expect 'c1.tok_s>=1.2.3': '1.2.3' is not a number"
    assert expect.parse(["p2k.ttft<1", ",", "c8.e2e<=2"])[0].level == "p2048"
    assert len(expect.parse(["p2k.ttft<1", ",", "c8.e2e<=2"])) == 2


# ---- SSE parsing: the whole RequestResult, exactly (mutants the benchmark found in bench/parse.py) ----


def _ev(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _delta(finish: str | None = None, **delta: object) -> bytes:
    return _ev({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


ROLE = _delta(role="assistant", content="")
DONE = b"data: [DONE]\n\n"


def _usage(completion: object, prompt: object = 7) -> bytes:
    return _ev({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})


def _raw(chunks: list[tuple[float, bytes]], **kw: object) -> RawResult:
    r = RawResult(index=3, t_sched=0.75, t_start=0.875, t_sent=1.0, t_headers=1.0625, t_end=9.0)
    r.chunks = chunks
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def _want(**kw: object) -> RequestResult:
    base: dict[str, object] = dict(
        index=3, ok=True, failure=None, detail="", t_start=0.875, t_end=1.75, queue=0.25, ttft=0.25,
        e2e=0.75, output_tokens=3, prompt_tokens=7, token_source="usage", itl=0.25, gaps=[0.25, 0.25],
    )  # fmt: skip
    base.update(kw)
    return RequestResult(**base)  # type: ignore[arg-type]


def test_parse_a_whole_stream_exactly() -> None:
    chunks = [(1.25, ROLE + _delta(content="a")), (1.5, _delta(content="b")),
              (1.75, _delta("stop", content="c") + _usage(3) + DONE)]  # fmt: skip
    assert parse(_raw(chunks), expected_tokens=3) == _want()
    assert parse(_raw(chunks), expected_tokens=None) == _want()


def test_parse_counts_chunks_without_usage_and_ignores_keepalives() -> None:
    chunks = [(1.25, b": keep-alive\n\n" + ROLE + _delta(reasoning_content="r")),
              (1.5, _delta(reasoning="s")), (1.625, b"event: ping\n\n"),
              (1.75, _delta(tool_calls=[{"index": 0}]) + DONE)]  # fmt: skip
    assert parse(_raw(chunks), None) == _want(prompt_tokens=None, token_source="chunks", t_end=1.75)


def test_parse_crlf_events_split_across_reads_and_a_last_event_without_blank_line() -> None:
    whole = (ROLE + _delta(content="a")).replace(b"\n", b"\r\n")
    chunks = [(1.125, whole[:9]), (1.25, whole[9:]), (1.5, _delta(content="b") + _usage(2)),
              (1.625, b"data: [DONE]")]  # fmt: skip
    assert parse(_raw(chunks), 2) == _want(
        t_end=1.625, ttft=0.25, e2e=0.625, output_tokens=2, prompt_tokens=7, itl=0.375, gaps=[0.25]
    )


def test_parse_completions_text_events() -> None:
    text = lambda s, f=None: _ev({"choices": [{"index": 0, "text": s, "finish_reason": f}]})  # noqa: E731
    chunks = [(1.25, text("")), (1.5, text("x")), (2.0, text("y", "length") + DONE)]
    assert parse(_raw(chunks), None) == _want(
        t_end=2.0, ttft=0.5, e2e=1.0, output_tokens=2, prompt_tokens=None, token_source="chunks", itl=0.5,
        gaps=[0.5],
    )


def test_parse_tokens_with_empty_text_time_from_the_finish_event() -> None:
    chunks = [(1.25, ROLE), (1.5, _delta("length", content="")), (1.75, _usage(1) + DONE)]
    assert parse(_raw(chunks), 1) == _want(t_end=1.75, ttft=0.5, e2e=0.75, output_tokens=1, itl=None, gaps=[])
    no_usage = [(1.25, ROLE), (1.5, _delta("length", content="") + DONE)]
    assert parse(_raw(no_usage), None).failure == "empty"


@pytest.mark.parametrize("completion", [True, -1, "3", 2.0])
def test_parse_ignores_usage_that_is_not_a_count(completion: object) -> None:
    chunks = [(1.25, ROLE + _delta(content="a")),
              (1.5, _delta(content="b") + _usage(completion, prompt=False))]  # fmt: skip
    res = parse(_raw([*chunks, (1.75, DONE)]), None)
    assert (res.output_tokens, res.token_source, res.prompt_tokens) == (2, "chunks", None)


@pytest.mark.parametrize(
    ("chunks", "failure", "detail"),
    [
        ([(1.25, b"data: {nope\n\n")], "malformed", "event is not JSON: {nope"),
        ([(1.25, b"data: [1, 2]\n\n")], "malformed", "event is not an object: [1, 2]"),
        ([(1.25, _ev({"error": {"message": "engine died"}}))], "stream_error",
         "server error event: engine died"),
        ([(1.25, _ev({"error": "plain"}))], "stream_error", "server error event: plain"),
        ([(1.25, _ev({"choices": ["x"]}))], "malformed", 'event without a choice object: {"choices": ["x"]}'),
        ([(1.25, _ev({"choices": [{"delta": 5}]}))], "malformed",
         'event without a choice object: {"choices": [{"delta": 5}]}'),
        ([(1.25, ROLE + _delta(content="a"))], "truncated", "the stream ended without data: [DONE]"),
        ([(1.25, ROLE + DONE)], "empty", "no content-bearing event in the stream"),
        ([(1.25, _delta(content="a") + _usage(2) + DONE)], "length_mismatch",
         "asked for exactly 5 tokens, got 2 (usage)"),
    ],
)  # fmt: skip
def test_parse_failures_name_the_kind_and_the_event(
    chunks: list[tuple[float, bytes]], failure: str, detail: str
) -> None:
    res = parse(_raw(chunks), 5 if failure == "length_mismatch" else None)
    assert (res.ok, res.failure, res.detail) == (False, failure, detail)
    assert res.queue == 0.25 and res.t_start == 0.875


def test_parse_transport_failures_keep_the_body_excerpt() -> None:
    raw = _raw([(1.25, b'{"error":\n  "over'), (1.5, b'loaded"}')], error_kind="http_5xx", error="HTTP 503")
    res = parse(raw, 4)
    assert (res.ok, res.failure, res.detail, res.t_end, res.ttft) == (
        False, "http_5xx", 'HTTP 503: {"error": "overloaded"}', 9.0, None)  # fmt: skip
    timeout = parse(_raw([(1.25, ROLE)], error_kind="timeout", error="no answer in 5 s"), 4)
    assert (timeout.failure, timeout.detail) == ("timeout", "no answer in 5 s")
    assert parse(_raw([], t_sched=1.5), None).queue == 0.0, "a request sent early has no queue time"


# ---- statistics: every field of a level, exactly (mutants the benchmark found in bench/metrics.py) ----


def _dist(d: Dist | None) -> tuple[object, ...]:
    assert d is not None
    return astuple(d)


def test_level_statistics_every_field(c2: LevelReport) -> None:
    approx = pytest.approx
    assert (c2.name, c2.mode, c2.concurrency, c2.prompt_tokens_target, c2.output_tokens_target) == (
        "c2", "sweep", 2, 64, 2)  # fmt: skip
    assert (c2.requests, c2.ok, c2.failures, c2.failure_examples, c2.token_source) == (
        4, 3, {"timeout": 1}, ["timeout: boom"], "usage")  # fmt: skip
    assert astuple(c2.tok_s) == (2.5, 1.0, 4.0) and astuple(c2.req_s) == (1.25, 0.5, 2.0)
    assert [astuple(r) for r in c2.repeats] == [
        (1, 2, 2, 0, 1.0, 4, 4.0, 2.0, 0.25, 0.75, 1.0),
        (2, 2, 1, 1, 2.0, 2, 1.0, 0.5, 0.5, 1.5, 2.0),
    ]
    assert _dist(c2.ttft) == approx((3, 1 / 3, 0.25, 0.45, 0.495, 0.25, 0.5, 0.25, 0.5))
    assert _dist(c2.itl) == approx((3, 1.0, 0.75, 1.35, 1.485, 0.75, 1.5, 0.75, 1.5))
    assert _dist(c2.itl_chunks) == _dist(c2.itl)
    assert _dist(c2.e2e) == approx((3, 4 / 3, 1.0, 1.8, 1.98, 1.0, 2.0, 1.0, 2.0))
    assert _dist(c2.user_tok_s) == approx((3, 10 / 9, 4 / 3, 4 / 3, 4 / 3, 2 / 3, 4 / 3, 2 / 3, 4 / 3))
    assert _dist(c2.queue) == (4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert _dist(c2.prompt_tokens) == (3, 64.0, 64.0, 64.0, 64.0, 64.0, 64.0, None, None)
    assert _dist(c2.output_tokens) == (3, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, None, None)
    assert c2.prefill_tok_s is None and c2.n_failed == 1
    assert (c2.raw_ttft, c2.raw_e2e) == ([0.25, 0.25, 0.5], [1.0, 1.0, 2.0])


def test_prefill_level_and_token_sources() -> None:
    chunked = _ok(1, 0.0, 0.5, 3, 0.25)
    chunked.token_source = "chunks"
    lv = summarise_level("p64", "prefill", 1, 64, 1, [[_ok(0, 0.0, 0.25, 2, 0.25), chunked]])
    assert _dist(lv.prefill_tok_s) == (2, 192.0, 192.0, 243.2, 254.72, 128.0, 256.0, 192.0, 192.0)
    assert lv.token_source == "mixed"
    none = summarise_level("c1", "sweep", 1, 64, 1, [[_failed(i, "connect") for i in range(7)]])
    assert (none.token_source, none.ok, none.failures) == ("none", 0, {"connect": 7})
    assert none.failure_examples == ["connect: boom"] * 5, "at most 5 examples"
    assert astuple(none.tok_s) == (None, None, None) and astuple(none.ttft) == (0, *[None] * 8)
    unknown = _failed(0, "x")
    unknown.failure = None
    assert summarise_level("c1", "sweep", 1, 64, 1, [[unknown]]).failures == {"unknown": 1}


def test_empty_repeats_and_distributions() -> None:
    assert astuple(summarise_repeat(4, [])) == (4, 0, 0, 0, 0.0, 0, 0.0, 0.0, None, None, None)
    assert Dist.of([]) == Dist() and Span.of([]) == Span()
    assert astuple(Dist.of([2.0], [[], [2.0]])) == (1, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0)


def test_percentile_ends_and_nothing() -> None:
    assert percentile([1.0, 2.0], 100) == 2.0 and percentile([1.0, 2.0], 0) == 1.0
    assert percentile([1.0, 3.0], 50) == 2.0 and percentile([0.0, 10.0, 20.0], 75) == 15.0
    with pytest.raises(ValueError, match="percentile of nothing"):
        percentile([], 50)


# ---- what the second benchmark run left (parse's event framing, usage edge values, --expect names) ----


def test_an_empty_event_does_not_stop_the_framing() -> None:
    chunks = [(1.25, b"\n\n" + ROLE + _delta(content="a")), (1.5, _delta(content="b")),
              (1.75, _delta(content="c") + _usage(3) + DONE)]  # fmt: skip
    assert parse(_raw(chunks), 3) == _want()


def test_a_content_event_split_across_reads() -> None:
    event = _delta(content="a")
    chunks = [(1.125, ROLE + event[:11]), (1.25, event[11:]), (1.5, _delta(content="b")),
              (1.75, _delta(content="c") + _usage(3) + DONE)]  # fmt: skip
    assert parse(_raw(chunks), 3) == _want()


def test_multi_line_data_named_events_and_no_space_after_the_colon() -> None:
    obj = json.dumps({"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]})
    head, tail = obj[: obj.index("[")], obj[obj.index("[") :]  # split between JSON tokens
    chunks = [(1.25, ROLE + f"event: message\ndata: {head}\ndata: {tail}\n\n".encode()),
              (1.5, b"data:" + _delta(content="b")[6:]),
              (1.75, _delta(content="c") + _usage(3) + DONE)]  # fmt: skip
    assert parse(_raw(chunks), 3) == _want()


def test_zero_usage_counts_are_counts() -> None:
    chunks = [(1.25, ROLE + _delta(content="a")), (1.5, _usage(0, prompt=0) + DONE)]
    res = parse(_raw(chunks), None)
    assert (res.output_tokens, res.token_source, res.prompt_tokens, res.itl) == (0, "usage", 0, None)


def test_an_event_with_choices_and_an_error_key_is_not_an_error() -> None:
    odd = _ev({"error": None, "choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]})
    chunks = [(1.25, ROLE + odd), (1.5, _delta(content="b")), (1.75, _delta(content="c") + _usage(3) + DONE)]
    assert parse(_raw(chunks), 3) == _want()


def test_error_events_without_a_message_and_long_ones() -> None:
    res = parse(_raw([(1.25, _ev({"error": {"code": 500}}))]), None)
    assert res.detail == "server error event: {'code': 500}"
    long = parse(_raw([(1.25, _ev({"error": {"message": "x" * 300}}))]), None)
    assert long.detail == "server error event: " + "x" * 199 + "…"
    assert long.output_tokens == 0


def test_a_dict_of_choices_is_malformed() -> None:
    res = parse(_raw([(1.25, _ev({"choices": {"a": 1}}))]), None)
    assert (res.failure, res.detail) == ("malformed", 'event without a choice object: {"choices": {"a": 1}}')


def test_the_first_finish_event_times_empty_text_tokens() -> None:
    chunks = [(1.25, ROLE), (1.5, _delta("length", content="")), (1.625, _delta("length", content="")),
              (1.75, _usage(1) + DONE)]  # fmt: skip
    assert parse(_raw(chunks), 1).ttft == 0.5


def test_details_are_cut_at_200_characters_and_bad_utf8_is_replaced() -> None:
    not_json = parse(_raw([(1.25, b"data: " + b"\xff" + b"y" * 300 + b"\n\n")]), None)
    assert not_json.detail == "event is not JSON: \ufffd" + "y" * 198 + "…"
    body = b'{"error": "' + b"\xfe" + b"z" * 300 + b'"}'
    http = parse(_raw([(1.25, body)], error_kind="http_5xx", error="HTTP 500"), None)
    assert http.detail == 'HTTP 500: {"error": "\ufffd' + "z" * 187 + "…"
    transport = parse(_raw([], error_kind="connect", error="refused " * 40), None)
    assert len(transport.detail) == 200 and transport.detail.endswith("…")
    assert transport.output_tokens == 0


@pytest.mark.parametrize(
    "metric",
    ["tok_s", "tok_s_min", "tok_s_max", "req_s", "failures", "ok", "itl_chunks_p90", "itl_p90",
     "user_tok_s_max", "prefill_tok_s_mean"],
)  # fmt: skip
def test_every_metric_name_parses(metric: str) -> None:
    assert expect.parse([f"{metric}>=1"])[0].metric == metric


def test_check_levels() -> None:
    expect.check_levels(expect.parse(["failures==0", "ttft<1", "c8.tok_s>1"]), ["c1", "c8"])
    with pytest.raises(UsageError) as err:
        expect.check_levels(expect.parse(["c64.tok_s>=1"]), ["c1", "c8"])
    assert str(err.value) == "--expect 'c64.tok_s>=1': level c64 is not in this run (levels: c1, c8)"


def test_percentile_of_nothing_message() -> None:
    with pytest.raises(ValueError) as err:
        percentile([], 50)
    assert str(err.value) == "percentile of nothing"
