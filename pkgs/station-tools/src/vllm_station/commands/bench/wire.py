"""A minimal HTTP/1.1 client for the measured requests: one asyncio.Protocol per keep-alive connection.

Why not aiohttp for the hot path: measured on this project's 2-core machine against `station simulate`,
aiohttp spends ~0.3 ms of Python per request before the request leaves and a coroutine wake-up per network
read; at C=256 that client-side work alone added tens of milliseconds to the measured TTFT. Here a request
is one `transport.write()` of pre-serialised bytes, and each network read costs one `perf_counter()`, one
`list.append` and a few slice operations of HTTP framing (chunked or Content-Length) in `data_received` —
no coroutine switch per token. SSE/JSON parsing happens after the batch (parse.py). TLS works through
asyncio's `ssl` support. aiohttp remains for the few auxiliary calls (/v1/models, /tokenize, /metrics).

Each RawResult.chunks entry is (arrival time, body bytes) — framing removed — exactly what parse.py reads.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from vllm_station.api.transport import MAX_BODY, is_redirect, redirect_message

_HEAD_END = b"\r\n\r\n"
MAX_HEAD = 64 * 1024  # response status line + headers
MAX_LINE = 4096  # a chunk-size or trailer line


@dataclass(slots=True)
class RawResult:
    """One request as seen on the wire: timestamps (perf_counter seconds) and body bytes per network read."""

    index: int
    t_sched: float  # when the request was due (closed loop: a worker became free; burst: the start line)
    t_start: float = 0.0  # the client began this request (before taking a connection)
    t_sent: float = 0.0  # just before the request was handed to the kernel; TTFT and E2E count from here
    t_headers: float = 0.0  # response headers received
    t_end: float = 0.0  # end of the response (complete, error or timeout)
    status: int = 0
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    error_kind: str | None = (
        None  # transport-level: connect, timeout, truncated, oversize, redirect, http_4xx, http_5xx
    )
    error: str = ""
    size: int = 0  # body bytes received


class _Conn(asyncio.Protocol):
    """One connection. State machine per response: head → body (chunked | length | until-close) → done."""

    def __init__(self, max_body: int | None = None) -> None:
        self.max_body = max_body
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.res: RawResult | None = None
        self.done: asyncio.Future[None] | None = None
        self.received_any = False
        self._buf = b""
        self._mode = "head"  # head | chunk_size | chunk_data | chunk_crlf | trailer | length | close
        self._remaining = 0
        self.keep_alive = True

    # ---- asyncio callbacks --------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter()
        res = self.res
        if res is None:  # bytes outside a request: the server is confused; drop the connection
            self.keep_alive = False
            if self.transport is not None:
                self.transport.close()
            return
        self.received_any = True
        self._feed(t, res, data)
        if self.max_body is not None and res.size > self.max_body:
            self._fail(res, "oversize", f"the answer passed {self.max_body:,} bytes without ending; cut off")

    def _fail(self, res: RawResult, kind: str, why: str) -> None:
        """A response the client will not read further: record why, drop the connection, finish."""
        if self.done is None or self.done.done():
            return
        res.error_kind, res.error = kind, why
        self.keep_alive = False
        if self.transport is not None:
            self.transport.close()
        self._finish()

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        res = self.res
        if res is None or self.done is None or self.done.done():
            return
        if self._mode == "close":
            self._finish()
        elif self._mode == "head":
            res.error_kind = "connect"
            res.error = f"connection closed before an answer ({exc or 'EOF'})"
            self._finish()
        else:
            res.error_kind = "truncated"
            res.error = f"stream cut off: connection closed mid-response ({exc or 'EOF'})"
            self._finish()

    # ---- framing ------------------------------------------------------------------------------------
    def _feed(self, t: float, res: RawResult, data: bytes) -> None:
        if self._mode == "head":
            self._buf += data
            end = self._buf.find(_HEAD_END)
            if end < 0:
                if len(self._buf) > MAX_HEAD:
                    self._fail(res, "malformed", f"no end of the response head within {MAX_HEAD:,} bytes")
                return
            head, data = self._buf[:end], self._buf[end + 4 :]
            self._buf = b""
            res.t_headers = t
            if not self._head(res, head):
                return
            if self._mode == "length" and self._remaining == 0:
                self._finish()
                return
        mode = self._mode
        if mode == "length":
            n = min(len(data), self._remaining)
            if n:
                res.chunks.append((t, data[:n]))
                res.size += n
            self._remaining -= n
            if self._remaining == 0:
                self._finish()
            return
        if mode == "close":
            if data:
                res.chunks.append((t, data))
                res.size += len(data)
            return
        self._chunked(t, res, data)

    def _head(self, res: RawResult, head: bytes) -> bool:
        lines = head.split(b"\r\n")
        try:
            res.status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            res.status = 0
        chunked = False
        length: int | None = None
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            key = name.strip().lower()
            if key == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif key == b"content-length":
                v = value.strip()
                if not v.isdigit() or len(v) > 18:
                    self._fail(res, "malformed", f"bad Content-Length {v[:40]!r}")
                    return False
                length = int(v)
            elif key == b"connection" and b"close" in value.lower():
                self.keep_alive = False
        if chunked:
            self._mode = "chunk_size"
        elif length is not None:
            self._mode, self._remaining = "length", length
        else:
            self._mode, self.keep_alive = "close", False
        return True

    def _chunked(self, t: float, res: RawResult, data: bytes) -> None:
        pos, n = 0, len(data)
        while pos < n or self._mode == "trailer":
            mode = self._mode
            if mode == "chunk_data":
                take = min(self._remaining, n - pos)
                res.chunks.append((t, data[pos : pos + take]))
                res.size += take
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._mode = "chunk_crlf"
                    self._remaining = 2
                continue
            if mode == "chunk_crlf":
                take = min(self._remaining, n - pos)
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._mode = "chunk_size"
                continue
            # chunk_size or trailer: line-oriented
            self._buf += data[pos:]
            pos = n
            end = self._buf.find(b"\r\n")
            if end < 0:
                if len(self._buf) > MAX_LINE:
                    self._fail(res, "malformed", f"a chunk-size line longer than {MAX_LINE} bytes")
                return
            line, self._buf = self._buf[:end], self._buf[end + 2 :]
            if mode == "trailer":
                if not line:  # the blank line after the last chunk: response complete
                    self._finish()
                    return
                continue
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                res.error_kind, res.error = "truncated", f"bad chunk size line {line[:40]!r}"
                self.keep_alive = False
                self._finish()
                return
            if size == 0:
                self._mode = "trailer"
            else:
                self._mode, self._remaining = "chunk_data", size
            if self._buf:
                data, pos, n = self._buf, 0, len(self._buf)
                self._buf = b""

    def _finish(self) -> None:
        res = self.res
        if res is not None:
            res.t_end = time.perf_counter()
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def begin(self, res: RawResult, done: asyncio.Future[None]) -> None:
        self.res, self.done = res, done
        self._mode, self._buf, self._remaining, self.received_any = "head", b"", 0, False


class WireClient:
    """Keep-alive connections to one origin; `request()` never raises for request-level failures."""

    def __init__(
        self,
        base_url: str,
        path: str,
        headers: dict[str, str],
        timeout: float,
        *,
        max_body: int | None = None,
        tls: ssl.SSLContext | bool | None = None,
    ) -> None:
        u = urlsplit(base_url)
        self.max_body = MAX_BODY if max_body is None else min(max_body, MAX_BODY)
        self.host = u.hostname or "127.0.0.1"
        self.tls = u.scheme == "https"
        self.port = u.port or (443 if self.tls else 80)
        # https: the context given (a --ca-file), else the system's CAs
        context = tls if isinstance(tls, ssl.SSLContext) else ssl.create_default_context()
        self.ssl: ssl.SSLContext | None = context if self.tls else None
        self.timeout = timeout
        prefix = (u.path or "").rstrip("/")
        host_header = self.host if u.port is None else f"{self.host}:{self.port}"
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._head = f"POST {prefix}{path} HTTP/1.1\r\nHost: {host_header}\r\n{extra}".encode()
        self._idle: list[_Conn] = []
        self._all: list[_Conn] = []

    def encode(self, body: bytes) -> bytes:
        """The whole request on the wire; built before the measured phase."""
        return self._head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_connection(
            lambda: _Conn(self.max_body),  # the HTTP layer's body cap at most
            self.host,
            self.port,
            ssl=self.ssl,
            server_hostname=self.host if self.tls else None,
        )
        self._all.append(proto)
        return proto

    async def warm(self, n: int) -> None:
        """Open connections until `n` are idle (before a measured phase: no TCP handshakes inside it)."""
        self._idle = [c for c in self._idle if not c.closed]
        need = n - len(self._idle)
        if need > 0:
            conns = await asyncio.gather(*(self._connect() for _ in range(need)), return_exceptions=True)
            self._idle.extend(c for c in conns if isinstance(c, _Conn))

    async def request(self, index: int, wire: bytes, t_sched: float) -> RawResult:
        perf = time.perf_counter
        res = RawResult(index=index, t_sched=t_sched)
        res.t_start = perf()
        for attempt in (0, 1):
            conn: _Conn | None = None
            while self._idle and conn is None:
                c = self._idle.pop()
                if not c.closed:
                    conn = c
            reused = conn is not None
            if conn is None:
                try:
                    conn = await asyncio.wait_for(self._connect(), timeout=min(30.0, self.timeout))
                except (OSError, TimeoutError) as err:
                    res.error_kind, res.error = "connect", f"cannot connect to {self.host}:{self.port}: {err}"
                    res.t_end = perf()
                    return res
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            conn.begin(res, done)
            assert conn.transport is not None
            # stamp, then write: on a busy host the kernel may run the server as soon as the bytes land,
            # before this process gets the CPU back; a stamp taken after write() would then be late
            res.t_sent = perf()
            conn.transport.write(wire)
            remaining = self.timeout - (res.t_sent - res.t_start)
            try:
                await asyncio.wait_for(done, timeout=max(0.001, remaining))
            except TimeoutError:
                res.error_kind, res.error = "timeout", f"no complete answer within {self.timeout:g}s"
                res.t_end = perf()
                conn.res = None
                if conn.transport is not None:
                    conn.transport.close()
                return res
            conn.res = None
            if res.error_kind == "connect" and reused and not conn.received_any and attempt == 0:
                res.error_kind, res.error = None, ""  # a stale keep-alive connection: retry once, fresh
                continue
            break
        assert conn is not None
        if res.error_kind is None and is_redirect(res.status):
            res.error_kind, res.error = "redirect", redirect_message(res.status, None)
        elif res.error_kind is None and res.status != 200:
            res.error_kind = "http_5xx" if res.status >= 500 else "http_4xx"
            res.error = f"HTTP {res.status}"
        if conn.keep_alive and not conn.closed and res.error_kind is None:
            self._idle.append(conn)
        elif conn.transport is not None and not conn.closed:
            conn.transport.close()
        return res

    def close(self) -> None:
        for c in self._all:
            if c.transport is not None and not c.closed:
                c.transport.close()
        self._idle.clear()
        self._all.clear()
