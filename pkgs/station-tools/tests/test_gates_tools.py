"""`station gates tools` against `station simulate --gates reference` (a correct deployment), the checker on
hand-made answers, and the battery's data (counts per category, validation of broken case files)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from simserver import SimServer

from vllm_station.api import ApiClient, ToolCall
from vllm_station.batteries import classes as C
from vllm_station.batteries.cases import ExpectedCall, load_tool_cases
from vllm_station.batteries.match import matches
from vllm_station.cli import main
from vllm_station.commands.gates.checker import Answer, ast_check, leak_check, stream_check
from vllm_station.commands.gates.common import Sampling
from vllm_station.commands.gates.tools import run_battery
from vllm_station.errors import UsageError
from vllm_station.sim.config import SimConfig

CATEGORIES = {
    "simple": 9,
    "multiple": 4,
    "parallel": 3,
    "parallel_multiple": 3,
    "irrelevance": 4,
    "tool_choice": 4,
    "zero_arg": 4,
    "hard_strings": 5,
    "multi_turn": 4,
}


@pytest.fixture(scope="module")
def reference() -> Iterator[SimServer]:
    with SimServer(SimConfig(gates="reference", ttft=0, itl=0, model="glm-sim")) as s:
        yield s


def test_battery_counts_per_category() -> None:
    cases = load_tool_cases()
    assert Counter(c.category for c in cases) == CATEGORIES
    assert len(cases) >= 38  # the recipe's go-live battery was 38 cases
    # every BFCL-style shape is there: typed simple arguments, tool_choice none/required/named
    types = {
        p.get("type")
        for c in cases
        if c.category == "simple"
        for p in c.schemas[c.calls[0].name]["properties"].values()
    }
    assert {"string", "integer", "number", "boolean", "array", "object"} <= types
    choices = {json.dumps(c.tool_choice) for c in cases}
    assert {'"none"', '"required"', '"auto"'} <= choices and any(
        isinstance(c.tool_choice, dict) for c in cases
    )


def test_reference_deployment_passes_every_case(reference: SimServer) -> None:
    with ApiClient(reference.base_url, timeout=30) as api:
        rep = run_battery(api, "glm-sim", load_tool_cases(), Sampling(), quiet=True)
    bad = [(r.id, [f.detail for f in r.failures]) for r in rep.results if not r.passed]
    assert bad == [] and rep.passed == rep.cases == 40 and rep.result == "pass"
    assert {k: v.passed for k, v in rep.by_category.items()} == CATEGORIES
    parallel = next(r for r in rep.results if r.id == "parallel-weather-3")
    assert len(parallel.calls["plain"]) == len(parallel.calls["stream"]) == 3


def test_cli_json_and_exit_code(reference: SimServer, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["gates", "tools", "--base-url", reference.base_url + "/v1", "--json", "--quiet",
                 "--category", "zero_arg", "--case", "zero-arg-alone"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = json.loads(captured.out)
    assert out["result"] == "pass" and out["gate"] == "tools" and out["model"] == "glm-sim"
    # --category and --case narrow together: the zero_arg case asked for
    assert [r["id"] for r in out["results"]] == ["zero-arg-alone"]
    assert out["by_category"] == {"zero_arg": {"cases": 1, "passed": 1}}


def case_file(tmp_path: Path, obj: dict[str, Any]) -> Path:
    p = tmp_path / "mine.json"
    p.write_text(json.dumps(obj))
    return p


OWN = {
    "category": "ops",
    "tools": {
        "restart_service": {
            "description": "Restart a systemd service",
            "parameters": {
                "type": "object",
                "properties": {"unit": {"type": "string"}, "force": {"type": "boolean"}},
                "required": ["unit"],
            },
        }
    },
    "cases": [
        {
            "id": "ops-restart",
            "prompt": "Restart the nginx service, please.",
            "tools": ["restart_service", "get_server_status"],
            "calls": [{"name": "restart_service",
                       "arguments": {"unit": ["nginx", "nginx.service"], "force": [None, False]}}],
        }
    ],
}  # fmt: skip


def test_operator_cases_with_their_own_tool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An operator's file adds a tool of its own and a case that uses it next to a shipped tool."""
    path = case_file(tmp_path, OWN)
    cases = load_tool_cases([path], builtin=False)
    assert [c.id for c in cases] == ["ops-restart"] and cases[0].category == "ops"
    assert main(["gates", "list", "--cases", str(path)]) == 0
    assert "ops-restart" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c["cases"][0].update(tools=["nope"]), "unknown tools nope"),
        (
            lambda c: c["cases"][0]["calls"][0]["arguments"].update(unit=[3]),
            "violates restart_service's schema",
        ),
        (lambda c: c["cases"][0]["calls"][0]["arguments"].pop("unit"), "required parameter 'unit'"),
        (
            lambda c: c["cases"][0]["calls"][0]["arguments"].update(colour=["red"]),
            "has no parameter 'colour'",
        ),
        (lambda c: c["cases"][0].update(tool_choice="none"), "tool_choice none cannot expect calls"),
        (lambda c: c["cases"][0].update(results={"restart_service": {}}), 'needs "answer" facts'),
        (
            lambda c: c["cases"][0].update(
                results={"restart_service": {}}, answer=[["done"]], reference_answer="ok"
            ),
            "does not state the fact",
        ),
        (lambda c: c["cases"].append(dict(c["cases"][0], id="ops-2")), "repeats the prompt"),
    ],
)
def test_broken_case_files_are_usage_errors(tmp_path: Path, edit: Any, message: str) -> None:
    obj = json.loads(json.dumps(OWN))
    edit(obj)
    with pytest.raises(UsageError, match=r"mine\.json: case 'ops-") as err:
        load_tool_cases([case_file(tmp_path, obj)], builtin=False)
    assert message in str(err.value)


def test_broken_file_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["gates", "tools", "--base-url", "http://127.0.0.1:9", "--cases", str(bad)]) == 2
    assert "bad.json: not valid JSON" in capsys.readouterr().err


def test_unreachable_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    from faultserver import free_port

    code = main(["gates", "tools", "--base-url", f"http://127.0.0.1:{free_port()}", "--timeout", "5"])
    assert code == 3 and "connection refused" in capsys.readouterr().err


# ---- the checker on hand-made answers -------------------------------------------------------------

WEATHER = ExpectedCall("get_weather", {"location": ["Paris", "Paris, France"], "unit": [None, "celsius"]})
SCHEMAS = {c.calls[0].name: c.schemas[c.calls[0].name] for c in load_tool_cases() if c.id == "simple-string"}


def call(name: str, args: str, index: int = 0) -> ToolCall:
    return ToolCall(index, f"id{index}", "function", name, args)


@pytest.mark.parametrize(
    ("args", "cls"),
    [
        ('{"location": "paris, FRANCE"}', None),  # normalised strings
        ('{"location": "Paris", "unit": "celsius"}', None),
        ('{"location": "Lyon"}', C.WRONG_VALUE),
        ('{"unit": "celsius"}', C.MISSING_PARAM),
        ('{"location": "Paris", "days": 3}', C.UNEXPECTED_PARAM),
        ('{"location": 75}', C.WRONG_TYPE),
        ('{"location": "Paris", "unit": "kelvin"}', C.WRONG_TYPE),  # not in the schema's enum
        ('{"location": "Paris"', C.INVALID_ARGUMENTS),
        ('["Paris"]', C.INVALID_ARGUMENTS),
    ],
)
def test_ast_check_classes(args: str, cls: str | None) -> None:
    problems = ast_check([call("get_weather", args)], [WEATHER], SCHEMAS, exact=False)
    assert [p[0] for p in problems][:1] == ([cls] if cls else [])


def test_ast_check_calls() -> None:
    two = [WEATHER, ExpectedCall("get_weather", {"location": ["Rome"], "unit": [None]})]
    rome, paris = (
        call("get_weather", '{"location": "Rome"}', 0),
        call("get_weather", '{"location": "Paris"}', 1),
    )
    assert ast_check([rome, paris], two, SCHEMAS, False) == []  # any order
    assert [p[0] for p in ast_check([paris], two, SCHEMAS, False)] == [C.WRONG_COUNT]
    assert [p[0] for p in ast_check([], [WEATHER], SCHEMAS, False)] == [C.NO_CALL]
    assert [p[0] for p in ast_check([paris], [], SCHEMAS, False)] == [C.UNEXPECTED_CALL]
    assert [p[0] for p in ast_check([call("get_time", "{}")], [WEATHER], SCHEMAS, False)] == [
        C.WRONG_FUNCTION
    ]


def test_exact_and_json_matchers() -> None:
    assert matches("Grüße", "Grüße", exact=True) and not matches("Grusse", "Grüße", exact=True)
    assert matches("line one\nline two", "line one\nline two", exact=True)
    assert not matches("line one line two", "line one\nline two", exact=True)
    assert matches('{"b":[1,2],"a":"x"}', {"$json": {"a": "x", "b": [1, 2]}})
    assert not matches('{"a":"x"}', {"$json": {"a": "x", "b": [1, 2]}})
    assert matches("AMD stock price", {"$match": "amd"}) and not matches("Intel", {"$match": "amd"})
    assert matches(2, 2.0) and not matches(True, 1) and not matches(1, True)


def stream(calls: list[ToolCall], frags: dict[int, list[str]], names: dict[int, int] | None = None,
           finish: str = "tool_calls", content: str | None = None) -> Answer:  # fmt: skip
    return Answer("stream", content=content, calls=calls, finish_reason=finish,
                  name_deltas=names or {c.index: 1 for c in calls}, fragments=frags)  # fmt: skip


def test_stream_check_classes() -> None:
    args = '{"location": "Paris"}'
    plain = Answer("plain", calls=[call("get_weather", args)], finish_reason="tool_calls")
    ok = stream([call("get_weather", args)], {0: ['{"location"', ': "Paris"}']})
    assert stream_check(plain, ok, [WEATHER], SCHEMAS) == []
    # the last fragment repeats everything: cumulative
    cum = stream([call("get_weather", '{"location"' + args)], {0: ['{"location"', args]})
    assert [p[0] for p in stream_check(plain, cum, [WEATHER], SCHEMAS)] == [C.CUMULATIVE_DELTA]
    # `{}` instead of the arguments, or appended to them
    flushed = stream([call("get_weather", "{}")], {0: ["{}"]})
    assert [p[0] for p in stream_check(plain, flushed, [WEATHER], SCHEMAS)] == [C.EMPTY_ARGS_FLUSHED]
    appended = stream([call("get_weather", args + "{}")], {0: [args, "{}"]})
    assert [p[0] for p in stream_check(plain, appended, [WEATHER], SCHEMAS)] == [C.EMPTY_ARGS_FLUSHED]
    # the name sent twice (the client joins the pieces), or cut
    twice = stream([call("get_weather", args)], {0: [args]}, names={0: 2})
    assert [p[0] for p in stream_check(plain, twice, [WEATHER], SCHEMAS)] == [C.WRONG_STREAM_NAME]
    cut = stream([call("get", args)], {0: [args]})
    assert [p[0] for p in stream_check(plain, cut, [WEATHER], SCHEMAS)] == [C.WRONG_STREAM_NAME]
    # a tool the model made up, the same both ways: the model's choice (the AST check's), not the stream's
    made_up = Answer("plain", calls=[call("get_email", args)], finish_reason="tool_calls")
    assert stream_check(made_up, stream([call("get_email", args)], {0: [args]}), [WEATHER], SCHEMAS) == []
    alone = stream_check(None, stream([call("get_email", args)], {0: [args]}), [WEATHER], SCHEMAS)
    assert [p[0] for p in alone] == [C.WRONG_STREAM_NAME]
    # a zero-argument call that never arrives
    date = Answer("plain", calls=[call("get_current_date", "{}")], finish_reason="tool_calls")
    dropped = stream([], {})
    zero = ExpectedCall("get_current_date", {})
    assert [p[0] for p in stream_check(date, dropped, [zero], {"get_current_date": {}})] == [
        C.ZERO_ARG_DROPPED
    ]
    # other disagreements
    lyon = stream([call("get_weather", '{"location": "Lyon"}')], {0: ['{"location": "Lyon"}']})
    assert [p[0] for p in stream_check(plain, lyon, [WEATHER], SCHEMAS)] == [C.STREAM_MISMATCH]


def test_leak_check() -> None:
    thought = "The user wants the weather in Paris, so I call get_weather."
    clean = Answer("plain", content="It is sunny.", reasoning=thought)
    assert leak_check(clean, [thought]) == []
    marker = Answer("stream", content="ok</think>It is sunny.")
    assert [p[0] for p in leak_check(marker, [])] == [C.REASONING_IN_CONTENT]
    text = Answer("stream", content=thought + " It is sunny.")
    assert [p[0] for p in leak_check(text, [thought])] == [C.REASONING_IN_CONTENT]
    args = Answer("plain", calls=[call("get_weather", json.dumps({"location": thought + " Paris"}))])
    assert [p[0] for p in leak_check(args, [thought])] == [C.REASONING_IN_ARGUMENTS]
    short = Answer("plain", content="Yes. It is sunny.")
    assert leak_check(short, ["Yes."]) == []  # too short to call a leak
