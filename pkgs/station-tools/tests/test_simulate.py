"""`station simulate`: vLLM-shaped SSE, endpoints, tool calls, failure injection, honest timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from simserver import SimServer

from vllm_station.sim.config import GENERATION_OVERHEAD, MESSAGE_OVERHEAD, SimConfig
from vllm_station.sim.process import SimProcess


def _events(text: str) -> list[str]:
    return [block[len("data: ") :] for block in text.split("\n\n") if block.startswith("data: ")]


def _chat(base: str, **body: Any) -> httpx.Response:
    payload = {"model": "sim", "messages": [{"role": "user", "content": "one two three"}], **body}
    return httpx.post(base + "/v1/chat/completions", json=payload, timeout=10)


@pytest.fixture(scope="module")
def sim() -> Any:
    with SimServer(SimConfig(ttft=0.01, itl=0.002, output_len=5)) as s:
        yield s


def test_stream_is_shaped_like_vllm(sim: SimServer) -> None:
    r = _chat(sim.base_url, stream=True, max_tokens=4, stream_options={"include_usage": True})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    ev = _events(r.text)
    assert ev[-1] == "[DONE]"
    chunks = [json.loads(e) for e in ev[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[0]["object"] == "chat.completion.chunk"
    content = chunks[1:-1]
    assert len(content) == 4
    assert all(c["choices"][0]["delta"]["content"] for c in content)
    assert [c["choices"][0]["finish_reason"] for c in content] == [None, None, None, "length"]
    usage = chunks[-1]
    assert usage["choices"] == []
    prompt = MESSAGE_OVERHEAD + 3 + GENERATION_OVERHEAD
    assert usage["usage"] == {"prompt_tokens": prompt, "total_tokens": prompt + 4, "completion_tokens": 4}
    assert len({c["id"] for c in chunks}) == 1


def test_no_usage_chunk_unless_asked(sim: SimServer) -> None:
    ev = _events(_chat(sim.base_url, stream=True, max_tokens=2).text)
    assert ev[-1] == "[DONE]"
    assert all(json.loads(e)["choices"] for e in ev[:-1])


def test_eos_only_without_ignore_eos() -> None:
    with SimServer(SimConfig(ttft=0.0, itl=0.0, eos_after=3)) as s:
        plain = _chat(s.base_url, max_tokens=10).json()
        forced = _chat(s.base_url, max_tokens=10, ignore_eos=True, min_tokens=10).json()
    assert plain["usage"]["completion_tokens"] == 3
    assert plain["choices"][0]["finish_reason"] == "stop"
    assert forced["usage"]["completion_tokens"] == 10
    assert forced["choices"][0]["finish_reason"] == "length"


def test_endpoints(sim: SimServer) -> None:
    base = sim.base_url
    assert httpx.get(base + "/health", timeout=5).status_code == 200
    models = httpx.get(base + "/v1/models", timeout=5).json()
    assert models["data"][0]["id"] == "sim"
    tok = httpx.post(
        base + "/tokenize",
        json={"model": "sim", "messages": [{"role": "user", "content": "a b c d"}]},
        timeout=5,
    ).json()
    assert tok["count"] == 4 + MESSAGE_OVERHEAD + GENERATION_OVERHEAD == len(tok["tokens"])
    metrics = httpx.get(base + "/metrics", timeout=5).text
    assert "vllm:num_requests_running" in metrics and "vllm:generation_tokens_total" in metrics


def test_tool_calls_streamed_and_whole(sim: SimServer) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    whole = _chat(sim.base_url, tools=tools).json()
    call = whole["choices"][0]["message"]["tool_calls"][0]
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    ev = [json.loads(e) for e in _events(_chat(sim.base_url, tools=tools, stream=True).text)[:-1]]
    deltas = [c["choices"][0]["delta"] for c in ev[1:]]
    assert deltas[0]["tool_calls"][0]["function"]["name"] == "get_weather"
    args = "".join(d["tool_calls"][0]["function"].get("arguments", "") for d in deltas)
    assert json.loads(args) == {"city": "Paris"}
    assert ev[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_failure_injection_by_kind() -> None:
    cfg = SimConfig(ttft=0.0, itl=0.001, output_len=4, fail={"5xx": 0.5, "4xx": 0.5}, seed=1)
    with SimServer(cfg) as s:
        codes = [_chat(s.base_url).status_code for _ in range(20)]
        stats = s.stats()
    assert sorted(set(codes)) == [400, 500]
    assert stats["injected"] == {"5xx": codes.count(500), "4xx": codes.count(400)}


def test_truncate_drops_the_connection() -> None:
    cfg = SimConfig(ttft=0.0, itl=0.001, fail={"truncate": 1.0})
    with SimServer(cfg) as s, pytest.raises(httpx.HTTPError):  # an incomplete chunked body
        _chat(s.base_url, stream=True, max_tokens=6)


@pytest.mark.timing
def test_emitted_schedule_is_measured(sim: SimServer) -> None:
    cfg = SimConfig(ttft=0.03, itl=0.01, output_len=6)
    with SimServer(cfg) as s:
        t0 = time.perf_counter()
        _chat(s.base_url, stream=True)
        elapsed = time.perf_counter() - t0
        em = s.stats()["emitted"]
    assert em["ttft"]["n"] == 1
    assert 0.03 <= em["ttft"]["median"] < 0.045
    assert em["itl_gaps"]["n"] == 5
    assert 0.008 < em["itl_gaps"]["median"] < 0.013
    assert elapsed >= 0.03 + 5 * 0.01
    assert em["lateness"]["min"] >= 0


def test_cli_subprocess_stops_on_sigterm_and_writes_stats(tmp_path: Path) -> None:
    stats_file = tmp_path / "stats.json"
    with SimProcess(["--ttft", "0", "--itl", "0", "--stats-file", str(stats_file)]) as sim:
        r = _chat(sim.base_url, stream=True, max_tokens=3)
        assert r.text.endswith("data: [DONE]\n\n")
        assert sim.stats()["completed"] == 1
        assert sim.proc is not None
        proc = sim.proc
    assert proc.returncode == 0
    assert json.loads(stats_file.read_text())["completed"] == 1


def test_cli_rejects_bad_fail_spec() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "vllm_station", "simulate", "--fail", "oops=0.1"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ},
    )
    assert out.returncode == 2
    assert "unknown kind 'oops'" in out.stderr
