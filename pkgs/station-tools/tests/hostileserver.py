"""A hostile OpenAI-compatible server: one process, one port, the misbehaviour chosen by the first path
segment, so a client's base URL picks it (`http://127.0.0.1:PORT/drip` → every request under /drip drips).

    python hostileserver.py HITS_FILE       # prints "listening on PORT", serves until killed

Modes (what every request under /<mode>/ gets, unless said otherwise; a prefix /<mode>~<run>/ is the same
mode, counted apart, for "the first N" below):

- ok          a small, well-behaved fake (models, health, chat plain/streamed with a tool call, completions,
              /tokenize, /version, /metrics); every other mode answers like it where it is not hostile;
- endless     200, then body bytes without end, as fast as the socket takes them (no length, no newline);
- line        like ok, but a streamed chat is one SSE line without end ("data: aaaa…", no newline) and a
              plain chat or completion an endless body — for the first 4 chat answers under one prefix;
- events      like ok, but a streamed chat is small valid events without end (never [DONE]) — for the
              first 4 chat answers under one prefix;
- drip        200 and its headers at once, then one byte every 0.5 s, no newline, without end;
- loris       the status line and headers themselves, one byte every 0.5 s, a header line without end;
- deep        like ok, but every JSON answer (and each streamed event) is nested 100,000 levels deep;
- huge-mml    like ok, but /v1/models (and /tokenize) report max_model_len 10**12;
- redirect    302 to the same path under /followed~<prefix>/ — a client that follows shows up there;
- echo        like ok, but the API key from the request (Authorization) is echoed in the model id, the
              answers and error bodies: literally, JSON-escaped, percent-encoded (every byte), split by a
              line break, base64-encoded inside a longer text.

Every request's "<prefix> <method> <path>" is appended to HITS_FILE (one line each), so a test can assert
that nothing reached /followed~<prefix>/.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import socketserver
import sys
import threading
from typing import Any

DRIP_S = 0.5
# modes hostile only in chat answers are so for the first few of them per base URL (/<mode>~<run>/…),
# then answer well: a command's first requests meet the misbehaviour, and a battery of forty cases does
# not wait out forty deadlines
ONLY_FIRST = {"line": 4, "events": 4}
MODEL = "hostile-model"
WEATHER = {"name": "get_weather", "arguments": json.dumps({"location": "Paris", "unit": "celsius"})}
_lock = threading.Lock()


def _head(status: int, ctype: str, extra: str = "", length: int | None = None) -> bytes:
    reason = {200: "OK", 302: "Found", 404: "Not Found"}.get(status, "X")
    lines = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {ctype}", "Connection: close"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if extra:
        lines.append(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _deep(n: int = 100_000) -> str:
    return "[" * n + "]" * n


class Handler(socketserver.BaseRequestHandler):
    server: Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(30)
        with contextlib.suppress(OSError):  # the client gave up (reset, broken pipe): how hostile runs end
            self._handle(sock)

    def _read_request(self, sock: socket.socket) -> tuple[str, str, dict[str, str], bytes] | None:
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = sock.recv(65536)
            if not data or len(buf) > 1 << 20:
                return None
            buf += data
        head, _, body = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = [*lines[0].split(" "), "", ""][:3]
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        length = int(headers.get("content-length") or 0)
        while len(body) < length:
            data = sock.recv(65536)
            if not data:
                break
            body += data
        return method, target.split("?", 1)[0], headers, body

    def _handle(self, sock: socket.socket) -> None:
        got = self._read_request(sock)
        if got is None:
            return
        method, path, headers, body = got
        segment, _, rest = path.lstrip("/").partition("/")
        mode, rest = segment.partition("~")[0], "/" + rest
        with _lock, open(self.server.hits, "a") as f:
            f.write(f"{segment} {method} {rest}\n")
        try:
            req = json.loads(body) if body else {}
        except ValueError:
            req = {}
        key = headers.get("authorization", "").removeprefix("Bearer ").strip()
        stream = isinstance(req, dict) and bool(req.get("stream"))
        chat = rest in ("/v1/chat/completions", "/v1/completions")
        if chat and mode in ONLY_FIRST:
            with _lock:
                seen = self.server.chats[segment] = self.server.chats.get(segment, 0) + 1
            if seen > ONLY_FIRST[mode]:
                mode = "ok"
        if mode == "redirect":
            sock.sendall(_head(302, "text/plain", f"Location: /followed~{segment}{rest}", 0))
        elif mode == "endless" or (mode == "line" and chat and not stream):
            self._endless(sock, _head(200, "text/event-stream" if stream else "application/json"), b"x")
        elif mode == "line" and stream:
            self._endless(sock, _head(200, "text/event-stream") + b"data: ", b"a")
        elif mode == "events" and stream:
            event = b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
            self._endless(sock, _head(200, "text/event-stream"), event)
        elif mode == "drip":
            sock.sendall(_head(200, "text/event-stream" if stream else "application/json"))
            self._drip(sock, b"a" * 100_000_000)
        elif mode == "loris":
            self._drip(sock, _head(200, "application/json")[:-2] + b"X-Drip: " + b"a" * 100_000_000)
        else:
            self._answer(sock, mode, method, rest, req, key, stream)

    def _endless(self, sock: socket.socket, head: bytes, unit: bytes) -> None:
        sock.sendall(head)
        block = unit * max(1, 65536 // len(unit))
        while not self.server.stopping.is_set():
            sock.sendall(block)

    def _drip(self, sock: socket.socket, data: bytes) -> None:
        for i in range(len(data)):
            if self.server.stopping.wait(DRIP_S):
                return
            sock.sendall(data[i : i + 1])

    def _answer(
        self, sock: socket.socket, mode: str, method: str, path: str, req: Any, key: str, stream: bool
    ) -> None:
        model = MODEL
        text = "The weather in Paris is mild."
        if mode == "echo" and key:
            percent = "".join(f"%{b:02X}" for b in key.encode())
            forms = [
                key,
                json.dumps(key)[1:-1],
                percent,
                key[:8] + "\n" + key[8:],
                key[:8] + "\r\n " + key[8:],
                base64.b64encode(b"user:" + key.encode()).decode(),  # inside a longer encoded text
            ]
            model = f"m-{key}"
            text = "echo: " + " | ".join(forms)
        mml = 10**12 if mode == "huge-mml" else 4096
        obj: Any
        if path == "/health":
            sock.sendall(_head(200, "text/plain", "", 0))
            return
        if path == "/metrics":
            metrics = b"vllm:num_requests_running 0\nvllm:generation_tokens_total 1\n"
            sock.sendall(_head(200, "text/plain", "", len(metrics)) + metrics)
            return
        if path == "/v1/models":
            obj = {"object": "list", "data": [{"id": model, "object": "model", "max_model_len": mml}]}
        elif path == "/version":
            obj = {"version": text}
        elif path == "/tokenize":
            n = len(json.dumps(req)) // 4 + 1
            obj = {"count": n, "max_model_len": mml, "tokens": []}
        elif path in ("/v1/chat/completions", "/v1/completions"):
            tools = isinstance(req, dict) and bool(req.get("tools"))
            if stream:
                self._stream(sock, mode, model, text, tools)
                return
            message: dict[str, Any] = {"role": "assistant", "content": None if tools else text}
            if tools:
                message["tool_calls"] = [{"id": "call_1", "type": "function", "function": WEATHER}]
            choice: dict[str, Any] = {"index": 0, "finish_reason": "tool_calls" if tools else "stop"}
            if path == "/v1/completions":
                choice["text"] = text
            else:
                choice["message"] = message
            obj = {
                "id": "x",
                "model": model,
                "choices": [choice],
                "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
            }
        else:
            err = f"no route {method} {path}" + (f" for key {key}" if mode == "echo" else "")
            data = json.dumps({"error": {"message": err}}).encode()
            sock.sendall(_head(404, "application/json", "", len(data)) + data)
            return
        data = (_deep() if mode == "deep" else json.dumps(obj)).encode()
        sock.sendall(_head(200, "application/json", "", len(data)) + data)

    def _stream(self, sock: socket.socket, mode: str, model: str, text: str, tools: bool) -> None:
        sock.sendall(_head(200, "text/event-stream"))
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if tools:
            deltas.append(
                {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": WEATHER}]}
            )
        else:
            deltas.extend({"content": w + " "} for w in text.split())
        for d in deltas:
            ev = {"id": "x", "model": model, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
            sock.sendall(f"data: {_deep() if mode == 'deep' else json.dumps(ev)}\n\n".encode())
        last = {
            "id": "x",
            "model": model,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if tools else "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
        }
        sock.sendall(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, hits: str) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.hits = hits
        self.stopping = threading.Event()
        self.chats: dict[str, int] = {}


def main() -> None:
    srv = Server(sys.argv[1])
    print(f"listening on {srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
