"""`station gates` against real vLLM (CPU build) serving the test models: the batteries and the needle
mechanics run end to end on real servers, real parsers and real tokenizers.

The servers are the session's shared ones (conftest: `tools_server`, the tiny tool model behind the hermes
parser; `smol_server`, SmolLM2-135M). The tiny model was trained to call get_weather, get_time,
get_stock_price, search_web and send_email from phrasings like the battery's (tests/realvllm/tiny_data.py)
and nothing else: it passes those cases and fails the rest, each failure with a class and a reason. The
counts are printed (pytest -s) and pinned below, so a change in the gates' judgement shows.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from vllm_station.api import ApiClient
from vllm_station.batteries import classes as C
from vllm_station.batteries.cases import load_tool_cases
from vllm_station.batteries.needles import parse_lengths
from vllm_station.batteries.tasks import load_agent_tasks
from vllm_station.commands.gates import agent, needle, tools
from vllm_station.commands.gates.common import Sampling

pytestmark = pytest.mark.realvllm

SHORT = Sampling(max_tokens=96)  # the tiny model's calls are short; its wrong answers must not run long


def _print(text: str) -> None:
    print("\n" + text)


def test_tool_battery_on_tiny_tools(tools_server: Any) -> None:
    with ApiClient(tools_server.base_url, timeout=120) as api:
        rep = tools.run_battery(api, "tiny-tools", load_tool_cases(), SHORT, quiet=True)
    _print(tools.render(rep))
    results = {r.id: r for r in rep.results}
    assert rep.cases == len(results) == 40
    # every case ran both ways on the real server, and every failure is classified with a reason
    assert all(set(r.latency_s) >= {"plain", "stream"} for r in rep.results)
    for r in rep.results:
        assert all(f.cls in C.DESCRIPTIONS and f.detail for f in r.failures), r
    assert C.REQUEST_FAILED not in rep.by_class
    # what it was trained for passes: one call of one of its five tools from a phrasing it has seen, a
    # text answer with tool_choice none, the named function; nothing else does (measured: 6 of 40)
    passed = {i for i, r in results.items() if r.passed}
    assert passed == {"simple-string", "multiple-weather", "multiple-time", "tool-choice-none",
                      "tool-choice-required", "tool-choice-named"}, passed  # fmt: skip
    # what it was not: tools it never saw, several calls in one answer, text where a tool is offered
    for never in ("simple-nested-object", "parallel-weather-3", "zero-arg-alone", "irrelevance-poem"):
        assert not results[never].passed
    assert results["parallel-weather-3"].classes[0] in (C.WRONG_COUNT, C.WRONG_VALUE)
    assert results["irrelevance-poem"].classes == [C.UNEXPECTED_CALL]
    # hermes streams what it parses: no serving fault on a real, correct parser
    assert not set(rep.by_class) & set(C.SERVING_FAULTS), rep.by_class


def test_agent_loop_on_tiny_tools(tools_server: Any) -> None:
    tasks = load_agent_tasks()
    with ApiClient(tools_server.base_url, timeout=120) as api:
        rep = agent.run_battery(api, "tiny-tools", tasks, SHORT, max_turns=3, quiet=True)
    _print(agent.render(rep))
    assert rep.tasks == 15 and len(rep.results) == 15 and set(rep.pass_hat) == {"pass^1"}
    classes = Counter(cls for r in rep.results for t in r.trials for cls in t.classes)
    assert C.REQUEST_FAILED not in classes and not set(classes) & set(C.SERVING_FAULTS)
    # The tiny model never saw these tools: it answers in (broken) prose at once and changes nothing. Every
    # trial is judged on the environment's real final state and on its answer (measured: 0 of 15).
    assert rep.passed == 0 and rep.pass_hat == {"pass^1": 0.0}
    for t in (t for r in rep.results for t in r.trials):
        assert t.turns >= 1 and t.classes == [C.STATE_MISMATCH, C.ANSWER_MISSING_FACTS], t
        assert "(expected " in t.failures[0]["detail"]


@pytest.mark.parametrize(
    ("server", "lengths", "variants"),
    [
        # near the small context (1,740 of 2,048 tokens); the tool variant counted with its tool rendered
        ("tools_server", "85%", ["single", "multikey", "tool"]),
        ("smol_server", "10%", ["single"]),  # SmolLM2's BPE and chat template; its CPU prefill is slow
    ],
)
def test_needle_mechanics_at_the_small_context(
    server: str, lengths: str, variants: list[str], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    srv = request.getfixturevalue(server)
    with ApiClient(srv.base_url, timeout=300) as api:
        mml = api.models()[0].max_model_len
        assert mml == 2048
        cases = needle.plan(parse_lengths(lengths, mml), [50], variants)
        rep = needle.run_battery(api, srv.served_name, cases, Sampling(max_tokens=32), max_model_len=mml,
                                 cache=tmp_path / "cal.json", quiet=True)  # fmt: skip
    _print(needle.render(rep))
    # a real BPE tokenizer and chat template: the prompts are exactly as long as asked, as the server
    # counted them for the request itself (usage.prompt_tokens)
    assert [r.prompt_tokens for r in rep.results] == [r.length for r in rep.results]
    assert all(r.exact for r in rep.results)
    assert rep.calibration["source"] == "measured" and rep.tokenize_calls <= 2 + 3 * len(cases)
    assert all(r.ttft_s and r.prefill_tok_s and r.wall_s for r in rep.results)
    assert all(r.retrieved or r.cls in (C.NEEDLE_MISSED, C.LONG_CONTEXT) for r in rep.results)
