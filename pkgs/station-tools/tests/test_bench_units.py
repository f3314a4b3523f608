"""Pure parts of `station bench`: SSE parsing into metrics, statistics, --expect grammar, /metrics parsing."""

from __future__ import annotations

import json

import pytest

from vllm_station.api.prometheus import parse_prometheus
from vllm_station.commands.bench import expect
from vllm_station.commands.bench.metrics import Dist, percentile, summarise_level
from vllm_station.commands.bench.parse import RequestResult, parse
from vllm_station.commands.bench.wire import RawResult
from vllm_station.errors import UsageError


def _ev(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _content(text: str, finish: str | None = None) -> bytes:
    return _ev({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]})


ROLE = _ev({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
USAGE4 = _ev({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}})
DONE = b"data: [DONE]\n\n"


def _raw(chunks: list[tuple[float, bytes]], **kw: object) -> RawResult:
    end = chunks[-1][0] if chunks else 2.0
    r = RawResult(index=0, t_sched=0.9995, t_start=0.9995, t_sent=1.0, t_headers=1.01, t_end=end)
    r.chunks = chunks
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def test_parse_timing_from_chunk_timestamps() -> None:
    # role + first token arrive together at 1.10; then 0.02 apart; usage and [DONE] with the last token
    raw = _raw(
        [
            (1.10, ROLE + _content("a")),
            (1.12, _content(" b")),
            (1.14, _content(" c")),
            (1.16, _content(" d", "length") + USAGE4 + DONE),
        ]
    )
    r = parse(raw, expected_tokens=4)
    assert r.ok and r.failure is None
    assert r.ttft == pytest.approx(0.10)
    assert r.e2e == pytest.approx(0.16)
    assert r.output_tokens == 4 and r.token_source == "usage" and r.prompt_tokens == 7
    assert r.itl == pytest.approx(0.02)
    assert r.gaps == pytest.approx([0.02, 0.02, 0.02])
    assert r.user_tok_s == pytest.approx(50.0)
    assert r.queue == pytest.approx(0.0005)


def test_events_split_across_reads_and_crlf() -> None:
    body = (ROLE + _content("a") + _content(" b", "length") + USAGE4 + DONE).replace(b"\n", b"\r\n")
    raw = _raw([(1.1, body[:37]), (1.2, body[37:90]), (1.3, body[90:])])
    r = parse(raw, expected_tokens=None)
    assert r.ok
    assert r.output_tokens == 4  # usage wins over the two content events
    assert r.ttft is not None and r.ttft > 0.09


def test_token_fallback_counts_content_events() -> None:
    raw = _raw([(1.1, ROLE + _content("a")), (1.2, _content("b", "length") + DONE)])
    r = parse(raw, expected_tokens=2)
    assert r.ok and r.token_source == "chunks" and r.output_tokens == 2


def test_reasoning_and_tool_calls_count_as_content() -> None:
    reasoning = _ev({"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]})
    tool = _ev(
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}}]}
    )
    r = parse(_raw([(1.05, ROLE), (1.2, reasoning), (1.3, tool + DONE)]), None)
    assert r.ok and r.ttft == pytest.approx(0.2) and r.output_tokens == 2


@pytest.mark.parametrize(
    ("chunks", "kind"),
    [
        ([(1.1, ROLE + _content("a"))], "truncated"),  # no [DONE]
        ([(1.1, ROLE + DONE)], "empty"),
        ([(1.1, b"data: {not json\n\n" + DONE)], "malformed"),
        ([(1.1, ROLE + _ev({"error": {"message": "boom"}}) + DONE)], "stream_error"),
        ([(1.1, ROLE + _content("a") + _content("b") + USAGE4 + DONE)], "length_mismatch"),
    ],
)
def test_failure_kinds_from_stream_content(chunks: list[tuple[float, bytes]], kind: str) -> None:
    r = parse(_raw(chunks), expected_tokens=8)
    assert not r.ok
    assert r.failure == kind


def test_empty_text_token_times_from_the_finish_event() -> None:
    last = _ev({"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "length"}]})
    usage1 = _ev({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}})
    r = parse(_raw([(1.05, ROLE), (1.3, last + usage1 + DONE)]), expected_tokens=1)
    assert r.ok and r.ttft == pytest.approx(0.3) and r.output_tokens == 1
    assert r.prefill_tok_s == pytest.approx(9 / 0.3)


def test_transport_failures_pass_through_with_body_excerpt() -> None:
    raw = _raw([(1.1, b'{"error": "overloaded"}')], error_kind="http_5xx", error="HTTP 503", status=503)
    r = parse(raw, 4)
    assert r.failure == "http_5xx" and "overloaded" in r.detail


def test_percentile_matches_linear_interpolation() -> None:
    s = [float(v) for v in range(1, 101)]
    assert percentile(s, 50) == pytest.approx(50.5)
    assert percentile(s, 90) == pytest.approx(90.1)
    assert percentile(s, 99) == pytest.approx(99.01)
    assert percentile([3.0], 99) == 3.0
    d = Dist.of([1.0, 2.0, 3.0, 10.0], [[1.0, 2.0], [3.0, 10.0]])
    assert (d.mean, d.median, d.min, d.max) == (4.0, 2.5, 1.0, 10.0)
    assert (d.repeat_median_min, d.repeat_median_max) == (1.5, 6.5)


def _result(i: int, start: float, ttft: float, tokens: int, itl: float) -> RequestResult:
    e2e = ttft + itl * (tokens - 1)
    return RequestResult(
        index=i, ok=True, failure=None, detail="", t_start=start, t_end=start + e2e, queue=0.0,
        ttft=ttft, e2e=e2e, output_tokens=tokens, prompt_tokens=100, token_source="usage", itl=itl,
        gaps=[itl] * (tokens - 1),
    )  # fmt: skip


def test_level_throughput_over_the_repeat_window() -> None:
    rep1 = [_result(0, 0.0, 0.1, 11, 0.01), _result(1, 0.0, 0.1, 11, 0.01)]  # both end at 0.2
    rep2 = [_result(2, 5.0, 0.1, 11, 0.01)]
    bad = RequestResult(
        index=3, ok=False, failure="timeout", detail="x", t_start=5.0, t_end=5.1, queue=0.0, ttft=None,
        e2e=None, output_tokens=0, prompt_tokens=None, token_source="chunks", itl=None,
    )  # fmt: skip
    lv = summarise_level("c2", "sweep", 2, 128, 11, [rep1, [*rep2, bad]])
    assert lv.ok == 3 and lv.failures == {"timeout": 1}
    assert lv.repeats[0].tok_s == pytest.approx(22 / 0.2)
    assert lv.repeats[1].tok_s == pytest.approx(11 / 0.2)
    assert lv.tok_s.min == pytest.approx(55.0) and lv.tok_s.max == pytest.approx(110.0)
    assert lv.user_tok_s.median == pytest.approx(100.0)
    assert lv.token_source == "usage"


def test_expect_grammar_and_levels() -> None:
    exps = expect.parse(["c1.tok_s>=100", "c32.ttft_p50<=1.5,failures==0", "p8k.prefill_tok_s>1e4"])
    assert [(e.level, e.metric, e.op, e.threshold) for e in exps] == [
        ("c1", "tok_s", ">=", 100.0),
        ("c32", "ttft_p50", "<=", 1.5),
        (None, "failures", "==", 0.0),
        ("p8192", "prefill_tok_s", ">", 1e4),
    ]
    with pytest.raises(UsageError, match="unknown metric"):
        expect.parse(["c1.speed>=1"])
    with pytest.raises(UsageError, match="METRIC OP NUMBER"):
        expect.parse(["c1.tok_s=>1"])
    with pytest.raises(UsageError, match="not a finite number"):
        expect.parse(["c1.tok_s>=1e999"])
    with pytest.raises(UsageError, match="not in this run"):
        expect.check_levels(expect.parse(["c64.tok_s>=1"]), ["c1", "c8"])


def test_expect_evaluation() -> None:
    lv = summarise_level("c1", "sweep", 1, 128, 11, [[_result(0, 0.0, 0.1, 11, 0.01)]])
    res = expect.evaluate(
        expect.parse(["c1.tok_s>=50", "ttft_p99<=0.05", "failures==0", "itl_chunks<0.02"]), [lv]
    )
    assert [r.passed for r in res] == [True, False, True, True]
    assert res[1].value == pytest.approx(0.1)


def test_prometheus_parsing_sums_label_sets() -> None:
    text = (
        "# HELP x\n# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="a",engine="0"} 3.0\n'
        'vllm:num_requests_running{model_name="a",engine="1"} 2.0\n'
        "vllm:generation_tokens_total 1.5e3 1700000000\n"
        "broken line\n"
    )
    v = parse_prometheus(text)
    assert v["vllm:num_requests_running"] == 5.0
    assert v["vllm:generation_tokens_total"] == 1500.0
