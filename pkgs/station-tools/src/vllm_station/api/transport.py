"""The one HTTP layer: every HTTP client of the package is made here, with the same limits.

Sync (httpx: smoke, wait-ready, probe, watchdog, gates, golive, pair, preflight) and async (aiohttp:
bench's auxiliary calls; bench's measured requests use `bench.wire` with the limits below) get:

* a TOTAL deadline per request, not per read: `SyncHttp.stream(…, timeout=T)` ends the request T seconds
  after it began, whatever the server does — a server dripping one byte every 0.5 s (in the status line,
  the headers or the body) is cut off at T. The deadline is enforced in the socket reads themselves (a
  network backend under httpcore that shortens every read, write and connect to the time left), so no
  read can outlive it;
* a size cap on the body (`MAX_BODY`), on each line of an event stream (`MAX_LINE`) and on the number of
  events (`MAX_EVENTS`): passing one is `TooLarge`, raised as soon as the cap is passed, never after
  reading on;
* redirects refused: a 3xx answer is `RedirectRefused` ("HTTP 302 … redirect to …, not followed"),
  never followed;
* `Accept-Encoding: identity` (no compressed body can inflate past the cap in one read) and no proxy
  from the environment (`trust_env=False`).

`TooLarge` and `RedirectRefused` are `httpx.HTTPError`s, so a caller that maps transport errors maps
them too; `vllm_station.api.client` gives each its own operator message.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
import typing
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpcore
import httpx

MAX_BODY = 64 * 1024 * 1024  # /tokenize of a 4M-token prompt is ~30 MB; nothing the station reads is larger
MAX_LINE = 1024 * 1024  # one server-sent-events line: a token's delta is a few hundred bytes
MAX_EVENTS = 1_000_000  # events in one stream: above any max_tokens a station serves (one event per token)
BASE_HEADERS = {"Accept-Encoding": "identity", "User-Agent": "vllm-station"}


@dataclass(frozen=True)
class Limits:
    """What one request may bring back. The defaults are the module's constants."""

    max_body: int = MAX_BODY
    max_line: int = MAX_LINE
    max_events: int = MAX_EVENTS


LIMITS = Limits()


class TooLarge(httpx.HTTPError):
    """The answer passed a size cap (body, line or event count); it was cut off there."""


class RedirectRefused(httpx.HTTPError):
    """The server answered with a redirect; it is not followed."""

    def __init__(self, message: str, *, status: int, location: str) -> None:
        super().__init__(message)
        self.status = status
        self.location = location


def redirect_message(status: int, location: str | None) -> str:
    """One wording for a refused redirect, sync and async paths alike (callers prefix what and where)."""
    to = f" to {location[:200]}" if location else ""
    return (
        f"HTTP {status} redirect{to}, not followed (redirects are refused: give the final URL, "
        "e.g. the server's own address, not one that forwards)"
    )


def is_redirect(status: int) -> bool:
    return 300 <= status < 400 and status != 304


# ---- the total deadline, in the socket reads ------------------------------------------------------


class _Deadline:
    """The deadline of the request in flight on one client (None: none)."""

    def __init__(self) -> None:
        self.at: float | None = None

    def clip(self, timeout: float | None, kind: type[Exception]) -> float | None:
        if self.at is None:
            return timeout
        left = self.at - time.monotonic()
        if left <= 0:
            raise kind("the request's total deadline passed")
        return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: _Deadline) -> None:
        self._inner, self._deadline = inner, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.clip(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadline.clip(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        inner = self._inner.start_tls(
            ssl_context, server_hostname, self._deadline.clip(timeout, httpcore.ConnectTimeout)
        )
        return _Stream(inner, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, deadline: _Deadline) -> None:
        self._inner = httpcore.SyncBackend()
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        clipped = self._deadline.clip(timeout, httpcore.ConnectTimeout)
        inner = self._inner.connect_tcp(host, port, clipped, local_address, socket_options)
        return _Stream(inner, self._deadline)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        clipped = self._deadline.clip(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_unix_socket(path, clipped, socket_options), self._deadline)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _Transport(httpx.HTTPTransport):
    """httpx's own transport (its error mapping, its response streams) over a pool whose sockets keep
    the deadline. The pool is built as httpx builds it, with the network backend added."""

    def __init__(self, verify: ssl.SSLContext | bool, deadline: _Deadline) -> None:
        super().__init__(verify=verify, trust_env=False)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify, trust_env=False),
            network_backend=_Backend(deadline),
        )


# ---- the sync client -------------------------------------------------------------------------------


class Response:
    """An answer being read, within the request's limits and deadline."""

    def __init__(self, resp: httpx.Response, limits: Limits, deadline: float) -> None:
        self.raw, self.limits, self.deadline = resp, limits, deadline

    @property
    def status_code(self) -> int:
        return self.raw.status_code

    @property
    def headers(self) -> httpx.Headers:
        return self.raw.headers

    def iter_bytes(self, limit: int | None = None) -> Iterator[bytes]:
        """The body, chunk by chunk; `TooLarge` as soon as it passes `limit` (default the body cap)."""
        cap = self.limits.max_body if limit is None else limit
        total = 0
        for chunk in self.raw.iter_raw():
            total += len(chunk)
            if total > cap:
                raise TooLarge(f"the answer passed {cap:,} bytes without ending; cut off there")
            if time.monotonic() > self.deadline:
                raise httpx.ReadTimeout("the request's total deadline passed")
            yield chunk

    def read(self, limit: int | None = None) -> bytes:
        return b"".join(self.iter_bytes(limit))

    def text(self, limit: int | None = None) -> str:
        return self.read(limit).decode(self.raw.encoding or "utf-8", errors="replace")

    def iter_lines(self) -> Iterator[str]:
        """The body's lines without terminators (\\n, \\r\\n or \\r), each at most `max_line` bytes, at most
        `max_events` blank lines (event ends) in all."""
        cap, buf, ends = self.limits.max_line, b"", 0
        too_long = f"a line of the stream passed {cap:,} bytes; cut off there"
        for chunk in self.iter_bytes():
            buf += chunk
            pos = 0
            while (cut := _line_end(buf, pos)) is not None:
                line, pos = buf[pos : cut[0]], cut[1]
                if len(line) > cap:
                    raise TooLarge(too_long)
                if not line:
                    ends += 1
                    if ends > self.limits.max_events:
                        raise TooLarge(f"the stream passed {self.limits.max_events:,} events; cut off there")
                yield line.decode("utf-8", errors="replace")
            buf = buf[pos:]
            if len(buf) > cap:
                raise TooLarge(too_long)
        if buf:
            yield buf.decode("utf-8", errors="replace")


def _line_end(buf: bytes, start: int) -> tuple[int, int] | None:
    """(end of the line that starts at `start`, start of the next) in `buf`, or None while the line is
    still open. A \\r at the very end may be the first half of \\r\\n: wait for more."""
    n = buf.find(b"\n", start)
    r = buf.find(b"\r", start, n if n >= 0 else len(buf))
    if r < 0:
        return None if n < 0 else (n, n + 1)
    if r + 1 < len(buf):
        return (r, r + 2) if buf[r + 1] == 0x0A else (r, r + 1)
    return None


class SyncHttp:
    """An httpx client under the layer's rules. `stream()` is the one way to send a request."""

    def __init__(
        self,
        *,
        headers: Mapping[str, str] | None = None,
        verify: ssl.SSLContext | bool = True,
        limits: Limits = LIMITS,
        transport: httpx.BaseTransport | None = None,
        proxy: str | None = None,
    ) -> None:
        """`proxy`: only for a server outside the station (the Hub, see `proxy_from_environment`); its
        requests keep the body caps and the deadline checked between reads, not inside them."""
        self.limits = limits
        self._deadline = _Deadline()
        self._client = httpx.Client(
            headers={**BASE_HEADERS, **(headers or {})},
            trust_env=False,
            follow_redirects=False,
            transport=transport if transport is not None else _Transport(verify, self._deadline),
            proxy=proxy,
        )

    def __enter__(self) -> SyncHttp:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    @contextlib.contextmanager
    def stream(
        self,
        method: str,
        url: str,
        *,
        timeout: float,
        connect_timeout: float | None = None,
        json_body: Any = None,
        allow_redirect_status: bool = False,
    ) -> Iterator[Response]:
        """Send a request; yields the answer with its body unread. The whole request — connect, head,
        body — ends `timeout` seconds after this call. A 3xx answer raises `RedirectRefused` unless
        `allow_redirect_status` (then it is an answer like any other, still not followed)."""
        t = httpx.Timeout(timeout, connect=min(timeout, connect_timeout or timeout))
        deadline = time.monotonic() + timeout
        previous, self._deadline.at = self._deadline.at, deadline
        try:
            req = self._client.build_request(method, url, json=json_body, timeout=t)
            resp = self._client.send(req, stream=True)
            try:
                if is_redirect(resp.status_code) and not allow_redirect_status:
                    location = resp.headers.get("location")
                    raise RedirectRefused(
                        redirect_message(resp.status_code, location),
                        status=resp.status_code,
                        location=location or "",
                    )
                yield Response(resp, self.limits, deadline)
            finally:
                with contextlib.suppress(httpx.HTTPError):
                    resp.close()
        finally:
            self._deadline.at = previous

    def fetch(self, method: str, url: str, *, timeout: float, limit: int | None = None) -> tuple[int, bytes]:
        """(status, body) of one request, the body at most `limit` bytes (else `TooLarge`)."""
        with self.stream(method, url, timeout=timeout) as resp:
            return resp.status_code, resp.read(limit)


def proxy_from_environment(url: str) -> str | None:
    """The proxy the environment sets for `url` (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`), for the one
    server outside the station the tools talk to: the Hub. The station's own servers never go through one."""
    parts = urlsplit(url)
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


# ---- the async client (aiohttp) ------------------------------------------------------------------


@dataclass
class Fetched:
    """An answer read up to a limit (`truncated`: there was more). A 3xx is kept as is, not followed:
    `location` says where it pointed."""

    status: int
    reason: str
    content_type: str
    retry_after: str | None
    location: str | None
    body: bytes
    truncated: bool


async def _read_limited(resp: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    data = await resp.content.read(limit + 1) if limit >= 0 else b""
    chunks = [data]
    total = len(data)
    while data and total <= limit:  # read() may return less than asked before the end
        data = await resp.content.read(limit + 1 - total)
        chunks.append(data)
        total += len(data)
    body = b"".join(chunks)
    return body[:limit], len(body) > limit


class AsyncHttp:
    """An aiohttp session under the layer's rules: total timeout per request (aiohttp's `total`),
    bodies read up to a limit, redirects never followed, no proxy from the environment."""

    def __init__(
        self,
        *,
        headers: Mapping[str, str] | None = None,
        tls: ssl.SSLContext | bool | None = None,
        max_connections: int = 100,
        limits: Limits = LIMITS,
    ) -> None:
        self.limits = limits
        connector = aiohttp.TCPConnector(
            limit=max_connections,
            limit_per_host=max_connections,
            ssl=tls if isinstance(tls, ssl.SSLContext) else True,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers={**BASE_HEADERS, **(headers or {})},
            trust_env=False,
            auto_decompress=False,
        )

    async def close(self) -> None:
        await self._session.close()

    async def fetch(
        self,
        method: str,
        url: str,
        *,
        timeout: float,
        json_body: Any = None,
        limit: int | None = None,
    ) -> Fetched:
        """One request, its body read up to `limit` (default the body cap); raises only for transport
        failures (aiohttp.ClientError, TimeoutError). A redirect is returned, never followed."""
        cap = self.limits.max_body if limit is None else min(limit, self.limits.max_body)
        data = None if json_body is None else json.dumps(json_body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else None
        async with self._session.request(
            method,
            url,
            data=data,
            headers=headers,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            body, truncated = await _read_limited(resp, cap)
            return Fetched(
                status=resp.status,
                reason=resp.reason or "",
                content_type=resp.headers.get("Content-Type", ""),
                retry_after=resp.headers.get("Retry-After"),
                location=resp.headers.get("Location"),
                body=body,
                truncated=truncated,
            )
