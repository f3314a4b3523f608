"""Mutants of the tools gate's checkers (`vllm_station.commands.gates.checker`, `.match`;
scripts/bench-mutation): a call against its expected call, value by value, the reasoning-leak threshold
exactly on its 16 characters, the stream against the non-streamed answer, and the failure-class names pinned
as literals (the one place tests see them as text: every other test may use `gates.classes`, see
test_architecture_literals.py)."""

from __future__ import annotations

import pytest

from vllm_station.api import ToolCall
from vllm_station.batteries import classes
from vllm_station.batteries.cases import ExpectedCall
from vllm_station.batteries.match import contains_fact, matches, normalize
from vllm_station.commands.gates.checker import (
    Answer,
    ast_check,
    check_call,
    leak_check,
    stream_check,
    text_check,
)


def test_the_failure_class_names() -> None:
    """What reports, pages and alerts show: a renamed class is a changed interface, not a refactoring."""
    names = {k: v for k, v in vars(classes).items() if k.isupper() and isinstance(v, str)}
    assert names == {
        "ZERO_ARG_DROPPED": "zero_arg_dropped", "EMPTY_ARGS_FLUSHED": "empty_args_flushed",
        "CUMULATIVE_DELTA": "cumulative_delta", "WRONG_STREAM_NAME": "wrong_stream_name",
        "REASONING_IN_CONTENT": "reasoning_in_content", "REASONING_IN_ARGUMENTS": "reasoning_in_arguments",
        "LONG_CONTEXT": "long_context", "STREAM_CALL_DROPPED": "stream_call_dropped",
        "STREAM_MISMATCH": "stream_mismatch", "NO_CALL": "no_call", "UNEXPECTED_CALL": "unexpected_call",
        "WRONG_FUNCTION": "wrong_function", "WRONG_COUNT": "wrong_count",
        "INVALID_ARGUMENTS": "invalid_arguments", "MISSING_PARAM": "missing_param",
        "UNEXPECTED_PARAM": "unexpected_param", "WRONG_TYPE": "wrong_type", "WRONG_VALUE": "wrong_value",
        "NO_ANSWER": "no_answer", "ANSWER_MISSING_FACTS": "answer_missing_facts",
        "STATE_MISMATCH": "state_mismatch", "TURN_LIMIT": "turn_limit", "NEEDLE_MISSED": "needle_missed",
        "REQUEST_FAILED": "request_failed",
    }  # fmt: skip
    assert classes.SERVING_FAULTS == (
        "zero_arg_dropped", "empty_args_flushed", "cumulative_delta", "wrong_stream_name",
        "reasoning_in_content", "reasoning_in_arguments", "long_context",
    )  # fmt: skip
    assert set(classes.DESCRIPTIONS) == set(names.values())


WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "integer"}},
    "required": ["city"],
    "additionalProperties": False,
}  # fmt: skip
EXP = ExpectedCall("get_weather", {"city": ["Paris", "Paris, France"], "unit": ["celsius", None]})


def call(arguments: str, name: str = "get_weather", index: int = 0) -> ToolCall:
    return ToolCall(index, f"call_{index}", "function", name, arguments)


@pytest.mark.parametrize(
    ("arguments", "problems"),
    [
        ('{"city": "Paris"}', []),
        ('{"city": "paris, france", "unit": "celsius"}', []),
        ('{"city": "Lyon"}',
         [("wrong_value", 'get_weather: city="Lyon", accepted: ["Paris", "Paris, France"]')]),
        ('{"unit": "celsius"}', [("missing_param", "get_weather: 'city' is a required property")]),
        ('{"city": 7}', [("wrong_type", "get_weather: city: 7 is not of type 'string'")]),
        ('{"city": "Paris", "days": 3}',
         [("unexpected_param", "get_weather: unexpected parameter 'days'=3")]),
        ("[1]", [("invalid_arguments", "get_weather arguments are a JSON list, not an object: '[1]'")]),
    ],
)  # fmt: skip
def test_check_call_value_by_value(arguments: str, problems: list[tuple[str, str]]) -> None:
    assert check_call(call(arguments), EXP, WEATHER, False) == problems


def test_check_call_exact_compares_strings_as_they_are() -> None:
    assert check_call(call('{"city": "paris"}'), EXP, WEATHER, True) == [
        ("wrong_value", 'get_weather: city="paris", accepted: ["Paris", "Paris, France"]')
    ]
    assert check_call(call('{"city": "Paris"}', name="get_time"), EXP, WEATHER, False) == [
        ("wrong_function", "called 'get_time', expected 'get_weather'")
    ]


def test_ast_check_counts_and_order() -> None:
    schemas = {"get_weather": WEATHER}
    two = [EXP, ExpectedCall("get_weather", {"city": ["Rome"]})]
    rome, paris = call('{"city": "Rome"}', index=1), call('{"city": "Paris"}')
    assert ast_check([rome, paris], two, schemas, False) == []  # any order
    assert ast_check([paris], two, schemas, False) == [
        ("wrong_count", "1 calls (get_weather); expected 2 (get_weather, get_weather)")
    ]
    assert ast_check([], two, schemas, False) == [
        ("no_call", "no tool call; expected get_weather, get_weather")
    ]
    assert ast_check([paris], [], schemas, False) == [
        ("unexpected_call", "called get_weather; no call expected")
    ]
    assert ast_check([], [], schemas, False) == []


def test_leak_threshold_exactly_on_sixteen_characters() -> None:
    sixteen, fifteen = "I think it's 42.", "I think it's 42"
    assert (len(sixteen), len(fifteen)) == (16, 15)
    assert leak_check(Answer("plain", content=f"Answer: {sixteen}"), [sixteen]) == [
        ("reasoning_in_content", f"content holds reasoning {sixteen!r}")
    ]
    assert leak_check(Answer("plain", content=f"Answer: {fifteen}"), [fifteen]) == []
    assert leak_check(Answer("plain", content="<think>x"), []) == [
        ("reasoning_in_content", "content holds reasoning '<think>'")
    ]
    leaked = Answer("plain", calls=[call(f'{{"city": "Paris {sixteen}"}}')])
    assert leak_check(leaked, [sixteen]) == [
        ("reasoning_in_arguments", f"get_weather arguments hold reasoning {sixteen!r}")
    ]


def test_text_check_needs_every_fact() -> None:
    ans = Answer("plain", content="It is 21 degrees in Paris.")
    assert text_check(ans, [["21"], ["Paris", "Paname"]]) == []
    assert text_check(ans, [["21"], ["Lyon"]]) == [
        ("answer_missing_facts", "the answer lacks Lyon: 'It is 21 degrees in Paris.'")
    ]
    assert text_check(Answer("plain", content="  ", finish_reason="stop"), [["21"]]) == [
        ("no_answer", "no text answer; finish_reason=stop")
    ]


def streamed(*calls: ToolCall, names: int = 1, finish: str = "tool_calls",
             fragments: dict[int, list[str]] | None = None) -> Answer:  # fmt: skip
    return Answer("stream", calls=list(calls), finish_reason=finish,
                  name_deltas={c.index: names for c in calls}, fragments=fragments or {})  # fmt: skip


def test_stream_check_against_the_plain_answer() -> None:
    schemas = {"get_weather": WEATHER, "get_time": {"type": "object", "properties": {}}}
    plain = Answer("plain", calls=[call('{"city": "Paris"}')])
    assert stream_check(plain, streamed(call('{"city": "Paris"}')), [EXP], schemas) == []
    assert stream_check(plain, streamed(call('{"city": "Paris"}'), names=2), [EXP], schemas) == [
        ("wrong_stream_name", "call 0: the name arrived in 2 chunks ('get_weather'); expected once")
    ]
    assert stream_check(plain, streamed(call('{"city": "Rome"}')), [EXP], schemas) == [
        ("stream_mismatch",
         """get_weather: streamed arguments '{"city": "Rome"}', non-streamed '{"city": "Paris"}'""")
    ]
    assert stream_check(plain, streamed(), [EXP], schemas) == [
        ("stream_call_dropped",
         "the stream ended with finish_reason tool_calls but no delta.tool_calls (non-streamed: get_weather)")
    ]  # fmt: skip
    zero = Answer("plain", calls=[call("{}", name="get_time")])
    assert stream_check(zero, streamed(), [], schemas) == [
        ("zero_arg_dropped",
         "the stream ended with finish_reason tool_calls but no delta.tool_calls (non-streamed: get_time)")
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("actual", "accepted", "exact", "result"),
    [
        ("Lisbon, Portugal", "lisbon portugal", False, True),
        ("Lisbon, Portugal", "lisbon portugal", True, False),
        (3, 3.0, False, True),
        (True, 1, False, False),
        (1, True, False, False),
        ("x", None, False, False),
        (None, None, False, True),
        ([1, 2], [1, 2, 3], False, False),
        ({"a": 1}, {"a": 1, "b": 2}, False, False),
        ("2026-03-02", {"$match": "^2026-03-0[0-9]$"}, False, True),
        ('{"a": "X"}', {"$json": {"a": "x"}}, False, False),
        ('{"a": "x"}', {"$json": {"a": "x"}}, False, True),
    ],
)
def test_matches(actual: object, accepted: object, exact: bool, result: bool) -> None:
    assert matches(actual, accepted, exact=exact) is result


def test_normalize_and_facts() -> None:
    assert normalize(" A-b_c.d,e/f*g^h'i\"j`k(l)m!n?o:p;q ") == "abcdefghijklmnopq"
    assert contains_fact("Paris, France", ["Lyon", "paris france"])
    assert not contains_fact("Paris", ["Paris, France"])
