"""A small in-process HTTP server on 127.0.0.1 for fault cases real vLLM cannot produce.

Usage (any test may import it: `from faultserver import ...`)::

    from faultserver import FaultServer, Reply, SseReply, fake_openai_routes

    with FaultServer(fake_openai_routes(model="fake")) as srv:       # a well-behaved OpenAI server
        srv.route("GET", "/health", Reply(status=503))               # override one route
        srv.route("POST", "/v1/chat/completions", lambda req: Reply(status=500, json={"error": "boom"}))
        run_something(srv.url)                                        # "http://127.0.0.1:<port>"
        assert srv.requests[-1].headers["authorization"] == "Bearer ..."

A route's answer is one of:
- `Reply(status, json=… | body=b"…", headers, content_type, delay_s)`: `delay_s` sleeps before the status
  line (a slow server → client timeouts);
- `SseReply(events, done=True, gap_s=0, tail=b"")`: `text/event-stream`; each event is a dict (sent as
  `data: <json>`) or a str (sent verbatim as `data: <str>`); `done` appends `data: [DONE]`; `tail` is raw
  bytes written last (e.g. a half event), then the connection closes (HTTP/1.0, the close ends the body);
- `RawReply(data, delay_s)`: raw bytes on the socket, no status line added, then close;
- a callable `(Request) -> Reply | SseReply | RawReply`, to answer depending on the request.
Unknown routes answer 404 `{"detail": "Not Found"}`. Every request is recorded in `srv.requests`.

Helpers: `fake_openai_routes()` (models, health, chat with/without tools, streamed or not), `fake_chat()`,
`answer_of(route, request)`,
`chat_completion(...)`, `chat_chunks(...)`, `free_port()` (a port nothing listens on),
`UNRESOLVABLE_HOST` (a name under the reserved `.invalid` TLD).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

UNRESOLVABLE_HOST = "station-smoke-test.invalid"  # RFC 2606: never resolves


@dataclass
class Reply:
    status: int = 200
    json: Any = None
    body: bytes | str = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str | None = None
    delay_s: float = 0.0


@dataclass
class SseReply:
    events: Sequence[Mapping[str, Any] | str] = ()
    done: bool = True
    gap_s: float = 0.0
    tail: bytes = b""
    status: int = 200
    delay_s: float = 0.0


@dataclass
class RawReply:
    data: bytes
    delay_s: float = 0.0


Answer = Reply | SseReply | RawReply


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


Route = Answer | Callable[[Request], Answer]


class FaultServer:
    def __init__(self, routes: Mapping[tuple[str, str], Route] | None = None) -> None:
        self.routes: dict[tuple[str, str], Route] = dict(routes or {})
        self.requests: list[Request] = []
        self._stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="faultserver", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def route(self, method: str, path: str, answer: Route) -> None:
        self.routes[(method.upper(), path)] = answer

    def start(self) -> FaultServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes sleeping handlers
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def stop_listening(self) -> None:
        """Close the listening socket: later connections are refused, answers in flight are still sent (a
        server that goes away between two requests). Safe to call from a route."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def sleep(self, seconds: float) -> bool:
        """Sleep unless the server stops; True when the server is stopping."""
        return self._stop.wait(seconds) if seconds > 0 else self._stop.is_set()


def _make_handler(server: FaultServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # the connection close ends every body: easy truncation

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _handle(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            path = self.path.split("?", 1)[0]
            req = Request(self.command, path, {k.lower(): v for k, v in self.headers.items()}, body)
            server.requests.append(req)
            route = server.routes.get((self.command, path))
            if route is None:
                answer: Answer = Reply(status=404, json={"detail": "Not Found"})
            elif callable(route):
                try:
                    answer = route(req)
                except Exception as exc:  # a broken test route: say so in the answer, not in a thread dump
                    answer = Reply(status=599, body=f"faultserver: the route raised {exc!r}")
            else:
                answer = route
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up: fine
                self._send(answer)

        def _send(self, answer: Answer) -> None:
            if server.sleep(answer.delay_s):
                return
            if isinstance(answer, RawReply):
                self.wfile.write(answer.data)
                self.wfile.flush()
                self.close_connection = True
                return
            if isinstance(answer, SseReply):
                self.send_response(answer.status)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                self.wfile.flush()
                for ev in answer.events:
                    data = ev if isinstance(ev, str) else json.dumps(ev)
                    self.wfile.write(f"data: {data}\n\n".encode())
                    self.wfile.flush()
                    if server.sleep(answer.gap_s):
                        return
                if answer.done:
                    self.wfile.write(b"data: [DONE]\n\n")
                if answer.tail:
                    self.wfile.write(answer.tail)
                self.wfile.flush()
                return
            if answer.json is not None:
                payload = json.dumps(answer.json).encode()
                ctype = answer.content_type or "application/json"
            else:
                payload = answer.body.encode() if isinstance(answer.body, str) else answer.body
                ctype = answer.content_type or "text/plain; charset=utf-8"
            self.send_response(answer.status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(payload)))
            for k, v in answer.headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()

        do_GET = do_POST = do_PUT = do_DELETE = _handle

    return Handler


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- OpenAI-shaped answers ---------------------------------------------------------------------

WEATHER_ARGS = '{"location": "Paris", "unit": "celsius"}'


def models_list(*names: str) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"id": n, "object": "model", "owned_by": "vllm", "root": f"/models/{n}", "max_model_len": 2048}
            for n in names
        ],
    }


def tool_call(
    name: str = "get_weather", arguments: str = WEATHER_ARGS, call_id: str = "call_0"
) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chat_completion(
    model: str = "fake",
    content: str | None = "Hello from the fault server.",
    *,
    tool_calls: Sequence[Mapping[str, Any]] | None = None,
    finish_reason: str | None = None,
    reasoning_content: str | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning_content is not None:
        message["reasoning_content"] = reasoning_content
    if tool_calls is not None:
        message["tool_calls"] = [dict(c) for c in tool_calls]
    if finish_reason is None:
        finish_reason = "tool_calls" if tool_calls else "stop"
    return {
        "id": "chatcmpl-fault",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
    }


def _chunk(model: str, delta: Mapping[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fault",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": dict(delta), "finish_reason": finish_reason}],
    }


def chat_chunks(
    model: str = "fake",
    content: str | None = None,
    *,
    calls: Sequence[tuple[str, str]] = (),
    fragment: int = 7,
    finish_reason: str | None = None,
    repeat_name: bool = False,
    usage: bool = True,
) -> list[dict[str, Any]]:
    """Stream chunks like vLLM's: role, content, then per call (name, arguments) one delta with id+name
    and argument fragments of `fragment` characters; `repeat_name` also sends the name on every fragment."""
    out = [_chunk(model, {"role": "assistant", "content": ""})]
    if content:
        out.append(_chunk(model, {"content": content}))
    for i, (name, args) in enumerate(calls):
        out.append(
            _chunk(
                model,
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                },
            )
        )
        for j in range(0, len(args), fragment):
            fn: dict[str, Any] = {"arguments": args[j : j + fragment]}
            if repeat_name:
                fn["name"] = name
            out.append(_chunk(model, {"tool_calls": [{"index": i, "function": fn}]}))
    if finish_reason is None:
        finish_reason = "tool_calls" if calls else "stop"
    out.append(_chunk(model, {}, finish_reason))
    if usage:
        out.append(
            {
                "id": "chatcmpl-fault",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [],
                "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21},
            }
        )
    return out


def answer_of(route: Route, req: Request) -> Answer:
    """What `route` answers to `req` (for routes that wrap other routes)."""
    return route(req) if callable(route) else route


def fake_chat(model: str = "fake", tool_args: str = WEATHER_ARGS) -> Callable[[Request], Answer]:
    """A well-behaved /v1/chat/completions: a get_weather call when tools are offered, else a greeting."""

    def chat(req: Request) -> Answer:
        body = req.json() or {}
        tools = body.get("tools")
        if body.get("stream"):
            if tools:
                return SseReply(chat_chunks(model, calls=[("get_weather", tool_args)]))
            return SseReply(chat_chunks(model, "Hello from the fault server."))
        if tools:
            return Reply(json=chat_completion(model, None, tool_calls=[tool_call(arguments=tool_args)]))
        return Reply(json=chat_completion(model))

    return chat


def fake_openai_routes(model: str = "fake", tool_args: str = WEATHER_ARGS) -> dict[tuple[str, str], Route]:
    """Routes of a well-behaved server: /health, /v1/models, /v1/chat/completions (tools, stream)."""
    return {
        ("GET", "/health"): Reply(status=200),
        ("GET", "/v1/models"): Reply(json=models_list(model)),
        ("POST", "/v1/chat/completions"): fake_chat(model, tool_args),
    }
