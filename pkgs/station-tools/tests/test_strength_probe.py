"""Mutants of `vllm_station.commands.probe` (scripts/bench-mutation): the decode-rate formula checked exactly
on fixed timestamps (a formula off by one token stays inside any tolerance a timed test can afford), what
counts as the first and last generated token, the exported families, and the exit codes as literals."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from faultserver import FaultServer, RawReply, Reply, Request, SseReply, chat_chunks, chat_completion
from simserver import SimServer

from vllm_station import cli
from vllm_station.api import ApiClient, ChatChunk
from vllm_station.api.models import Usage
from vllm_station.commands import probe
from vllm_station.sim.config import SimConfig


def chunk(at: float, content: str | None = None, reasoning: str | None = None, finish: str | None = None,
          usage: Usage | None = None) -> ChatChunk:  # fmt: skip
    return ChatChunk(content, reasoning, [], finish, usage, at)


class FixedStream:
    """An endpoint whose stream arrives at fixed times (ChatChunk.elapsed_s): the figures are exact."""

    api_url = "http://user:pw@127.0.0.1:8000/v1"

    def __init__(self, chunks: list[ChatChunk]) -> None:
        self.chunks = chunks
        self.asked: dict[str, Any] = {}

    def chat_stream(self, model: str, messages: Any, **kw: Any) -> Iterator[ChatChunk]:
        self.asked = {"model": model, "messages": messages, **kw}
        yield from self.chunks


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """perf_counter for the whole request: 100.0 when sent, 102.5 when the stream ended."""
    times = [100.0, 102.5]
    monkeypatch.setattr(probe.time, "perf_counter", lambda: times.pop(0) if len(times) > 1 else times[0])
    return times


def stream(n_tokens: int, first: float, last: float, finish: str = "length") -> list[ChatChunk]:
    return [
        chunk(0.1),  # the role chunk: no text, not the first token
        chunk(first, reasoning="Counting."),  # reasoning is generated text too
        chunk((first + last) / 2, content="1\n2\n"),
        chunk(last, content="3\n"),
        chunk(last + 0.4, finish=finish),  # no text: not the last token
        chunk(last + 0.5, usage=Usage(7, n_tokens, 7 + n_tokens)),
    ]


def test_decode_rate_exactly_on_fixed_timestamps(clock: list[float]) -> None:
    api = FixedStream(stream(33, 0.25, 1.85))
    rep, error = probe.generate(api, "m", 64)  # type: ignore[arg-type]
    assert error is None and rep.ok is True
    assert rep.completion_tokens == 33
    assert rep.tokens_per_second == 20.0  # (33 - 1) / (1.85 - 0.25), not 33 / 1.6 = 20.62
    assert rep.itl_s == 0.05  # (1.85 - 0.25) / (33 - 1)
    assert rep.ttft_s == 0.25
    assert rep.request_tokens_per_second == 13.2  # 33 / 2.5 s
    assert rep.duration_s == 2.5
    assert rep.reason == "33 tokens in 2.50 s: 20 tok/s decode (one user), TTFT 250 ms"
    assert rep.base_url == "http://127.0.0.1:8000/v1"  # never the credentials
    assert api.asked == {
        "model": "m",
        "messages": [
            {"role": "user", "content": "Count from 1 to 1000, one number per line, without any other text."}
        ],
        "max_tokens": 64,
        "temperature": 0,
        "seed": 1234,  # smoke's seed: the same answer every run
        "extra": {"ignore_eos": True},
    }


def test_a_stream_that_stopped_early_says_its_finish_reason(clock: list[float]) -> None:
    rep, error = probe.generate(FixedStream(stream(5, 0.5, 1.5, finish="stop")), "m", 64)  # type: ignore[arg-type]
    assert error is None
    assert rep.tokens_per_second == 4.0 and rep.itl_s == 0.25
    assert rep.reason == "5 tokens in 2.50 s: 4 tok/s decode (one user), TTFT 500 ms, finish_reason stop"


def test_one_token_has_no_decode_rate(clock: list[float]) -> None:
    rep, error = probe.generate(FixedStream(stream(1, 0.5, 0.5)), "m", 1)  # type: ignore[arg-type]
    assert error is None and rep.ok is True
    assert rep.tokens_per_second is None and rep.itl_s is None
    assert rep.request_tokens_per_second == 0.4
    assert rep.reason == "1 tokens in 2.50 s: rate unmeasured decode (one user), TTFT 500 ms"


def test_two_tokens_at_the_same_instant_have_no_rate(clock: list[float]) -> None:
    rep, _ = probe.generate(FixedStream(stream(2, 0.5, 0.5)), "m", 2)  # type: ignore[arg-type]
    assert rep.tokens_per_second is None and rep.itl_s is None and rep.completion_tokens == 2


@pytest.mark.parametrize(
    ("chunks", "reason"),
    [
        ([chunk(0.1, content="hi"), chunk(0.2, finish="stop")], "generation returned no usage"),
        ([chunk(0.1), chunk(0.2, usage=Usage(7, 0, 7))], "generation returned no usage"),
        ([chunk(0.1), chunk(0.2, usage=Usage(7, 3, 10))], "generation returned no generated text"),
    ],
)
def test_no_usage_or_no_text_is_a_protocol_failure(
    clock: list[float], chunks: list[ChatChunk], reason: str
) -> None:
    rep, error = probe.generate(FixedStream(chunks), "m", 8)  # type: ignore[arg-type]
    assert (rep.ok, error, rep.reason, rep.exit_code) == (False, "protocol", reason, 1)
    assert rep.tokens_per_second is None and rep.completion_tokens is None


def _report(**kw: Any) -> probe.ProbeReport:
    base: dict[str, Any] = dict(
        schema=1, base_url="u", model="m", max_tokens=64, ok=True, tokens_per_second=20.0,
        request_tokens_per_second=13.2, ttft_s=0.25, itl_s=0.05, completion_tokens=33, duration_s=2.5,
        reason="", tool_call="pass", tool_call_reason="", exit_code=0, at_unix=1700000000.0,
    )  # fmt: skip
    return probe.ProbeReport(**{**base, **kw})


def _values(rep: probe.ProbeReport) -> dict[str, float]:
    return {f.name: f.samples[0].value for f in probe.families(rep)}


def test_families_export_the_reported_figures() -> None:
    assert _values(_report()) == {
        "station_probe_success": 1.0,
        "station_probe_tokens_per_second": 20.0,
        "station_probe_request_tokens_per_second": 13.2,
        "station_probe_ttft_seconds": 0.25,
        "station_probe_inter_token_latency_seconds": 0.05,
        "station_probe_completion_tokens": 33.0,
        "station_probe_max_tokens": 64,
        "station_probe_tool_call_success": 1.0,
        "station_probe_duration_seconds": 2.5,
        "station_probe_last_run_timestamp_seconds": 1700000000.0,
    }


@pytest.mark.parametrize(("tool", "value"), [("pass", 1.0), ("warn", 1.0), ("fail", 0.0), ("skip", math.nan)])
def test_tool_call_success_per_verdict(tool: str, value: float) -> None:
    got = _values(_report(tool_call=tool))["station_probe_tool_call_success"]
    assert got == value or (math.isnan(value) and math.isnan(got))


def test_a_failed_generation_exports_nan_figures_and_success_0() -> None:
    got = _values(_report(ok=False, tokens_per_second=None, request_tokens_per_second=None, ttft_s=None,
                          itl_s=None, completion_tokens=None))  # fmt: skip
    assert got["station_probe_success"] == 0.0
    for name in ("tokens_per_second", "request_tokens_per_second", "ttft_seconds",
                 "inter_token_latency_seconds", "completion_tokens"):  # fmt: skip
        assert math.isnan(got[f"station_probe_{name}"]), name
    assert got["station_probe_max_tokens"] == 64 and got["station_probe_duration_seconds"] == 2.5



# ---- run_probe and the command, against the simulator and refusing servers -------------------------------


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(SimConfig(model="sim", ttft=0.0, itl=0.0, eos_after=5)) as s:
        yield s


def probe_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[int, str, str]:
    monkeypatch.delenv("STATION_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    capsys.readouterr()
    code = cli.main(["probe", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_command_defaults_and_its_table(
    sim: SimServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = probe_cli(capsys, monkeypatch, "--base-url", sim.base_url, "--json")
    rep = json.loads(out)
    assert code == 0 and err == ""
    assert (rep["schema"], rep["max_tokens"], rep["completion_tokens"], rep["model"]) == (1, 64, 64, "sim")
    assert (rep["ok"], rep["tool_call"], rep["exit_code"]) == (True, "pass", 0)
    assert rep["base_url"] == sim.base_url + "/v1"
    code, out, _ = probe_cli(capsys, monkeypatch, "--base-url", sim.base_url, "--max-tokens", "4096",
                             "--tool-choice", "none")  # fmt: skip
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3
    assert lines[0] == f"station probe  {sim.base_url}/v1  model=sim"
    assert lines[1].startswith("generation PASS: 4096 tokens in ")
    assert lines[2] == "tool call SKIP: not run"


def test_the_largest_and_one_more_max_tokens(
    sim: SimServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = probe_cli(capsys, monkeypatch, "--base-url", sim.base_url, "--max-tokens", "4097")
    assert code == 2 and "argument --max-tokens: must be a whole number from 1 to 4,096, got '4097'" in err


def test_a_failed_tool_call_is_exit_1_naming_it(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The generation passes, the server answers the tool call with text: exit 1, the tool call's reason on
    stderr (not the generation's)."""
    def answer(req: Request) -> Reply | SseReply:
        if json.loads(req.body).get("stream"):
            return SseReply(events=chat_chunks("m", content="1\n2\n3\n"))
        return Reply(json=chat_completion("m", content="It is sunny in Paris."))

    srv = FaultServer({("GET", "/v1/models"): Reply(json={"object": "list", "data": [{"id": "m"}]}),
                       ("POST", "/v1/chat/completions"): answer}).start()  # fmt: skip
    try:
        code, out, err = probe_cli(capsys, monkeypatch, "--base-url", srv.url, "--json")
    finally:
        srv.stop()
    rep = json.loads(out)
    assert code == 1 and rep["ok"] is True and rep["tool_call"] == "fail" and rep["exit_code"] == 1
    assert err == f"station probe: {rep['tool_call_reason']}\n"


def test_no_model_listed_is_exit_1_and_nothing_generated(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv = FaultServer({("GET", "/v1/models"): Reply(json={"object": "list", "data": []})}).start()
    try:
        code, out, err = probe_cli(capsys, monkeypatch, "--base-url", srv.url, "--json")
    finally:
        srv.stop()
    rep = json.loads(out)
    assert code == 1 and rep["exit_code"] == 1 and rep["ok"] is False
    assert rep["reason"].startswith("models: ") and rep["tool_call_reason"] == "not run: no model"
    assert rep["completion_tokens"] is None and rep["tool_call"] == "skip"
    assert [r.path for r in srv.requests] == ["/v1/models"]
    assert err == f"station probe: {rep['reason']}\n"


def test_a_broken_answer_to_the_generation_is_exit_1_and_the_tool_call_still_asked() -> None:
    srv = FaultServer({("GET", "/v1/models"): Reply(json={"object": "list", "data": [{"id": "m"}]}),
                       ("POST", "/v1/chat/completions"): RawReply(b"")}).start()  # fmt: skip
    try:
        with ApiClient(srv.url, timeout=5) as api:
            rep = probe.run_probe(api, None, 8, "auto")
    finally:
        srv.stop()
    assert (rep.ok, rep.model, rep.exit_code, rep.tool_call) == (False, "m", 1, "fail")
    assert rep.reason.startswith("generation failed: POST /v1/chat/completions at ")
    assert [r.path for r in srv.requests] == ["/v1/models", "/v1/chat/completions", "/v1/chat/completions"]


def test_the_families_names_help_and_types() -> None:
    assert [(f.name, f.help, f.type) for f in probe.families(_report())] == [
        ("station_probe_success", "1 when the probe's fixed-length generation worked", "gauge"),
        ("station_probe_tokens_per_second", "Decode rate one user sees: (tokens-1)/(last-first token)",
         "gauge"),
        ("station_probe_request_tokens_per_second", "Generated tokens / whole request time", "gauge"),
        ("station_probe_ttft_seconds", "Time to the first generated token", "gauge"),
        ("station_probe_inter_token_latency_seconds", "Mean time between generated tokens", "gauge"),
        ("station_probe_completion_tokens", "Tokens the generation returned", "gauge"),
        ("station_probe_max_tokens", "Tokens the generation asks for (fixed length)", "gauge"),
        ("station_probe_tool_call_success", "1 when the get_weather tool call passed (NaN: not run)",
         "gauge"),
        ("station_probe_duration_seconds", "Wall time of the probe's generation", "gauge"),
        ("station_probe_last_run_timestamp_seconds", "When the probe last ran (Unix time)", "gauge"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("n", "first", "last", "rate", "itl"),
    [
        (1, 0.5, 1.5, None, None),  # one token: no interval to measure, whatever the times
        (2, 0.5, 1.5, 1.0, 1.0),  # two tokens: one interval
        (3, 1.0, 1.3, 6.67, 0.15),
        (7, 0.123456, 0.987654, 6.94, 0.14403),  # rounded: rate to 2 decimals, latency to 5
    ],
)
def test_rate_and_latency_from_the_token_count(
    clock: list[float], n: int, first: float, last: float, rate: float | None, itl: float | None
) -> None:
    rep, _ = probe.generate(FixedStream(stream(n, first, last)), "m", 8)  # type: ignore[arg-type]
    assert (rep.tokens_per_second, rep.itl_s) == (rate, itl)
    assert rep.ttft_s == round(first, 4)


def test_ttft_rounding_and_the_reason_in_milliseconds(clock: list[float]) -> None:
    rep, _ = probe.generate(FixedStream(stream(3, 1.0, 2.0)), "m", 8)  # type: ignore[arg-type]
    assert rep.reason == "3 tokens in 2.50 s: 2 tok/s decode (one user), TTFT 1000 ms"
    clock[:] = [5.0, 5.0]  # a request that took no measurable time: no request rate
    rep, _ = probe.generate(FixedStream(stream(3, 0.123456, 0.2)), "m", 8)  # type: ignore[arg-type]
    assert rep.request_tokens_per_second is None and rep.ttft_s == 0.1235 and rep.duration_s == 0.0
    clock[:] = [0.0, 3.0]
    rep, _ = probe.generate(FixedStream(stream(10, 0.1, 0.2)), "m", 8)  # type: ignore[arg-type]
    assert rep.request_tokens_per_second == 3.33
