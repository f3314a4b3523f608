"""The real-vLLM test models do what the other tests rely on (served by vLLM's CPU build)."""

from __future__ import annotations

import copy
import json
from typing import Any

from vllm_station.api import ApiClient, collect_stream
from vllm_station.smoke import WEATHER_TOOL  # the models must handle the very tool smoke sends

ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_tiny_tools_calls_get_weather_with_auto_choice(tools_server: Any) -> None:
    with ApiClient(tools_server.base_url, timeout=60) as api:
        assert [m.id for m in api.models()] == ["tiny-tools"]
        res = api.chat("tiny-tools", ASK_WEATHER, tools=[WEATHER_TOOL], tool_choice="auto", max_tokens=64)
    assert res.finish_reason == "tool_calls"
    assert len(res.tool_calls) == 1
    call = res.tool_calls[0]
    assert call.type == "function" and call.name == "get_weather"
    args = json.loads(call.arguments)
    assert isinstance(args, dict) and args.get("location")


def test_tiny_tools_streams_the_same_call(tools_server: Any) -> None:
    with ApiClient(tools_server.base_url, timeout=60) as api:
        # greedy: the plain and the streamed answer must be the same call, not two samples
        kw: dict[str, Any] = {
            "tools": [WEATHER_TOOL],
            "tool_choice": "auto",
            "max_tokens": 64,
            "temperature": 0.0,
        }
        plain = api.chat("tiny-tools", ASK_WEATHER, **kw)
        streamed = collect_stream(api.chat_stream("tiny-tools", ASK_WEATHER, **kw))
    assert [c.name for c in streamed.tool_calls] == ["get_weather"]
    assert json.loads(streamed.tool_calls[0].arguments) == json.loads(plain.tool_calls[0].arguments)


def test_tiny_tools_answers_plain_chat(tools_server: Any) -> None:
    with ApiClient(tools_server.base_url, timeout=60) as api:
        res = api.chat("tiny-tools", [{"role": "user", "content": "Say hello."}], max_tokens=32)
    assert res.content and res.content.strip()
    assert not res.tool_calls


def test_smollm2_answers_sensibly(smol_server: Any) -> None:
    with ApiClient(smol_server.base_url, timeout=120) as api:
        assert [m.id for m in api.models()] == ["smollm2"]
        q = [{"role": "user", "content": "What is the capital of France?"}]
        res = api.chat("smollm2", q, max_tokens=16, temperature=0.0)
    assert res.content and "Paris" in res.content


def test_smollm2_tool_call_when_required(smol_server: Any) -> None:
    # Arguments follow the schema only for "strict" tools; without it the 135M model writes unbounded JSON.
    strict = copy.deepcopy(WEATHER_TOOL)
    strict["function"]["strict"] = True
    strict["function"]["parameters"]["additionalProperties"] = False
    with ApiClient(smol_server.base_url, timeout=120) as api:
        res = api.chat(
            "smollm2", ASK_WEATHER, tools=[strict], tool_choice="required", max_tokens=100, temperature=0.0
        )
    assert res.finish_reason == "tool_calls"
    assert [c.name for c in res.tool_calls] == ["get_weather"]
    assert json.loads(res.tool_calls[0].arguments).get("location")
