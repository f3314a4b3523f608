"""The asynchronous hot path: send a pre-serialised request, timestamp every network read, nothing else.

Why aiohttp (not httpx): with hundreds of concurrent SSE streams on a small client, aiohttp's C-accelerated
HTTP parser and `StreamReader.readany()` cost far less per network read than httpx's pure-Python stream
iteration; `readany()` also sidesteps aiohttp's line-based reader, whose 64 KiB default limit
(`read_bufsize`) raises "Chunk too big" on long lines. Parsing the SSE events (JSON) happens only after a
batch of requests has finished (`parse.py`), so the event loop does nothing per token but `perf_counter()`
and `list.append` while streams are in flight.

Connection limits are set above the largest concurrency (aiohttp's default pool of 100 would queue
requests 101…256 in the client and show up as server TTFT).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import aiohttp

READ_BUFSIZE = 1 << 20  # per-connection read buffer (the default is 64 KiB)


@dataclass(slots=True)
class RawResult:
    """One request as seen on the wire: timestamps (perf_counter seconds) and raw bytes."""

    index: int
    t_sched: float  # when the request was due (closed loop: a worker became free; burst: the start line)
    t_start: float = 0.0  # just before the request was handed to aiohttp; TTFT and E2E count from here
    t_sent: float = 0.0  # request headers written to the socket (aiohttp trace), else t_start
    t_headers: float = 0.0  # response headers received
    t_end: float = 0.0  # end of the response (EOF, error or timeout)
    status: int = 0
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    error_kind: str | None = None  # transport-level failure: connect, timeout, truncated, http_4xx, http_5xx
    error: str = ""


def _trace_config() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()

    async def headers_sent(session: Any, ctx: SimpleNamespace, params: Any) -> None:
        res = ctx.trace_request_ctx
        if res is not None:
            res.t_sent = time.perf_counter()

    trace.on_request_headers_sent.append(headers_sent)
    return trace


class BenchClient:
    """One aiohttp session sized for `max_concurrency` streams."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        max_concurrency: int,
        timeout: float,
        path: str = "/v1/chat/completions",
    ) -> None:
        self.url = base_url.rstrip("/") + path
        self.base_url = base_url.rstrip("/")
        self.timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=min(30.0, timeout))
        self.limit = max_concurrency + 16
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> BenchClient:
        connector = aiohttp.TCPConnector(
            limit=self.limit, limit_per_host=self.limit, keepalive_timeout=75, enable_cleanup_closed=True
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers=self.headers,
            read_bufsize=READ_BUFSIZE,
            trace_configs=[_trace_config()],
            timeout=self.timeout,
            auto_decompress=False,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use BenchClient as an async context manager"
        return self._session

    async def request(self, index: int, body: bytes, t_sched: float) -> RawResult:
        """POST one streamed request; never raises for request-level failures."""
        perf = time.perf_counter
        res = RawResult(index=index, t_sched=t_sched)
        chunks = res.chunks
        append = chunks.append
        res.t_start = res.t_sent = perf()
        try:
            async with self.session.post(self.url, data=body, trace_request_ctx=res) as resp:
                res.t_headers = perf()
                res.status = resp.status
                if resp.status != 200:
                    append((perf(), await resp.read()))
                    res.error_kind = "http_5xx" if resp.status >= 500 else "http_4xx"
                    res.error = f"HTTP {resp.status}"
                else:
                    readany = resp.content.readany
                    while True:
                        data = await readany()
                        if not data:
                            break
                        append((perf(), data))
        except TimeoutError:
            res.error_kind, res.error = "timeout", f"no complete answer within {self.timeout.total:g}s"
        except aiohttp.ClientPayloadError as err:
            res.error_kind, res.error = "truncated", f"stream cut off: {err}"
        except aiohttp.ServerDisconnectedError as err:
            res.error_kind = "truncated" if res.t_headers else "connect"
            res.error = f"server disconnected: {err}"
        except aiohttp.ClientConnectorError as err:
            res.error_kind, res.error = "connect", f"cannot connect: {err.os_error}"
        except aiohttp.ClientError as err:
            res.error_kind = "truncated" if res.t_headers else "connect"
            res.error = f"{type(err).__name__}: {err}"
        res.t_end = perf()
        return res

    async def get_json(self, path: str, timeout: float = 10.0) -> Any:
        async with self.session.get(
            self.base_url + path, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as resp:
            resp.raise_for_status()
            return await resp.json(content_type=None)

    async def post_json(self, path: str, payload: dict[str, Any], timeout: float = 60.0) -> tuple[int, Any]:
        async with self.session.post(
            self.base_url + path, json=payload, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as resp:
            if resp.status != 200:
                return resp.status, None
            return resp.status, await resp.json(content_type=None)

    async def get_text(self, path: str, timeout: float = 10.0) -> str:
        async with self.session.get(
            self.base_url + path, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as resp:
            resp.raise_for_status()
            return await resp.text()


async def run_closed_loop(
    client: BenchClient,
    bodies: list[bytes],
    concurrency: int,
    on_done: Callable[[RawResult], None] | None = None,
) -> list[RawResult]:
    """`concurrency` workers; each sends the next body as soon as its previous request ends."""
    results: list[RawResult | None] = [None] * len(bodies)
    items = iter(enumerate(bodies))
    perf = time.perf_counter

    async def worker() -> None:
        for i, body in items:  # one shared iterator: each body is taken exactly once
            r = await client.request(i, body, perf())
            results[i] = r
            if on_done is not None:
                on_done(r)

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(bodies))))))
    return [r for r in results if r is not None]


async def run_burst(
    client: BenchClient, bodies: list[bytes], on_done: Callable[[RawResult], None] | None = None
) -> list[RawResult]:
    """All requests released together: every task waits on one start line, then sends."""
    gate = asyncio.Event()
    t0: list[float] = []

    async def one(i: int, body: bytes) -> RawResult:
        await gate.wait()
        r = await client.request(i, body, t0[0])
        if on_done is not None:
            on_done(r)
        return r

    tasks = [asyncio.ensure_future(one(i, b)) for i, b in enumerate(bodies)]
    await asyncio.sleep(0)  # let every task reach the gate
    t0.append(time.perf_counter())
    gate.set()
    return list(await asyncio.gather(*tasks))
