"""The measured requests and how they are released (closed loop, burst), plus auxiliary HTTP calls.

Hot path: `wire.WireClient` (an asyncio.Protocol per keep-alive connection; see its docstring for why not
aiohttp there). Before every measured phase the client opens as many connections as the concurrency
(`warm()`), so no TCP handshake lands inside a measured TTFT. Per network read the event loop does one
`perf_counter()`, one `list.append` and a few slices of HTTP framing; SSE and JSON are parsed after the
batch (parse.py). Auxiliary calls (/v1/models, /tokenize, /metrics) go through the HTTP layer's aiohttp
session (`api.transport.AsyncHttp`): a total timeout per call, bodies read up to a limit, redirects never
followed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from vllm_station import bounded
from vllm_station.api.client import tls_context
from vllm_station.api.transport import (
    BASE_HEADERS,
    MAX_BODY,
    AsyncHttp,
    Fetched,
    is_redirect,
    redirect_message,
)
from vllm_station.commands.bench.wire import RawResult, WireClient

__all__ = ["BenchClient", "Fetched", "RawResult", "run_burst", "run_closed_loop"]

AUX_MAX_BYTES = MAX_BODY  # /tokenize of a 4M-token prompt is ~30 MB; /metrics is a few hundred KB


class BenchClient:
    """Measured requests through `WireClient`, auxiliary calls through one aiohttp session."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        ca_file: str | None = None,
        max_concurrency: int,
        timeout: float,
        path: str = "/v1/chat/completions",
        max_body: int | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.limit = max_concurrency + 16
        headers = {**BASE_HEADERS, "Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.key_sent = bool(api_key)
        self.headers = headers
        self.tls = tls_context(ca_file) if self.base_url.startswith("https:") else None
        self.wire = WireClient(self.base_url, path, headers, timeout, max_body=max_body, tls=self.tls)
        self._http: AsyncHttp | None = None

    async def __aenter__(self) -> BenchClient:
        self._http = AsyncHttp(headers=self.headers, tls=self.tls, max_connections=self.limit)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.wire.close()
        if self._http is not None:
            await self._http.close()
            self._http = None

    @property
    def http(self) -> AsyncHttp:
        assert self._http is not None, "use BenchClient as an async context manager"
        return self._http

    def encode(self, body: bytes) -> bytes:
        return self.wire.encode(body)

    async def warm(self, n: int) -> None:
        await self.wire.warm(n)

    async def request(self, index: int, wire: bytes, t_sched: float) -> RawResult:
        return await self.wire.request(index, wire, t_sched)

    async def get_bytes(self, path: str, timeout: float = 10.0, limit: int = AUX_MAX_BYTES) -> Fetched:
        """GET `path`: status, headers and at most `limit` bytes of the body; raises only for transport
        failures (aiohttp.ClientError, TimeoutError). A redirect comes back as it is, not followed."""
        return await self.http.fetch("GET", self.base_url + path, timeout=timeout, limit=limit)

    async def post_json(self, path: str, payload: dict[str, Any], timeout: float = 60.0) -> tuple[int, Any]:
        """POST JSON; (status, the decoded answer) — None for an answer that is not 200, not JSON or
        larger than `AUX_MAX_BYTES`."""
        got = await self.http.fetch("POST", self.base_url + path, json_body=payload, timeout=timeout)
        if got.status != 200 or got.truncated:
            return got.status, None
        try:
            return got.status, bounded.loads_json(got.body)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return got.status, None

    async def get_text(self, path: str, timeout: float = 10.0) -> str:
        """GET `path` as text (at most `AUX_MAX_BYTES`); a status other than 200 raises."""
        got = await self.get_bytes(path, timeout)
        if is_redirect(got.status):
            raise aiohttp.ClientError(f"{path}: {redirect_message(got.status, got.location)}")
        if got.status != 200 or got.truncated:
            raise aiohttp.ClientError(
                f"{path}: HTTP {got.status}" + (" (too large)" if got.truncated else "")
            )
        return got.body.decode("utf-8", errors="replace")


async def run_closed_loop(
    client: BenchClient,
    requests: list[bytes],
    concurrency: int,
    on_done: Callable[[RawResult], None] | None = None,
) -> list[RawResult]:
    """`concurrency` workers; each sends the next request as soon as its previous one ends."""
    results: list[RawResult | None] = [None] * len(requests)
    items = iter(enumerate(requests))
    perf = time.perf_counter

    async def worker() -> None:
        for i, wire in items:  # one shared iterator: each request is taken exactly once
            r = await client.request(i, wire, perf())
            results[i] = r
            if on_done is not None:
                on_done(r)

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(requests))))))
    return [r for r in results if r is not None]


async def run_burst(
    client: BenchClient, requests: list[bytes], on_done: Callable[[RawResult], None] | None = None
) -> list[RawResult]:
    """All requests released together: every task waits on one start line, then sends."""
    gate = asyncio.Event()
    t0: list[float] = []

    async def one(i: int, wire: bytes) -> RawResult:
        await gate.wait()
        r = await client.request(i, wire, t0[0])
        if on_done is not None:
            on_done(r)
        return r

    tasks = [asyncio.ensure_future(one(i, w)) for i, w in enumerate(requests)]
    await asyncio.sleep(0)  # let every task reach the gate
    t0.append(time.perf_counter())
    gate.set()
    return list(await asyncio.gather(*tasks))
