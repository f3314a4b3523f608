"""Mutants of `station smoke` that survived the other tests (issue 17): the WARN for a tool call whose
finish_reason is not `tool_calls`, streamed and not. A well-formed call with the wrong finish_reason is a
WARN (the call is usable; the server's bookkeeping is off), never a PASS and never a FAIL (exit stays 0).
Real HTTP on 127.0.0.1 (faultserver).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from faultserver import (
    WEATHER_ARGS,
    FaultServer,
    Reply,
    Request,
    SseReply,
    chat_chunks,
    chat_completion,
    fake_chat,
    fake_openai_routes,
    free_port,
    models_list,
    tool_call,
)

from vllm_station.api.checks import CHECKS, CheckResult, error_kind, judge_tool_calls
from vllm_station.api.errors import (
    ApiError,
    ApiTimeout,
    ApiUnreachable,
    HttpStatusError,
    ProtocolError,
    StreamError,
)
from vllm_station.api.models import ToolCall
from vllm_station.api.urls import display_url
from vllm_station.cli import main
from vllm_station.commands.smoke.cli import configure, render
from vllm_station.commands.smoke.plan import SmokeReport

FRAGMENTS = -(-len(WEATHER_ARGS) // 7)  # chat_chunks sends the arguments 7 characters at a time


@pytest.fixture
def srv() -> Iterator[FaultServer]:
    with FaultServer(fake_openai_routes("fake")) as s:
        yield s


def smoke_args(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    """`station smoke --json ARGS…`: its exit code and its whole report."""
    code = main(["smoke", "--json", *args])
    rep: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert rep["exit_code"] == code
    return code, rep


def smoke(capsys: pytest.CaptureFixture[str], url: str) -> tuple[int, dict[str, dict[str, object]]]:
    code, rep = smoke_args(capsys, "--base-url", url)
    return code, {c["name"]: c for c in rep["checks"]}


def finish_as(stream_reason: str | None, plain_reason: str | None) -> object:
    """A chat route whose tool calls end with the given finish_reasons (None: the normal tool_calls)."""
    normal = fake_chat()

    def route(req: Request) -> object:
        body = req.json()
        if not body.get("tools"):
            return normal(req)
        if body.get("stream"):
            if stream_reason is None:
                return normal(req)
            calls = [("get_weather", WEATHER_ARGS)]
            return SseReply(chat_chunks("fake", calls=calls, finish_reason=stream_reason))
        if plain_reason is None:
            return normal(req)
        return Reply(json=chat_completion("fake", None, tool_calls=[tool_call()], finish_reason=plain_reason))

    return route


@pytest.mark.parametrize("reason", ["stop", "length"])
def test_streamed_tool_call_without_finish_reason_tool_calls_warns(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], reason: str
) -> None:
    srv.route("POST", "/v1/chat/completions", finish_as(reason, None))
    code, checks = smoke(capsys, srv.url)
    assert code == 0, "a WARN does not fail the smoke test"
    assert [checks[n]["result"] for n in CHECKS] == ["pass", "pass", "pass", "warn"]
    stream = checks["tool_call_stream"]
    assert stream["reason"] == (
        f"get_weather streamed in {FRAGMENTS + 4} chunks ({FRAGMENTS} argument fragments), same arguments as "
        f"the non-streamed call; finish_reason={reason}, expected tool_calls"
    )
    assert stream["details"]["finish_reason"] == reason  # type: ignore[index]
    assert stream["details"]["matches_non_streamed"] is True  # type: ignore[index]


def test_streamed_tool_call_with_finish_reason_tool_calls_passes(
    srv: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, checks = smoke(capsys, srv.url)
    assert code == 0 and checks["tool_call_stream"]["result"] == "pass"
    assert str(checks["tool_call_stream"]["reason"]).endswith(
        "same arguments as the non-streamed call; finish_reason=tool_calls"
    )


@pytest.mark.parametrize("reason", ["stop", "length"])
def test_plain_tool_call_without_finish_reason_tool_calls_warns(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], reason: str
) -> None:
    srv.route("POST", "/v1/chat/completions", finish_as(None, reason))
    code, checks = smoke(capsys, srv.url)
    assert code == 0
    assert [checks[n]["result"] for n in CHECKS] == ["pass", "pass", "warn", "pass"]
    plain = checks["tool_call"]
    assert str(plain["reason"]).endswith(f"; finish_reason={reason}, expected tool_calls")
    assert plain["details"]["arguments"] == {"location": "Paris", "unit": "celsius"}  # type: ignore[index]
    # the streamed call is still compared with the plain one: a WARN keeps its arguments
    assert checks["tool_call_stream"]["details"]["matches_non_streamed"] is True  # type: ignore[index]


# ---- the tool-call judge, every branch exactly (mutants the benchmark found: scripts/bench-mutation) ----


def _call(name: str | None = "get_weather", arguments: str = WEATHER_ARGS, type_: str | None = "function",
          index: int = 0) -> ToolCall:  # fmt: skip
    return ToolCall(index=index, id=f"call_{index}", type=type_, name=name, arguments=arguments)


@pytest.mark.parametrize(
    ("calls", "content", "ok", "reason"),
    [
        ([], None, False, "no tool call"),
        ([], "   ", False, "no tool call"),
        ([], "It is sunny in Paris.", False,
         "no tool call: the model answered in text: 'It is sunny in Paris.'"),
        ([_call(), _call("lookup", index=1)], None, False,
         "2 tool calls (get_weather, lookup); expected exactly one"),
        ([_call(type_="code")], None, False, "tool call type is 'code', expected 'function'"),
        ([_call(type_=None)], None, False, "tool call type is None, expected 'function'"),
        ([_call("get_time")], None, False, "tool call name is 'get_time', expected 'get_weather'"),
        ([_call(arguments='{"location": ')], None, False,
         "get_weather arguments are not valid JSON (JSONDecodeError: "
         "Expecting value: line 1 column 14 (char 13)): '{\"location\":'"),
        ([_call(arguments='["Paris"]')], None, False,
         "get_weather arguments are a JSON list, expected an object: '[\"Paris\"]'"),
        ([_call(arguments='{"location": "  "}')], None, False,
         "get_weather arguments have no non-empty 'location': '{\"location\": \" \"}'"),
        ([_call(arguments='{"location": 5}')], None, False,
         "get_weather arguments have no non-empty 'location': '{\"location\": 5}'"),
        ([_call(arguments='{"location": "Zürich"}')], "ok", True, 'get_weather({"location": "Zürich"})'),
    ],
)  # fmt: skip
def test_judge_tool_calls(calls: list[ToolCall], content: str | None, ok: bool, reason: str) -> None:
    verdict = judge_tool_calls(calls, content)
    assert (verdict.ok, verdict.reason) == (ok, reason)
    if ok or "non-empty 'location'" in reason:
        assert verdict.arguments == json.loads(calls[0].arguments)
    else:
        assert verdict.arguments is None


def test_error_kinds() -> None:
    url = "http://127.0.0.1:1/v1/x"
    assert error_kind(ApiUnreachable("down", kind="refused", url=url)) == "unreachable"
    assert error_kind(ApiTimeout("slow", url=url, timeout_s=1.0)) == "timeout"
    assert error_kind(HttpStatusError("HTTP 500", url=url, status=500, body="")) == "http"
    assert error_kind(StreamError("cut", url=url)) == "stream"
    assert error_kind(ProtocolError("bad", url=url)) == "protocol"
    assert error_kind(ApiError("other")) == "api"


def test_the_good_path_report_exactly(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, checks = smoke(capsys, srv.url)
    assert code == 0
    for c in checks.values():
        assert isinstance(c["latency_s"], float) and c["latency_s"] >= 0 and c["error"] is None
    usage = {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}
    args = {"location": "Paris", "unit": "celsius"}
    stream_reason = (
        f"get_weather streamed in {FRAGMENTS + 4} chunks ({FRAGMENTS} argument fragments), "
        "same arguments as the non-streamed call; finish_reason=tool_calls"
    )
    assert {n: (c["result"], c["reason"]) for n, c in checks.items()} == {
        "models": ("pass", "serves fake (the only model listed, max_model_len 2048)"),
        "chat": ("pass",
                 "'Hello from the fault server.'; finish_reason=stop, 12 prompt + 7 completion tokens"),
        "tool_call": ("pass",
                      'get_weather({"location": "Paris", "unit": "celsius"}); finish_reason=tool_calls'),
        "tool_call_stream": ("pass", stream_reason),
    }  # fmt: skip
    assert checks["models"]["details"] == {"models": ["fake"], "max_model_len": 2048}
    assert checks["chat"]["details"] == {
        "finish_reason": "stop", "usage": usage, "content_chars": 28, "reasoning_chars": 0,
    }  # fmt: skip
    assert checks["tool_call"]["details"] == {
        "finish_reason": "tool_calls", "usage": usage, "tool_calls": 1, "name": "get_weather",
        "arguments": args, "content_chars": 0,
    }  # fmt: skip
    stream = dict(checks["tool_call_stream"]["details"])  # type: ignore[call-overload]
    assert isinstance(stream.pop("first_chunk_s"), float)
    assert stream == {
        "finish_reason": "tool_calls",
        "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21},
        "tool_calls": 1, "name": "get_weather", "arguments": args, "content_chars": 0,
        "chunks": FRAGMENTS + 4, "name_deltas": 1, "argument_fragments": FRAGMENTS,
        "matches_non_streamed": True,
    }  # fmt: skip


def test_judge_cuts_what_it_quotes() -> None:
    text = "w" * 100
    assert judge_tool_calls([], text).reason == f"no tool call: the model answered in text: '{'w' * 59}…'"
    bad = "{" + "x" * 100
    assert judge_tool_calls([_call(arguments=bad)], None).reason.endswith(f": '{bad[:79]}…'")
    listed = json.dumps(["y" * 100])
    assert judge_tool_calls([_call(arguments=listed)], None).reason.endswith(f": '{listed[:79]}…'")
    nowhere = json.dumps({"unit": "z" * 100})
    assert judge_tool_calls([_call(arguments=nowhere)], None).reason.endswith(f": '{nowhere[:79]}…'")


def test_debug_log_of_the_tool_call_answer(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    args = json.dumps({"location": "P" * 500})
    answer = chat_completion("fake", None, tool_calls=[tool_call(arguments=args)])
    normal = fake_chat()
    srv.route("POST", "/v1/chat/completions",
              lambda req: Reply(json=answer) if req.json().get("tools") and not req.json().get("stream")
              else normal(req))  # fmt: skip
    caplog.set_level(logging.DEBUG, logger="vllm_station.api.checks")
    smoke(capsys, srv.url)
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tool_call answer: ")]
    assert logged == ["tool_call answer: " + json.dumps(answer)[:399] + "…"]
    sent = [r.json() for r in srv.requests if r.path == "/v1/chat/completions"]
    assert [b["model"] for b in sent] == ["fake", "fake", "fake"]


# ---- the streamed check's failure paths, exactly ----

HINT = (" — is vLLM's --tool-call-parser the one for this model's tool-call format? "
        "(--tool-choice required tests the model without the parser)")  # fmt: skip
STREAM_KEYS = ["finish_reason", "usage", "tool_calls", "name", "arguments", "content_chars", "chunks",
               "first_chunk_s", "name_deltas", "argument_fragments", "matches_non_streamed"]  # fmt: skip


def stream_as(chunks: list[dict[str, object]]) -> object:
    normal = fake_chat()
    return lambda req: SseReply(chunks) if req.json().get("stream") else normal(req)


def stream_check(srv: FaultServer, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    code = main(["smoke", "--json", "--base-url", srv.url, *extra])
    rep = json.loads(capsys.readouterr().out)
    check = {c["name"]: c for c in rep["checks"]}["tool_call_stream"]
    assert isinstance(check["latency_s"], float) and rep["exit_code"] == code
    assert list(check["details"]) == STREAM_KEYS
    return check  # type: ignore[no-any-return]


@pytest.mark.parametrize(("choice", "hint"), [("auto", HINT), ("required", "")])
def test_streamed_text_instead_of_a_call(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], choice: str, hint: str
) -> None:
    srv.route("POST", "/v1/chat/completions", stream_as(chat_chunks("fake", "It is sunny.")))
    check = stream_check(srv, capsys, "--tool-choice", choice)
    assert (check["result"], check["reason"]) == (
        "fail",
        f"streamed: no tool call: the model answered in text: 'It is sunny.' (finish_reason=stop){hint}",
    )
    details = check["details"]
    assert (details["tool_calls"], details["name_deltas"], details["argument_fragments"]) == (0, None, None)
    assert details["matches_non_streamed"] is None


def test_streamed_wrong_name_has_no_parser_hint(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    chunks = chat_chunks("fake", calls=[("get_time", WEATHER_ARGS)])
    srv.route("POST", "/v1/chat/completions", stream_as(chunks))
    check = stream_check(srv, capsys)
    assert check["reason"] == (
        "streamed: tool call name is 'get_time', expected 'get_weather' (finish_reason=tool_calls)")


def test_streamed_name_repeated(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    chunks = chat_chunks("fake", calls=[("get_weather", WEATHER_ARGS)])
    first = chunks[1]["choices"][0]["delta"]["tool_calls"][0]  # type: ignore[index]
    first["function"]["name"] = "get_"
    rest = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "weather"}}]},
                         "finish_reason": None}]}  # fmt: skip
    srv.route("POST", "/v1/chat/completions", stream_as([chunks[0], chunks[1], rest, *chunks[2:]]))
    check = stream_check(srv, capsys)
    assert check["result"] == "fail"
    assert check["reason"] == "the tool name arrived in 2 chunks, expected exactly once"
    assert check["details"]["name_deltas"] == 2  # type: ignore[index]


def test_streamed_arguments_compared(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    other = json.dumps({"location": "Lyon", "unit": "fahrenheit"})
    srv.route("POST", "/v1/chat/completions", stream_as(chat_chunks("fake", calls=[("get_weather", other)])))
    check = stream_check(srv, capsys)
    assert str(check["reason"]).startswith("get_weather streamed in ")
    assert "same keys as the non-streamed call (values of location, unit differ)" in str(check["reason"])
    extra = json.dumps({"location": "Paris", "when": "now"})
    srv.route("POST", "/v1/chat/completions", stream_as(chat_chunks("fake", calls=[("get_weather", extra)])))
    check = stream_check(srv, capsys)
    assert check["reason"] == (
        "streamed arguments have keys ['location', 'when'] but the non-streamed call had "
        "['location', 'unit']: " + extra
    )
    assert check["details"]["matches_non_streamed"] is False  # type: ignore[index]


def test_not_compared_when_the_plain_call_failed(
    srv: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    normal = fake_chat()

    def route(req: Request) -> object:
        body = req.json()
        if body.get("tools") and not body.get("stream"):
            return Reply(json=chat_completion("fake", "no call"))
        return normal(req)

    srv.route("POST", "/v1/chat/completions", route)
    check = stream_check(srv, capsys)
    assert str(check["reason"]).startswith("get_weather streamed in ")
    assert str(check["reason"]).endswith(
        ", not compared: the non-streamed call failed; finish_reason=tool_calls"
    )
    first = check["details"]["first_chunk_s"]  # type: ignore[index]
    assert isinstance(first, float) and round(first, 4) == first


def plain_as(answer: dict[str, object]) -> object:
    normal = fake_chat()

    def route(req: Request) -> object:
        body = req.json()
        return Reply(json=answer) if body.get("tools") and not body.get("stream") else normal(req)

    return route


@pytest.mark.parametrize(("choice", "hint"), [("auto", HINT), ("required", "")])
def test_plain_text_instead_of_a_call(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], choice: str, hint: str
) -> None:
    srv.route("POST", "/v1/chat/completions", plain_as(chat_completion("fake", "It is sunny.")))
    code = main(["smoke", "--json", "--base-url", srv.url, "--tool-choice", choice])
    check = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}["tool_call"]
    assert code == 1 and isinstance(check["latency_s"], float)
    assert check["reason"] == (
        f"no tool call: the model answered in text: 'It is sunny.' (finish_reason=stop){hint}"
    )
    assert check["details"]["tool_calls"] == 0 and list(check["details"]) == [
        "finish_reason", "usage", "tool_calls", "name", "arguments", "content_chars"]  # fmt: skip


def test_plain_wrong_name_has_no_parser_hint(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    answer = chat_completion("fake", None, tool_calls=[tool_call(name="get_time")])
    srv.route("POST", "/v1/chat/completions", plain_as(answer))
    main(["smoke", "--json", "--base-url", srv.url])
    check = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}["tool_call"]
    assert check["reason"] == (
        "tool call name is 'get_time', expected 'get_weather' (finish_reason=tool_calls)"
    )


def test_warnings_keep_their_latency(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route("POST", "/v1/chat/completions", finish_as("stop", "stop"))
    code, checks = smoke(capsys, srv.url)
    assert code == 0
    for name in ("tool_call", "tool_call_stream"):
        assert checks[name]["result"] == "warn" and isinstance(checks[name]["latency_s"], float)


# ---- the chat check: what it sends, and how it judges the answer --------------------------------------


def chat_as(answer: dict[str, object]) -> object:
    """A chat route answering the plain chat check (no tools) with `answer`; tool checks as normal."""
    normal = fake_chat()

    def route(req: Request) -> object:
        return normal(req) if req.json().get("tools") else Reply(json=answer)

    return route


def test_the_chat_request_exactly(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    smoke(capsys, srv.url)
    chat = next(r.json() for r in srv.requests if r.path == "/v1/chat/completions")
    assert chat == {
        "model": "fake", "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 64, "temperature": 0, "seed": 1234,
    }  # fmt: skip


def test_an_empty_answer_fails_the_chat_check(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route("POST", "/v1/chat/completions", chat_as(chat_completion("fake", "  \n", reasoning_content="")))
    code, checks = smoke(capsys, srv.url)
    assert code == 1
    chat = checks["chat"]
    assert (chat["result"], chat["error"]) == ("fail", None)
    assert chat["reason"] == (
        "empty answer: no content and no reasoning content; "
        "finish_reason=stop, 12 prompt + 7 completion tokens"
    )
    assert isinstance(chat["latency_s"], float)
    assert chat["details"] == {
        "finish_reason": "stop", "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
        "content_chars": 0, "reasoning_chars": 0,
    }  # fmt: skip
    assert [checks[n]["result"] for n in CHECKS] == ["pass", "fail", "pass", "pass"]


def test_what_the_chat_check_quotes_is_cut(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    long_text = "word " * 30  # 149 characters once stripped
    srv.route("POST", "/v1/chat/completions", chat_as(chat_completion("fake", long_text)))
    _, checks = smoke(capsys, srv.url)
    quoted = long_text.strip()[:49] + "…"
    assert checks["chat"]["reason"] == f"{quoted!r}; finish_reason=stop, 12 prompt + 7 completion tokens"
    thinking = chat_completion("fake", None, reasoning_content=long_text)
    srv.route("POST", "/v1/chat/completions", chat_as(thinking))
    _, checks = smoke(capsys, srv.url)
    chat = checks["chat"]
    quoted = long_text.strip()[:39] + "…"
    assert (chat["result"], chat["reason"]) == (
        "pass", f"reasoning only (149 chars): {quoted!r}; finish_reason=stop, 12 prompt + 7 completion tokens"
    )
    assert isinstance(chat["latency_s"], float)
    assert chat["details"] == {
        "finish_reason": "stop", "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
        "content_chars": 0, "reasoning_chars": 149,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("usage", "shown", "details"),
    [(None, "no usage", None),
     ({"completion_tokens": 7}, "? prompt + 7 completion tokens",
      {"prompt_tokens": None, "completion_tokens": 7, "total_tokens": None}),
     ({"prompt_tokens": 12}, "12 prompt + ? completion tokens",
      {"prompt_tokens": 12, "completion_tokens": None, "total_tokens": None})],
)  # fmt: skip
def test_usage_as_the_server_gives_it(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], usage: dict[str, int] | None, shown: str,
    details: dict[str, int | None] | None,
) -> None:  # fmt: skip
    answer = chat_completion("fake", "Hi.")
    if usage is None:
        del answer["usage"]
    else:
        answer["usage"] = usage
    srv.route("POST", "/v1/chat/completions", chat_as(answer))
    _, checks = smoke(capsys, srv.url)
    assert checks["chat"]["reason"] == f"'Hi.'; finish_reason=stop, {shown}"
    assert checks["chat"]["details"]["usage"] == details  # type: ignore[index]


# ---- failed and skipped checks keep their details' shape; the verdict line --------------------------


def test_failed_and_skipped_checks_have_the_details_of_their_kind(
    srv: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    normal = fake_chat()

    def no_chat(req: Request) -> object:
        if req.json().get("tools"):
            return normal(req)
        return Reply(status=500, json={"error": {"message": "boom"}})

    srv.route("POST", "/v1/chat/completions", no_chat)
    _, checks = smoke(capsys, srv.url)
    assert (checks["chat"]["result"], checks["chat"]["error"]) == ("fail", "http")
    assert checks["chat"]["details"] == {
        "finish_reason": None, "usage": None, "content_chars": 0, "reasoning_chars": 0,
    }  # fmt: skip
    srv.route("GET", "/v1/models", Reply(json={"object": "list", "data": []}))
    _, checks = smoke(capsys, srv.url)
    assert [checks[n]["result"] for n in CHECKS] == ["fail", "skip", "skip", "skip"]
    assert checks["chat"]["details"] == {
        "finish_reason": None, "usage": None, "content_chars": 0, "reasoning_chars": 0,
    }  # fmt: skip
    assert checks["tool_call"]["details"] == {
        "finish_reason": None, "usage": None, "tool_calls": 0, "name": None, "arguments": None,
        "content_chars": 0,
    }  # fmt: skip
    assert checks["tool_call_stream"]["details"] == {
        "finish_reason": None, "usage": None, "tool_calls": 0, "name": None, "arguments": None,
        "content_chars": 0, "chunks": 0, "first_chunk_s": None, "name_deltas": None,
        "argument_fragments": None, "matches_non_streamed": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("code", "model", "verdict"),
    [(0, "fake", "GO"), (1, "fake", "NO-GO"), (2, None, "NO-GO (usage)"), (3, None, "NO-GO (unreachable)"),
     (7, None, "NO-GO")],  # an exit code render has no word for: still no go
)  # fmt: skip
def test_the_verdict_line(code: int, model: str | None, verdict: str) -> None:
    checks = [CheckResult("models", "pass" if code == 0 else "fail", 0.01, "r", {})]
    rep = SmokeReport(1, "http://127.0.0.1:8000/v1", model, "auto", 60.0, "pass" if code == 0 else "fail",
                      code, checks)  # fmt: skip
    lines = render(rep).splitlines()
    assert lines[0] == f"station smoke  http://127.0.0.1:8000/v1  model={model or '-'}  tool_choice=auto"
    assert lines[-1] == f"{verdict}: 1 {'pass' if code == 0 else 'fail'} (exit {code})"


# ---- the models check: each way it ends ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("listed", "model", "code", "reason", "models"),
    [([], None, 1, "the server lists no models", []),
     (["fake", "fake-lora"], None, 2,
      "the server lists 2 models (fake, fake-lora): choose one with --model", ["fake", "fake-lora"]),
     (["fake", "fake-lora"], "glm-5.3", 1,
      "model 'glm-5.3' is not served; the server lists: fake, fake-lora (use --model fake)",
      ["fake", "fake-lora"])],
)  # fmt: skip
def test_a_failed_models_check_reports_whole(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], listed: list[str], model: str | None, code: int,
    reason: str, models: list[str],
) -> None:  # fmt: skip
    srv.route("GET", "/v1/models", Reply(json=models_list(*listed)))
    got, rep = smoke_args(capsys, "--base-url", srv.url, *(["--model", model] if model else []))
    assert got == code and rep["exit_code"] == code and rep["model"] == model
    first = rep["checks"][0]
    assert isinstance(first.pop("latency_s"), float)
    assert first == {"name": "models", "result": "fail", "reason": reason, "error": None,
                     "details": {"models": models, "max_model_len": None}}  # fmt: skip
    why = "not run: the models check failed"
    assert [(c["name"], c["result"], c["latency_s"], c["reason"]) for c in rep["checks"][1:]] == [
        (n, "skip", None, why) for n in CHECKS[1:]
    ]


@pytest.mark.parametrize(
    ("listed", "max_model_len", "reason"),
    [(["fake"], 2048, "serves fake (the only model listed, max_model_len 2048)"),
     (["fake"], None, "serves fake (the only model listed)"),
     (["other", "fake"], 2048, "serves fake (one of 2 models listed, max_model_len 2048)")],
)  # fmt: skip
def test_the_model_asked_for(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], listed: list[str], max_model_len: int | None,
    reason: str,
) -> None:  # fmt: skip
    listing = models_list(*listed)
    for entry in listing["data"]:
        if max_model_len is None:
            del entry["max_model_len"]
    srv.route("GET", "/v1/models", Reply(json=listing))
    code, rep = smoke_args(capsys, "--base-url", srv.url, "--model", "fake")
    assert code == 0 and rep["model"] == "fake"
    assert rep["checks"][0]["reason"] == reason
    assert rep["checks"][0]["details"] == {"models": listed, "max_model_len": max_model_len}


def test_an_unreachable_endpoint_keeps_the_model_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, rep = smoke_args(capsys, "--base-url", url, "--model", "glm-5.3")
    assert (code, rep["result"], rep["model"], rep["base_url"]) == (3, "fail", "glm-5.3", f"{url}/v1")


def test_a_server_gone_after_the_models_check_skips_the_rest(
    srv: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server stops right after it listed its model: the chat check finds nothing listening (a real
    refused connection), and the two tool checks are not run against a server that is gone."""
    listing = Reply(json=models_list("fake"))

    def list_then_go(_req: Request) -> Reply:
        srv.stop_listening()
        return listing

    srv.route("GET", "/v1/models", list_then_go)
    code, rep = smoke_args(capsys, "--base-url", srv.url)
    assert (code, rep["result"], rep["model"]) == (3, "fail", "fake")
    chat = rep["checks"][1]
    assert (chat["result"], chat["error"]) == ("fail", "unreachable")
    skipped = rep["checks"][2:]
    assert [(c["name"], c["result"], c["latency_s"], c["reason"], c["error"]) for c in skipped] == [
        (n, "skip", None, "not run: endpoint unreachable", None) for n in CHECKS[2:]
    ]
    assert skipped[0]["details"] == {
        "finish_reason": None, "usage": None, "tool_calls": 0, "name": None, "arguments": None,
        "content_chars": 0,
    }  # fmt: skip
    assert skipped[1]["details"] == skipped[0]["details"] | {
        "chunks": 0, "first_chunk_s": None, "name_deltas": None, "argument_fragments": None,
        "matches_non_streamed": None,
    }  # fmt: skip


# ---- the URL shown, and the command line ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [("http://op:secret@host:8000/v1", "http://host:8000/v1"),
     ("http://op@host/v1", "http://host/v1"),  # a user without a password is still not shown
     ("http://:secret@host/v1", "http://host/v1"),  # nor a password without a user
     ("https://op:secret@[fd00::1]:8443/v1", "https://[fd00::1]:8443/v1"),
     ("http://op:secret@:8000/v1", "http://:8000/v1"),
     ("http://GPU-Station:8000/v1", "http://GPU-Station:8000/v1")],  # no credentials: exactly as given
)  # fmt: skip
def test_the_url_shown_never_has_credentials(url: str, shown: str) -> None:
    assert display_url(url) == shown


def test_smoke_cli_defaults(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="station smoke")
    configure(parser)
    args = parser.parse_args(["--base-url", "http://127.0.0.1:8000"])
    assert (args.timeout, args.tool_choice, args.model, args.json) == (60.0, "auto", None, False)
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["smoke", "--help"]) == 0
    usage = capsys.readouterr().out.splitlines()[0]
    assert " [--model NAME] [--timeout S] [--tool-choice {auto,required}] [--json]" in usage


def test_latency_is_kept_to_a_tenth_of_a_millisecond() -> None:
    assert CheckResult("chat", "pass", 0.123456789, "r", {}).latency_s == 0.1235
    assert CheckResult("chat", "skip", None, "r", {}).latency_s is None
