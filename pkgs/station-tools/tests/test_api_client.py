"""vllm_station.api against a real HTTP server on 127.0.0.1 (tests/faultserver.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultserver import (
    UNRESOLVABLE_HOST,
    FaultServer,
    RawReply,
    Reply,
    SseReply,
    chat_chunks,
    chat_completion,
    fake_openai_routes,
    free_port,
    models_list,
)

from vllm_station.api import (
    ApiClient,
    ApiError,
    ApiKeyError,
    ApiTimeout,
    ApiUnreachable,
    HttpStatusError,
    ProtocolError,
    StreamError,
    collect_stream,
    load_api_key,
    split_base_url,
)
from vllm_station.errors import StationError, Unreachable, UsageError

SECRET = "sk-SENTINEL-7f3a9c-never-print-me"
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def srv() -> Iterator[FaultServer]:
    with FaultServer(fake_openai_routes("fake")) as s:
        yield s


# ---- base URL and key ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "root"),
    [
        ("http://h:8000", "http://h:8000"),
        ("http://h:8000/", "http://h:8000"),
        ("http://h:8000/v1", "http://h:8000"),
        ("http://h:8000/v1/", "http://h:8000"),
        ("h:8000", "http://h:8000"),
        ("https://gw.example/vllm/v1", "https://gw.example/vllm"),
        ("  http://[::1]:8000/v1  ", "http://[::1]:8000"),
    ],
)
def test_split_base_url(url: str, root: str) -> None:
    assert split_base_url(url) == (root, root + "/v1")


@pytest.mark.parametrize("url", ["", "ftp://h/", "http://", "http://h:99999", "http://h:8000/v1?x=1"])
def test_split_base_url_rejects(url: str) -> None:
    with pytest.raises(UsageError):
        split_base_url(url)


def test_load_api_key_file_env_and_errors(tmp_path: Path) -> None:
    f = tmp_path / "key"
    f.write_text(f"  {SECRET}\n")
    assert load_api_key(f, env={}) == SECRET
    assert load_api_key(None, env={"STATION_API_KEY": SECRET}) == SECRET
    assert load_api_key(None, env={}) is None
    assert load_api_key(f, env={"STATION_API_KEY": "other"}) == SECRET  # the file wins
    with pytest.raises(ApiKeyError, match="not found") as missing:
        load_api_key(tmp_path / "nope", env={})
    assert missing.value.exit_code == 2 and isinstance(missing.value, UsageError)
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ApiKeyError, match="empty"):
        load_api_key(tmp_path / "empty", env={})
    (tmp_path / "two").write_text(f"{SECRET}\n{SECRET}\n")
    with pytest.raises(ApiKeyError, match="whitespace") as two:
        load_api_key(tmp_path / "two", env={})
    assert SECRET not in str(two.value)
    with pytest.raises(ApiKeyError, match="directory"):
        load_api_key(tmp_path, env={})


def test_error_classes_map_to_exit_codes() -> None:
    assert (
        issubclass(ApiUnreachable, Unreachable)
        and ApiUnreachable("x", kind="refused", url="u").exit_code == 3
    )
    for cls in (ApiTimeout, HttpStatusError, ProtocolError, StreamError):
        assert issubclass(cls, ApiError) and issubclass(cls, StationError)
    assert ProtocolError("x").exit_code == 1


# ---- good answers -------------------------------------------------------------------------------


def test_models_chat_health_and_auth_header(srv: FaultServer) -> None:
    with ApiClient(srv.url + "/v1", api_key=SECRET, timeout=5) as api:
        assert api.health() >= 0
        models = api.models()
        assert [m.id for m in models] == ["fake"] and models[0].max_model_len == 2048
        res = api.chat("fake", USER, max_tokens=8, temperature=0, seed=1)
        assert SECRET not in repr(api)
    assert res.content == "Hello from the fault server."
    assert res.finish_reason == "stop" and res.usage is not None and res.usage.total_tokens == 19
    assert res.tool_calls == []
    chat_req = srv.requests[-1]
    assert chat_req.path == "/v1/chat/completions"
    assert chat_req.headers["authorization"] == f"Bearer {SECRET}"
    assert chat_req.json() == {
        "model": "fake",
        "messages": USER,
        "max_tokens": 8,
        "temperature": 0,
        "seed": 1,
    }
    assert [r.path for r in srv.requests] == ["/health", "/v1/models", "/v1/chat/completions"]


def test_no_key_no_header(srv: FaultServer) -> None:
    with ApiClient(srv.url, timeout=5) as api:
        api.models()
    assert "authorization" not in srv.requests[-1].headers


def test_tool_call_plain_and_streamed(srv: FaultServer) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    with ApiClient(srv.url, timeout=5) as api:
        res = api.chat("fake", USER, tools=tools, tool_choice="auto")
        streamed = collect_stream(api.chat_stream("fake", USER, tools=tools, tool_choice="auto"))
    assert len(res.tool_calls) == 1
    call = res.tool_calls[0]
    assert (call.type, call.name, json.loads(call.arguments)) == (
        "function",
        "get_weather",
        {"location": "Paris", "unit": "celsius"},
    )
    assert res.finish_reason == "tool_calls" and res.content is None
    body = srv.requests[-1].json()
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert len(streamed.tool_calls) == 1 and streamed.name_deltas == {0: 1}
    assert json.loads(streamed.tool_calls[0].arguments) == {"location": "Paris", "unit": "celsius"}
    assert streamed.argument_fragments[0] > 1  # really fragmented
    assert streamed.finish_reason == "tool_calls"
    assert streamed.usage is not None and streamed.usage.completion_tokens == 9


def test_reasoning_content_and_completion(srv: FaultServer) -> None:
    srv.route(
        "POST",
        "/v1/chat/completions",
        Reply(json=chat_completion(content=None, reasoning_content="thinking…", finish_reason="length")),
    )
    srv.route(
        "POST",
        "/v1/completions",
        Reply(
            json={
                "choices": [{"text": " Paris", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            }
        ),
    )
    with ApiClient(srv.url, timeout=5) as api:
        res = api.chat("fake", USER)
        comp = api.completion("fake", "The capital of France is")
    assert res.content is None and res.reasoning_content == "thinking…" and res.finish_reason == "length"
    assert comp.content == " Paris" and comp.usage is not None and comp.usage.completion_tokens == 1
    assert srv.requests[-1].json()["max_tokens"] == 1


# ---- faults -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "hint"),
    [
        (401, "STATION_API_KEY"),
        (403, "refused"),
        (404, "wrong base URL"),
        (500, "server failed"),
        (503, "server failed"),
    ],
)
def test_http_status_errors_name_status_body_and_hint(srv: FaultServer, status: int, hint: str) -> None:
    srv.route("GET", "/v1/models", Reply(status=status, json={"error": {"message": f"nope {status}"}}))
    with ApiClient(srv.url, api_key=SECRET, timeout=5) as api, pytest.raises(HttpStatusError) as ei:
        api.models()
    msg = str(ei.value)
    assert ei.value.status == status and ei.value.exit_code == 1
    assert f"GET /v1/models at {srv.url}/v1/models: HTTP {status}" in msg
    assert f"nope {status}" in msg and hint in msg


def test_echoed_key_is_masked(srv: FaultServer) -> None:
    srv.route(
        "POST",
        "/v1/chat/completions",
        lambda req: Reply(status=401, body=f"bad key {req.headers['authorization']}"),
    )
    with ApiClient(srv.url, api_key=SECRET, timeout=5) as api, pytest.raises(HttpStatusError) as ei:
        api.chat("fake", USER)
    assert SECRET not in str(ei.value) and SECRET not in ei.value.body
    assert "Bearer ***" in str(ei.value)


def test_non_json_body(srv: FaultServer) -> None:
    srv.route("GET", "/v1/models", Reply(body="<html>gateway says hi</html>", content_type="text/html"))
    with ApiClient(srv.url, timeout=5) as api, pytest.raises(ProtocolError, match="not JSON") as ei:
        api.models()
    assert "text/html" in str(ei.value) and "gateway says hi" in str(ei.value)


def test_models_without_data_list(srv: FaultServer) -> None:
    srv.route("GET", "/v1/models", Reply(json={"models": ["x"]}))
    with ApiClient(srv.url, timeout=5) as api, pytest.raises(ProtocolError, match="no 'data' list"):
        api.models()


def test_chat_without_choices(srv: FaultServer) -> None:
    srv.route("POST", "/v1/chat/completions", Reply(json={"id": "x", "choices": []}))
    with ApiClient(srv.url, timeout=5) as api, pytest.raises(ProtocolError, match="no choices"):
        api.chat("fake", USER)


def test_not_http_at_all(srv: FaultServer) -> None:
    srv.route("GET", "/v1/models", RawReply(b"SSH-2.0-OpenSSH_9.6\r\n"))
    with ApiClient(srv.url, timeout=5) as api, pytest.raises(ProtocolError, match="not an HTTP server"):
        api.models()


def test_not_http_with_a_full_head(srv: FaultServer) -> None:
    srv.route("GET", "/v1/models", RawReply(b"-ERR unknown command 'GET'\r\n\r\n"))  # Redis, say
    with ApiClient(srv.url, timeout=5) as api, pytest.raises(ProtocolError, match=r"no HTTP answer .* port"):
        api.models()


def test_body_cut_short(srv: FaultServer) -> None:
    srv.route(
        "GET",
        "/v1/models",
        RawReply(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"da'),
    )
    with ApiClient(srv.url, timeout=5) as api, pytest.raises(ProtocolError, match="broke mid-answer"):
        api.models()


def test_stream_without_done_is_truncated(srv: FaultServer) -> None:
    srv.route("POST", "/v1/chat/completions", SseReply(chat_chunks(content="partial")[:2], done=False))
    with ApiClient(srv.url, timeout=5) as api, pytest.raises(StreamError, match=r"without 'data: \[DONE\]'"):
        list(api.chat_stream("fake", USER))


def test_stream_cut_mid_event(srv: FaultServer) -> None:
    srv.route(
        "POST",
        "/v1/chat/completions",
        SseReply(chat_chunks(content="x")[:1], done=False, tail=b'data: {"choices": [{"del'),
    )
    with ApiClient(srv.url, timeout=5) as api, pytest.raises(StreamError, match="cut off inside event 2"):
        list(api.chat_stream("fake", USER))


def test_stream_malformed_json_event(srv: FaultServer) -> None:
    srv.route("POST", "/v1/chat/completions", SseReply(["{not json"]))
    with ApiClient(srv.url, timeout=5) as api, pytest.raises(StreamError, match=r"event 1 .* is not JSON"):
        list(api.chat_stream("fake", USER))


def test_stream_malformed_line(srv: FaultServer) -> None:
    srv.route("POST", "/v1/chat/completions", SseReply(tail=b"hello there\n\n", done=False))
    with ApiClient(srv.url, timeout=5) as api, pytest.raises(StreamError, match="not an SSE field"):
        list(api.chat_stream("fake", USER))


def test_stream_error_event(srv: FaultServer) -> None:
    srv.route(
        "POST",
        "/v1/chat/completions",
        SseReply([{"error": {"message": "engine died", "code": 500}}], done=False),
    )
    with ApiClient(srv.url, timeout=5) as api, pytest.raises(StreamError, match="mid-stream: engine died"):
        list(api.chat_stream("fake", USER))


def test_stream_gets_json_instead_of_events(srv: FaultServer) -> None:
    with ApiClient(srv.url, timeout=5) as api:
        srv.route("POST", "/v1/chat/completions", Reply(json=chat_completion()))
        with pytest.raises(StreamError, match="expected an event stream"):
            list(api.chat_stream("fake", USER))
        srv.route("POST", "/v1/chat/completions", Reply(status=400, json={"error": {"message": "bad tool"}}))
        with pytest.raises(HttpStatusError, match="HTTP 400 Bad Request: bad tool"):
            list(api.chat_stream("fake", USER))


def test_slow_server_times_out(srv: FaultServer) -> None:
    srv.route("GET", "/v1/models", Reply(json=models_list("fake"), delay_s=10))
    t0 = time.monotonic()
    with ApiClient(srv.url, timeout=0.5) as api, pytest.raises(ApiTimeout, match=r"no answer within 0.5 s"):
        api.models()
    assert time.monotonic() - t0 < 3


def test_slow_stream_hits_total_deadline(srv: FaultServer) -> None:
    srv.route("POST", "/v1/chat/completions", SseReply(chat_chunks(content="x" * 5), gap_s=0.3))
    t0 = time.monotonic()
    with ApiClient(srv.url, timeout=0.7) as api, pytest.raises(ApiTimeout):
        list(api.chat_stream("fake", USER))
    assert time.monotonic() - t0 < 3


def test_refused() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with ApiClient(url, timeout=5) as api, pytest.raises(ApiUnreachable, match="connection refused") as ei:
        api.models()
    assert ei.value.kind == "refused" and ei.value.exit_code == 3


def test_dns_failure() -> None:
    with ApiClient(f"http://{UNRESOLVABLE_HOST}:8000", timeout=5) as api, pytest.raises(ApiUnreachable) as ei:
        api.health()
    assert ei.value.kind == "dns" and UNRESOLVABLE_HOST in str(ei.value)


def test_health_not_ready(srv: FaultServer) -> None:
    srv.route("GET", "/health", Reply(status=503, body=""))
    with ApiClient(srv.url, timeout=5) as api, pytest.raises(HttpStatusError, match="ready means 200") as ei:
        api.health()
    assert ei.value.status == 503


def test_bad_timeout() -> None:
    with pytest.raises(UsageError):
        ApiClient("http://127.0.0.1:1", timeout=0)


def test_url_credentials_never_in_messages(srv: FaultServer) -> None:
    srv.route("GET", "/v1/models", Reply(status=500, body="boom"))
    url = srv.url.replace("http://", f"http://operator:{SECRET}@")
    with ApiClient(url, timeout=5) as api, pytest.raises(HttpStatusError) as ei:
        api.models()
    assert SECRET not in str(ei.value) and SECRET not in ei.value.url
    assert f"GET /v1/models at {srv.url}/v1/models: HTTP 500" in str(ei.value)
    refused = f"http://operator:{SECRET}@127.0.0.1:{free_port()}"
    with ApiClient(refused, api_key=SECRET, timeout=5) as api, pytest.raises(ApiUnreachable) as eu:
        list(api.chat_stream("fake", USER))
    assert SECRET not in str(eu.value) and "operator" not in str(eu.value)


def test_post_json_to_a_root_path_and_its_errors_carry_no_credentials(srv: FaultServer) -> None:
    srv.route("POST", "/tokenize", Reply(json={"count": 7, "max_model_len": 2048}))
    with ApiClient(srv.url + "/v1", api_key=SECRET, timeout=5) as api:
        answer = api.post_json("/tokenize", {"model": "fake", "prompt": "hi"})
    assert answer == {"count": 7, "max_model_len": 2048}
    sent = [r for r in srv.requests if r.path == "/tokenize"]
    assert [r.json() for r in sent] == [{"model": "fake", "prompt": "hi"}]
    assert sent[0].headers["authorization"] == f"Bearer {SECRET}"
    srv.route("POST", "/tokenize", Reply(status=500, body="boom"))
    url = srv.url.replace("http://", f"http://operator:{SECRET}@")
    with ApiClient(url, timeout=5) as api, pytest.raises(HttpStatusError) as ei:
        api.post_json("/tokenize", {"prompt": "hi"})
    assert SECRET not in str(ei.value) and SECRET not in ei.value.url and "operator" not in ei.value.url
    assert str(ei.value).startswith(f"POST /tokenize at {srv.url}/tokenize: HTTP 500")
