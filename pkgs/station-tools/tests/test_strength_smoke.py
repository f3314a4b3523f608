"""Mutants of `station smoke` that survived the other tests (issue 17): the WARN for a tool call whose
finish_reason is not `tool_calls`, streamed and not. A well-formed call with the wrong finish_reason is a
WARN (the call is usable; the server's bookkeeping is off), never a PASS and never a FAIL (exit stays 0).
Real HTTP on 127.0.0.1 (faultserver).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

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
    tool_call,
)

from vllm_station.cli import main
from vllm_station.smoke import CHECKS

FRAGMENTS = -(-len(WEATHER_ARGS) // 7)  # chat_chunks sends the arguments 7 characters at a time


@pytest.fixture
def srv() -> Iterator[FaultServer]:
    with FaultServer(fake_openai_routes("fake")) as s:
        yield s


def smoke(capsys: pytest.CaptureFixture[str], url: str) -> tuple[int, dict[str, dict[str, object]]]:
    code = main(["smoke", "--json", "--base-url", url])
    rep = json.loads(capsys.readouterr().out)
    assert rep["exit_code"] == code
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
