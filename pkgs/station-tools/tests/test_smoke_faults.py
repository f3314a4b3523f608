"""`station smoke` against an in-process HTTP server: good answers and every fault vLLM cannot produce."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultserver import (
    UNRESOLVABLE_HOST,
    WEATHER_ARGS,
    Answer,
    FaultServer,
    RawReply,
    Reply,
    Request,
    Route,
    SseReply,
    answer_of,
    chat_chunks,
    chat_completion,
    fake_chat,
    fake_openai_routes,
    free_port,
    models_list,
    tool_call,
)

from vllm_station.api.checks import CHECKS
from vllm_station.cli import main

SECRET = "sk-SENTINEL-4b1d-do-not-print"
CHAT = ("POST", "/v1/chat/completions")


@pytest.fixture
def srv() -> Iterator[FaultServer]:
    with FaultServer(fake_openai_routes("fake")) as s:
        yield s


def smoke(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, dict[str, object]], str]:
    """Run `station smoke --json ARGS`; (exit code, checks by name, stderr)."""
    code = main(["smoke", "--json", *args])
    out, err = capsys.readouterr()
    if code == 2 and not out:  # usage error before any check: no report
        return code, {}, err
    rep = json.loads(out)
    assert rep["exit_code"] == code
    assert [c["name"] for c in rep["checks"]] == list(CHECKS)
    return code, {c["name"]: c for c in rep["checks"]}, err


def results(checks: dict[str, dict[str, object]]) -> list[object]:
    return [checks[n]["result"] for n in CHECKS]


def tools_only(answer: Route) -> Route:
    """A chat route: `answer` to the non-streamed tool request, the normal answer otherwise."""
    normal = fake_chat()

    def route(req: Request) -> Answer:
        body = req.json()
        if body.get("tools") and not body.get("stream"):
            return answer_of(answer, req)
        return normal(req)

    return route


def stream_only(answer: Route) -> Route:
    """A chat route: `answer` to the streamed request, the normal answer otherwise."""
    normal = fake_chat()
    return lambda req: answer_of(answer, req) if req.json().get("stream") else normal(req)


def plain_only(answer: Route) -> Route:
    """A chat route: `answer` to the plain chat request (no tools), the normal answer otherwise."""
    normal = fake_chat()
    return lambda req: normal(req) if req.json().get("tools") else answer_of(answer, req)


# ---- the good path ------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_all_pass_root_or_v1(srv: FaultServer, capsys: pytest.CaptureFixture[str], suffix: str) -> None:
    code, checks, err = smoke(capsys, "--base-url", srv.url + suffix)
    assert code == 0 and results(checks) == ["pass"] * 4 and err == ""
    assert checks["models"]["reason"] == "serves fake (the only model listed, max_model_len 2048)"
    assert checks["tool_call"]["details"]["arguments"] == {"location": "Paris", "unit": "celsius"}  # type: ignore[index]
    assert checks["tool_call_stream"]["details"]["matches_non_streamed"] is True  # type: ignore[index]
    sent = [r.json() for r in srv.requests if r.path == "/v1/chat/completions"]
    assert [b.get("stream", False) for b in sent] == [False, False, True]
    assert all(b["temperature"] == 0 and b["seed"] == 1234 for b in sent)
    assert sent[1]["tool_choice"] == "auto" and sent[1]["tools"][0]["function"]["name"] == "get_weather"
    assert sent[1]["messages"] == sent[2]["messages"]


def test_human_table(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["smoke", "--base-url", srv.url]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"station smoke  {srv.url}/v1  model=fake  tool_choice=auto"
    assert re.match(r"check\s+result\s+latency_s\s+reason$", lines[1])
    for line, name in zip(lines[3:7], CHECKS, strict=True):
        assert re.match(rf"{name}\s+PASS\s+\d+\.\d+\s+\S", line), line
    assert lines[7] == "GO: 4 pass (exit 0)"


def test_json_schema_is_stable(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["smoke", "--json", "--base-url", srv.url, "--model", "fake", "--timeout", "7"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert list(rep) == [
        "schema",
        "base_url",
        "model",
        "tool_choice",
        "timeout_s",
        "result",
        "exit_code",
        "checks",
    ]
    assert (rep["schema"], rep["model"], rep["timeout_s"], rep["result"]) == (1, "fake", 7.0, "pass")
    keys = {c["name"]: list(c["details"]) for c in rep["checks"]}
    assert keys == {
        "models": ["models", "max_model_len"],
        "chat": ["finish_reason", "usage", "content_chars", "reasoning_chars"],
        "tool_call": ["finish_reason", "usage", "tool_calls", "name", "arguments", "content_chars"],
        "tool_call_stream": [
            "finish_reason",
            "usage",
            "tool_calls",
            "name",
            "arguments",
            "content_chars",
            "chunks",
            "first_chunk_s",
            "name_deltas",
            "argument_fragments",
            "matches_non_streamed",
        ],
    }
    for c in rep["checks"]:
        assert list(c) == ["name", "result", "latency_s", "reason", "details", "error"]
        assert isinstance(c["latency_s"], float) and c["error"] is None


def test_required_tool_choice_is_sent(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = smoke(capsys, "--base-url", srv.url, "--tool-choice", "required")
    assert code == 0
    assert [r.json().get("tool_choice") for r in srv.requests if r.method == "POST"] == [
        None,
        "required",
        "required",
    ]


def test_reasoning_only_answer_passes(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route(*CHAT, plain_only(Reply(json=chat_completion(content=None, reasoning_content="Hmm, hello."))))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 0 and checks["chat"]["result"] == "pass"
    assert "reasoning only" in str(checks["chat"]["reason"])


def test_text_next_to_call_passes_and_wrong_finish_reason_warns(
    srv: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    srv.route(
        *CHAT,
        tools_only(
            Reply(
                json=chat_completion(
                    content="Let me look that up.", tool_calls=[tool_call()], finish_reason="stop"
                )
            )
        ),
    )
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 0 and checks["tool_call"]["result"] == "warn"
    assert "20 chars of text next to it" in str(checks["tool_call"]["reason"])
    assert "finish_reason=stop, expected tool_calls" in str(checks["tool_call"]["reason"])


# ---- faults that end in exit 1 ------------------------------------------------------------------


def test_5xx_on_chat_fails_that_check_only(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route(*CHAT, plain_only(Reply(status=500, json={"error": {"message": "EngineCore died"}})))
    code, checks, err = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and results(checks) == ["pass", "fail", "pass", "pass"]
    assert "HTTP 500 Internal Server Error: EngineCore died" in str(checks["chat"]["reason"])
    assert checks["chat"]["error"] == "http"
    assert "station smoke: chat: POST /v1/chat/completions" in err


def test_401_with_key_masks_echoed_key(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATION_API_KEY", SECRET)
    srv.route(
        "GET",
        "/v1/models",
        lambda r: Reply(status=401, json={"error": f"invalid key {r.headers.get('authorization')}"}),
    )
    code, checks, err = smoke(capsys, "--base-url", srv.url)
    assert srv.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert code == 1 and results(checks) == ["fail", "skip", "skip", "skip"]
    reason = str(checks["models"]["reason"])
    assert "HTTP 401 Unauthorized" in reason and "Bearer ***" in reason and "--api-key-file" in reason
    assert "refused the API key that was sent" in reason and "none was sent" not in reason
    assert checks["chat"]["reason"] == "not run: the models check failed"
    assert SECRET not in json.dumps(checks) + err


def test_401_without_a_key_says_none_was_sent(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing key and a wrong key are different fixes: the hint says which one it was."""
    monkeypatch.delenv("STATION_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    srv.route("GET", "/v1/models", Reply(status=401, json={"error": "Unauthorized"}))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert "authorization" not in srv.requests[-1].headers
    reason = str(checks["models"]["reason"])
    assert code == 1 and "none was sent: pass --api-key-file FILE or set STATION_API_KEY" in reason
    assert "refused the API key" not in reason


def test_403_and_404(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route("GET", "/v1/models", Reply(status=403, json={"detail": "Forbidden"}))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and "HTTP 403 Forbidden" in str(checks["models"]["reason"])
    code, checks, _ = smoke(capsys, "--base-url", srv.url + "/openai")  # a wrong path prefix: 404
    assert code == 1 and "HTTP 404 Not Found" in str(checks["models"]["reason"])
    assert "wrong base URL" in str(checks["models"]["reason"])


def test_non_json_models(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route(
        "GET", "/v1/models", Reply(body="<html><body>502 Bad Gateway</body></html>", content_type="text/html")
    )
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and checks["models"]["error"] == "protocol"
    assert "the body is not JSON (content-type text/html)" in str(checks["models"]["reason"])


def test_connection_dropped(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route(*CHAT, plain_only(RawReply(b"")))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert (
        code == 1
        and checks["chat"]["result"] == "fail"
        and "closed before any answer" in str(checks["chat"]["reason"])
    )


def test_truncated_sse(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route(
        *CHAT, stream_only(SseReply(chat_chunks(calls=[("get_weather", WEATHER_ARGS)])[:4], done=False))
    )
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and results(checks) == ["pass", "pass", "pass", "fail"]
    assert "without 'data: [DONE]' (truncated)" in str(checks["tool_call_stream"]["reason"])
    assert checks["tool_call_stream"]["error"] == "stream"


def test_sse_cut_mid_event(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route(*CHAT, stream_only(SseReply(chat_chunks()[:2], done=False, tail=b'data: {"id": "chatcmpl-fa')))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and "cut off inside event 3" in str(checks["tool_call_stream"]["reason"])


def test_malformed_sse_data(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route(*CHAT, stream_only(SseReply(['{"choices": [{"delta": {"tool_calls": [}]}'])))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and "event 1 (line 1) is not JSON" in str(checks["tool_call_stream"]["reason"])


def test_invalid_tool_json(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route(
        *CHAT,
        tools_only(
            Reply(json=chat_completion(content=None, tool_calls=[tool_call(arguments='{"location": "Par')]))
        ),
    )
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and results(checks) == ["pass", "pass", "fail", "pass"]
    assert "get_weather arguments are not valid JSON" in str(checks["tool_call"]["reason"])
    assert "not compared: the non-streamed call failed" in str(checks["tool_call_stream"]["reason"])


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ('["Paris"]', "arguments are a JSON list, expected an object"),
        ('{"unit": "celsius"}', "no non-empty 'location'"),
        ('{"location": "  "}', "no non-empty 'location'"),
    ],
)
def test_tool_arguments_shape(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], args: str, why: str
) -> None:
    srv.route(
        *CHAT, tools_only(Reply(json=chat_completion(content=None, tool_calls=[tool_call(arguments=args)])))
    )
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and why in str(checks["tool_call"]["reason"])


def test_tool_call_missing(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route(*CHAT, tools_only(Reply(json=chat_completion(content="It is sunny in Paris."))))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    reason = str(checks["tool_call"]["reason"])
    assert code == 1 and "no tool call: the model answered in text: 'It is sunny in Paris.'" in reason
    assert "--tool-call-parser" in reason and "--tool-choice required" in reason


def test_two_tool_calls(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route(
        *CHAT,
        tools_only(
            Reply(json=chat_completion(content=None, tool_calls=[tool_call(), tool_call(call_id="call_1")]))
        ),
    )
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and "2 tool calls (get_weather, get_weather); expected exactly one" in str(
        checks["tool_call"]["reason"]
    )


def test_wrong_name_and_type(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route(
        *CHAT, tools_only(Reply(json=chat_completion(content=None, tool_calls=[tool_call(name="get_time")])))
    )
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and "name is 'get_time', expected 'get_weather'" in str(checks["tool_call"]["reason"])
    bad_type = {**tool_call(), "type": "code"}
    srv.route(*CHAT, tools_only(Reply(json=chat_completion(content=None, tool_calls=[bad_type]))))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and "type is 'code', expected 'function'" in str(checks["tool_call"]["reason"])


def test_streamed_name_repeated(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route(
        *CHAT, stream_only(SseReply(chat_chunks(calls=[("get_weather", WEATHER_ARGS)], repeat_name=True)))
    )
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    # the names concatenate, so the name check trips first; either way the check fails and says why
    assert code == 1 and "get_weatherget_weather" in str(checks["tool_call_stream"]["reason"])


def test_streamed_name_split_in_two(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    chunks = chat_chunks(calls=[("get_weather", WEATHER_ARGS)])
    first = chunks[1]["choices"][0]["delta"]["tool_calls"][0]
    first["function"]["name"] = "get_"
    extra = json.loads(json.dumps(chunks[1]))
    extra["choices"][0]["delta"]["tool_calls"][0] = {"index": 0, "function": {"name": "weather"}}
    srv.route(*CHAT, stream_only(SseReply([chunks[0], chunks[1], extra, *chunks[2:]])))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1
    assert "the tool name arrived in 2 chunks, expected exactly once" in str(
        checks["tool_call_stream"]["reason"]
    )


def test_streamed_arguments_differ(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route(*CHAT, stream_only(SseReply(chat_chunks(calls=[("get_weather", '{"location": "Paris"}')]))))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and checks["tool_call_stream"]["details"]["matches_non_streamed"] is False  # type: ignore[index]
    assert "keys ['location'] but the non-streamed call had ['location', 'unit']" in str(
        checks["tool_call_stream"]["reason"]
    )
    srv.route(
        *CHAT,
        stream_only(
            SseReply(chat_chunks(calls=[("get_weather", '{"location": "Paris, France", "unit": "celsius"}')]))
        ),
    )
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 0 and "values of location differ" in str(checks["tool_call_stream"]["reason"])


def test_streamed_no_call(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route(*CHAT, stream_only(SseReply(chat_chunks(content="sunny"))))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and "streamed: no tool call: the model answered in text: 'sunny'" in str(
        checks["tool_call_stream"]["reason"]
    )


def test_auto_tool_choice_not_enabled(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    msg = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    bad = Reply(status=400, json={"error": {"message": msg, "type": "BadRequestError", "code": 400}})
    srv.route(*CHAT, lambda r: bad if r.json().get("tools") else fake_chat()(r))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and results(checks) == ["pass", "pass", "fail", "fail"]
    assert f"HTTP 400 Bad Request: {msg}" in str(checks["tool_call"]["reason"])
    assert f"HTTP 400 Bad Request: {msg}" in str(checks["tool_call_stream"]["reason"])


@pytest.mark.timing
def test_slow_server_times_out(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route(*CHAT, plain_only(Reply(json=chat_completion(), delay_s=30)))
    code, checks, _ = smoke(capsys, "--base-url", srv.url, "--timeout", "0.5")
    assert code == 1 and results(checks) == ["pass", "fail", "pass", "pass"]
    assert "no answer within 0.5 s (timeout; raise --timeout?)" in str(checks["chat"]["reason"])
    assert checks["chat"]["error"] == "timeout" and float(checks["chat"]["latency_s"]) < 3  # type: ignore[arg-type]


def test_model_not_served(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, checks, _ = smoke(capsys, "--base-url", srv.url, "--model", "glm-5.3")
    assert code == 1 and results(checks) == ["fail", "skip", "skip", "skip"]
    assert (
        checks["models"]["reason"]
        == "model 'glm-5.3' is not served; the server lists: fake (use --model fake)"
    )


def test_no_models(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route("GET", "/v1/models", Reply(json=models_list()))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and checks["models"]["reason"] == "the server lists no models"


# ---- exit 2 and exit 3 --------------------------------------------------------------------------


def test_several_models_without_model_is_usage(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    srv.route("GET", "/v1/models", Reply(json=models_list("fake", "fake-lora")))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 2 and results(checks) == ["fail", "skip", "skip", "skip"]
    assert (
        checks["models"]["reason"] == "the server lists 2 models (fake, fake-lora): choose one with --model"
    )
    code, checks, _ = smoke(capsys, "--base-url", srv.url, "--model", "fake-lora")
    assert (
        code == 0
        and checks["models"]["reason"] == "serves fake-lora (one of 2 models listed, max_model_len 2048)"
    )


def test_missing_key_file_is_usage(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = smoke(capsys, "--base-url", srv.url, "--api-key-file", str(tmp_path / "nokey"))
    assert (
        code == 2
        and err.strip()
        == f"station smoke: error: API key file {tmp_path / 'nokey'}: not found (--api-key-file)"
    )
    assert srv.requests == []


@pytest.mark.parametrize(
    "argv", [["--timeout", "0"], ["--tool-choice", "none"], ["--base-url", "ftp://x"]]
)  # no --base-url is not one: it has the shared default (tests/test_options_vocabulary.py)
def test_bad_arguments_are_usage(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    base = [] if "--base-url" in argv else ["--base-url", "http://127.0.0.1:1"]
    assert main(["smoke", *base, *argv]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_refused_is_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    code, checks, err = smoke(capsys, "--base-url", f"http://127.0.0.1:{free_port()}/v1")
    assert code == 3 and results(checks) == ["fail", "skip", "skip", "skip"]
    assert (
        "connection refused" in str(checks["models"]["reason"]) and checks["models"]["error"] == "unreachable"
    )
    assert checks["chat"]["reason"] == "not run: endpoint unreachable"
    assert err.startswith("station smoke: models: GET /v1/models at http://127.0.0.1:")


def test_unresolvable_host_is_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    code, checks, _ = smoke(capsys, "--base-url", f"http://{UNRESOLVABLE_HOST}:8000")
    assert code == 3 and f"cannot resolve host '{UNRESOLVABLE_HOST}'" in str(checks["models"]["reason"])


def test_human_output_on_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["smoke", "--base-url", f"http://127.0.0.1:{free_port()}"]) == 3
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "NO-GO (unreachable): 1 fail, 3 skip (exit 3)" and err == ""
    assert re.search(r"^models\s+FAIL\s+\d.*connection refused", out, re.M)


# ---- the key never shows, even with --debug (a real subprocess: real logging) ------------------


@pytest.mark.parametrize("via", ["env", "file"])
def test_key_never_printed_even_with_debug(srv: FaultServer, tmp_path: Path, via: str) -> None:
    srv.route(
        *CHAT, plain_only(lambda r: Reply(status=401, body=f"no: {r.headers.get('authorization')}"))
    )  # echoes the key back
    env = {k: v for k, v in os.environ.items() if k != "STATION_API_KEY"}
    args = [sys.executable, "-m", "vllm_station", "--debug", "smoke", "--base-url", srv.url]
    if via == "env":
        env["STATION_API_KEY"] = SECRET
    else:
        (tmp_path / "key").write_text(SECRET + "\n")
        args += ["--api-key-file", str(tmp_path / "key")]
    for extra in ([], ["--json"]):
        proc = subprocess.run([*args, *extra], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1, proc.stderr
        assert "DEBUG" in proc.stderr  # debug logging really was on
        assert SECRET not in proc.stdout and SECRET not in proc.stderr
        assert "Bearer ***" in proc.stdout
    assert all(r.headers.get("authorization") == f"Bearer {SECRET}" for r in srv.requests)


def test_base_url_credentials_not_printed(srv: FaultServer, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["smoke", "--base-url", srv.url.replace("http://", f"http://op:{SECRET}@")])
    out, err = capsys.readouterr()
    assert code == 0 and SECRET not in out + err
    assert out.splitlines()[0].startswith(f"station smoke  {srv.url}/v1  ")


def test_tool_arguments_sent_as_an_object_are_refused(
    srv: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The OpenAI API sends arguments as a JSON-encoded string; an object breaks clients that json.loads it,
    so the smoke test does not pass a server that sends one (plain or streamed)."""
    function = {"name": "get_weather", "arguments": {"location": "Paris"}}
    call = {"id": "call_0", "type": "function", "function": function}
    srv.route(*CHAT, tools_only(Reply(json=chat_completion(content=None, tool_calls=[call]))))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and checks["tool_call"]["result"] == "fail"
    assert "arguments is a JSON dict, not the JSON-encoded string" in str(checks["tool_call"]["reason"])

    delta = {"tool_calls": [{"index": 0, **call}]}
    event = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    srv.route(*CHAT, stream_only(SseReply([json.dumps(event)])))
    code, checks, _ = smoke(capsys, "--base-url", srv.url)
    assert code == 1 and checks["tool_call_stream"]["result"] == "fail"
    assert "arguments is a JSON dict, not the string fragment" in str(checks["tool_call_stream"]["reason"])
