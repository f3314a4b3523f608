"""The real-vLLM test models do what the other tests rely on (served by vLLM's CPU build)."""

from __future__ import annotations

import copy
import json
from typing import Any

from vllm_station.api import ApiClient, collect_stream
from vllm_station.api.checks import WEATHER_TOOL  # the models must handle the very tool smoke sends

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


# The SmolLM2 build differs between machines (its greedy answer to a question is one build's wording: a
# build elsewhere answered "L'Étoile, la Marseillaise, …" to "What is the capital of France?"), so these
# tests ask what any sensible language model does, measured from its own log-probabilities.
SENSIBLE = "The capital of France is Paris. It is a large city on the river Seine."


def _prompt_logprobs(api: ApiClient, text: str) -> list[float]:
    """The model's log-probability of each token of `text` after the first (vLLM's `echo` + `logprobs`)."""
    body = {"model": "smollm2", "prompt": text, "max_tokens": 1, "temperature": 0.0}
    body |= {"echo": True, "logprobs": 0}
    obj = api.post_json("/v1/completions", body)
    values = obj["choices"][0]["logprobs"]["token_logprobs"]
    return [float(v) for v in values[1:-1] if v is not None]  # the echoed prompt, without the new token


def _scrambled(text: str) -> str:
    words = text.split()
    return " ".join(words[i] for i in [*range(1, len(words), 2), *range(0, len(words), 2)])


def test_smollm2_prefers_sense_to_the_same_words_scrambled(smol_server: Any) -> None:
    """A trained model finds a sentence far likelier than its own words in another order; a broken build
    (random or mis-converted weights) finds both about as likely. 10 nats is a factor of e^10 ≈ 22,000."""
    with ApiClient(smol_server.base_url, timeout=120) as api:
        sense = _prompt_logprobs(api, SENSIBLE)
        nonsense = _prompt_logprobs(api, _scrambled(SENSIBLE))
    assert len(sense) >= 10 and len(nonsense) >= 10
    print(f"smollm2: {sum(sense):.1f} nats in order, {sum(nonsense):.1f} scrambled")  # measured -44.0, -130.5
    assert sum(sense) > sum(nonsense) + 10, (sum(sense), sum(nonsense))


def test_smollm2_knows_the_capital_of_france(smol_server: Any) -> None:
    """Scored, not generated: which of five capitals the model finds likeliest after the same words (measured:
    Paris −15.6 nats, the next, London, −19.9), whatever its greedy answer's wording."""
    cities = ["Paris", "London", "Berlin", "Madrid", "Rome"]
    with ApiClient(smol_server.base_url, timeout=120) as api:
        scores = {c: sum(_prompt_logprobs(api, f"The capital of France is {c}.")) for c in cities}
    assert max(scores, key=lambda c: scores[c]) == "Paris", scores


def test_smollm2_answers_a_question_in_words(smol_server: Any) -> None:
    with ApiClient(smol_server.base_url, timeout=120) as api:
        assert [m.id for m in api.models()] == ["smollm2"]
        q = [{"role": "user", "content": "What is the capital of France?"}]
        res = api.chat("smollm2", q, max_tokens=16, temperature=0.0)
    assert res.content and res.content.strip(), "an empty answer"
    letters = sum(ch.isalpha() for ch in res.content)
    assert letters >= len(res.content.strip()) / 2, f"not prose: {res.content!r}"
    assert res.usage is not None and 0 < res.usage.completion_tokens <= 16


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
