"""The measured requests and how they are released (closed loop, burst), plus auxiliary HTTP calls.

Hot path: `wire.WireClient` (an asyncio.Protocol per keep-alive connection; see its docstring for why not
aiohttp there). Before every measured phase the client opens as many connections as the concurrency
(`warm()`), so no TCP handshake lands inside a measured TTFT. Per network read the event loop does one
`perf_counter()`, one `list.append` and a few slices of HTTP framing; SSE and JSON are parsed after the
batch (parse.py). Auxiliary calls (/v1/models, /tokenize, /metrics) use aiohttp with explicit timeouts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from vllm_station import bounded
from vllm_station.api.client import tls_context
from vllm_station.bench.wire import RawResult, WireClient

__all__ = ["BenchClient", "Fetched", "RawResult", "run_burst", "run_closed_loop"]

AUX_MAX_BYTES = 64 * 1024 * 1024  # /tokenize of a 4M-token prompt is ~30 MB; /metrics is a few hundred KB


@dataclass
class Fetched:
    """An auxiliary answer, read up to a limit (`truncated`: there was more)."""

    status: int
    reason: str
    content_type: str
    retry_after: str | None
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
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.headers = headers
        self.tls = tls_context(ca_file) if self.base_url.startswith("https:") else None
        self.wire = WireClient(self.base_url, path, headers, timeout, max_body=max_body, tls=self.tls)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> BenchClient:
        connector = aiohttp.TCPConnector(
            limit=self.limit, limit_per_host=self.limit, ssl=self.tls if self.tls is not None else True
        )
        self._session = aiohttp.ClientSession(connector=connector, headers=self.headers)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.wire.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use BenchClient as an async context manager"
        return self._session

    def encode(self, body: bytes) -> bytes:
        return self.wire.encode(body)

    async def warm(self, n: int) -> None:
        await self.wire.warm(n)

    async def request(self, index: int, wire: bytes, t_sched: float) -> RawResult:
        return await self.wire.request(index, wire, t_sched)

    async def get_bytes(self, path: str, timeout: float = 10.0, limit: int = AUX_MAX_BYTES) -> Fetched:
        """GET `path`: status, headers and at most `limit` bytes of the body; raises only for transport
        failures (aiohttp.ClientError, TimeoutError)."""
        async with self.session.get(
            self.base_url + path, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as resp:
            body, truncated = await _read_limited(resp, limit)
            return Fetched(
                status=resp.status,
                reason=resp.reason or "",
                content_type=resp.headers.get("Content-Type", ""),
                retry_after=resp.headers.get("Retry-After"),
                body=body,
                truncated=truncated,
            )

    async def post_json(self, path: str, payload: dict[str, Any], timeout: float = 60.0) -> tuple[int, Any]:
        """POST JSON; (status, the decoded answer) — None for an answer that is not 200, not JSON or
        larger than `AUX_MAX_BYTES`."""
        async with self.session.post(
            self.base_url + path, json=payload, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as resp:
            if resp.status != 200:
                return resp.status, None
            body, truncated = await _read_limited(resp, AUX_MAX_BYTES)
        if truncated:
            return resp.status, None
        try:
            return resp.status, bounded.loads_json(body)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return resp.status, None

    async def get_text(self, path: str, timeout: float = 10.0) -> str:
        """GET `path` as text (at most `AUX_MAX_BYTES`); a status other than 200 raises."""
        got = await self.get_bytes(path, timeout)
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
