"""Mutants of `vllm_station.commands.gates.needle` (scripts/bench-mutation): a model that answers with a
distractor's value misses the needle (multikey: four needles in the haystack, one asked for), the judge's
verdict and details as literals, the tool variant's number, lengths and depths exactly on their bounds."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from faultserver import FaultServer, Reply, Request, SseReply, chat_chunks
from simserver import SimServer

from vllm_station.api import ApiClient, ToolCall
from vllm_station.batteries.needles import parse_depths, parse_lengths
from vllm_station.commands.gates.common import Sampling
from vllm_station.commands.gates.needle import (
    Needle,
    NeedleCase,
    NeedleResult,
    _judge,
    classify,
    plan,
    render,
    run_battery,
)
from vllm_station.errors import UsageError
from vllm_station.sim.config import SimConfig

MML = 20_000
NEEDLE_RE = re.compile(r"The special magic number for ([a-z]+-[a-z]+) is (\d{7})\.")
ASKED_RE = re.compile(r"special magic number for ([a-z]+-[a-z]+) mentioned")


class Distracted:
    """A model that reads the haystack and answers with the number of another key than the one asked for
    (the distractor): the reference simulator counts the prompts (/tokenize), this proxy answers."""

    def __init__(self, sim: SimServer, how: str) -> None:
        self.sim, self.how = sim, how
        self.answered: list[tuple[str, str, str, str]] = []  # (asked key, its value, other key, its value)
        self.srv = FaultServer({("POST", "/v1/chat/completions"): self._answer,
                                ("POST", "/tokenize"): self._forward})  # fmt: skip

    def _forward(self, req: Request) -> Reply:
        r = httpx.post(self.sim.base_url + req.path, content=req.body, timeout=30,
                       headers={"content-type": "application/json"})  # fmt: skip
        return Reply(status=r.status_code, json=r.json())

    def _answer(self, req: Request) -> SseReply:
        body = json.loads(req.body)
        text = "\n".join(str(m.get("content") or "") for m in body["messages"])
        needles = dict(NEEDLE_RE.findall(text))
        asked = ASKED_RE.findall(text)[-1]
        other = next(k for k in needles if k != asked)
        self.answered.append((asked, needles[asked], other, needles[other]))
        number = needles[other] if self.how == "distractor" else needles[asked]
        return SseReply(events=chat_chunks(body["model"], content=f"{int(number):,}"))


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(SimConfig(gates="reference", ttft=0, itl=0, max_model_len=MML, model="glm-sim")) as s:
        yield s


def needles_run(sim: SimServer, how: str) -> tuple[Any, Distracted]:
    proxy = Distracted(sim, how)
    proxy.srv.start()
    try:
        with ApiClient(proxy.srv.url, timeout=60) as api:
            rep = run_battery(api, "glm-sim", plan([4000], [50], ["multikey"]), Sampling(max_tokens=64),
                              max_model_len=MML, cache=None, quiet=True)  # fmt: skip
    finally:
        proxy.srv.stop()
    return rep, proxy


def test_the_distractors_value_is_a_miss(sim: SimServer) -> None:
    rep, proxy = needles_run(sim, "distractor")
    (_asked, value, other, other_value), = proxy.answered
    assert value != other_value
    r = rep.results[0]
    assert (r.id, r.retrieved, r.cls) == ("multikey-4000-d50", False, "needle_missed")
    assert r.detail == f"answered the number of the distractor {other} ({other_value}), not {value}"
    assert r.answer == f"{int(other_value):,}"
    assert (rep.passed, rep.cases, rep.result, rep.by_class) == (0, 1, "fail", {"needle_missed": 1})
    assert f"  multikey-4000-d50: needle_missed: {r.detail}" in render(rep).splitlines()
    assert render(rep).splitlines()[-1] == "FAIL: needles 0/1 (glm-sim, max_model_len 20,000)"


def test_the_asked_value_with_thousands_separators_is_retrieved(sim: SimServer) -> None:
    rep, proxy = needles_run(sim, "asked")
    (_asked, value, _, _), = proxy.answered
    r = rep.results[0]
    assert (r.retrieved, r.cls, r.detail) == (True, None, f"answered {value}")
    assert (rep.passed, rep.result, rep.by_class) == (1, "pass", {})
    assert render(rep).splitlines()[-1] == "PASS: needles 1/1 (glm-sim, max_model_len 20,000)"


MULTI = NeedleCase("multikey", 4000, 50)
FOUR = [Needle("amber-river", "1234567"), Needle("coral-falcon", "7654321"), Needle("ivory-comet", "2345678"),
        Needle("jade-summit", "8765432")]  # fmt: skip


@pytest.mark.parametrize(
    ("content", "verdict"),
    [
        ("1234567", (True, "answered 1234567")),
        ("The number is 1,234,567.", (True, "answered 1234567")),
        ("1 234 567", (True, "answered 1234567")),
        ("8765432", (False, "answered the number of the distractor jade-summit (8765432), not 1234567")),
        ("7654321", (False, "answered the number of the distractor coral-falcon (7654321), not 1234567")),
        ("  no idea  ", (False, "expected 1234567; answered 'no idea'")),
        ("123456", (False, "expected 1234567; answered '123456'")),
    ],
)
def test_judge_text_answers(content: str, verdict: tuple[bool, str]) -> None:
    assert _judge(MULTI, FOUR, content, []) == verdict


def call(name: str, arguments: str) -> ToolCall:
    return ToolCall(0, "call_0", "function", name, arguments)


TOOL = NeedleCase("tool", 4000, 50)


@pytest.mark.parametrize(
    ("calls", "verdict"),
    [
        ([call("record_number", '{"key": "amber-river", "number": 1234567}')],
         (True, "record_number(amber-river, 1234567)")),
        ([call("record_number", '{"key": "amber-river", "number": "1234567"}')],
         (True, "record_number(amber-river, 1234567)")),
        ([call("note", "{}"), call("record_number", '{"number": 1234567}')],
         (True, "record_number(amber-river, 1234567)")),
        ([call("record_number", '{"key": "amber-river", "number": 7654321}')],
         (False, 'expected record_number with 1234567; got record_number({"key": "amber-river", "number": '
                 "7654321})")),
        ([call("record_numbers", '{"number": 1234567}')],
         (False, 'expected record_number with 1234567; got record_numbers({"number": 1234567})')),
        ([call("record_number", "{not json 1234567")],
         (False, "expected record_number with 1234567; got record_number({not json 1234567)")),
        ([], (False, "expected record_number with 1234567; got no call")),
    ],
)  # fmt: skip
def test_judge_tool_calls(calls: list[ToolCall], verdict: tuple[bool, str]) -> None:
    assert _judge(TOOL, FOUR[:1], "1234567", calls) == verdict


def test_judge_cuts_long_arguments_at_60_characters() -> None:
    args = '{"number": 1, "pad": "' + "x" * 100 + '"}'
    ok, detail = _judge(TOOL, FOUR[:1], "", [call("record_number", args)])
    assert not ok and detail == f"expected record_number with 1234567; got record_number({args[:60]})"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("64", [64]),  # the minimum length
        ("19999", [19999]),  # one below max_model_len
        ("1%", [200]),
        ("12.5%", [2500]),
        ("2k", [2048]),
        ("0.5k,64, 64", [64, 512]),
    ],
)
def test_lengths_exactly_on_their_bounds(text: str, expected: list[int]) -> None:
    assert parse_lengths(text, MML) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("63", "--lengths '63': write 90%, 128k or a token count"),
        ("20000", "--lengths '20000' = 20000 tokens: at least 64 and below max_model_len 20000"),
        ("0.3%", "--lengths '0.3%' = 60 tokens: at least 64 and below max_model_len 20000"),
        ("100%", "--lengths '100%': write 90%, 128k or a token count"),
        ("0%", "--lengths '0%': write 90%, 128k or a token count"),
        (",", "--lengths: give at least one length"),
    ],
)
def test_lengths_just_outside_their_bounds(text: str, message: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_lengths(text, MML)
    assert str(err.value) == message


def test_depths_exactly_on_their_bounds() -> None:
    assert parse_depths("0,100,50%,50") == [0, 50, 100]
    for bad, message in (
        ("-1", "--depths '-1': between 0 and 100"),
        ("101", "--depths '101': between 0 and 100"),
        ("x", "--depths 'x': a whole percentage 0–100"),
        ("", "--depths: give at least one depth"),
    ):
        with pytest.raises(UsageError) as err:
            parse_depths(bad)
        assert str(err.value) == message


def test_plan_only_single_needles_vary_in_depth() -> None:
    assert [c.id for c in plan([100, 200], [0, 100], ["single", "multikey", "tool"])] == [
        "single-100-d0", "single-100-d100", "multikey-100-d50", "tool-100-d50",
        "single-200-d0", "single-200-d100", "multikey-200-d50", "tool-200-d50",
    ]  # fmt: skip


def test_classify_leaves_a_failed_request_as_it_is() -> None:
    def res(length: int, ok: bool, cls: str | None) -> NeedleResult:
        return NeedleResult(f"single-{length}-d50", "single", length, 50, ok, cls, "", length, True, 1, 0.0,
                            1.0, 1.0, 1.0)  # fmt: skip

    rs = [res(1000, True, None), res(8000, False, "request_failed"), res(9000, False, "needle_missed")]
    classify(rs)
    assert [r.cls for r in rs] == [None, "request_failed", "long_context"]


def test_judge_names_every_call_and_cuts_a_long_answer() -> None:
    calls = [call("note", '{"a": 1}'), call("record_number", '{"number": 7654321}')]
    assert _judge(TOOL, FOUR[:1], "", calls) == (
        False,
        'expected record_number with 1234567; got note({"a": 1}), record_number({"number": 7654321})',
    )
    long = "x" * 79 + "yz"
    assert _judge(MULTI, FOUR, long, []) == (False, f"expected 1234567; answered {long[:80]!r}")
