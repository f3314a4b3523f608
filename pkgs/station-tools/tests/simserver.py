"""`station simulate`'s server in this process, on its own event-loop thread (tests only).

`with SimServer(SimConfig(...)) as s: s.base_url, s.stats()`. For real timing (no shared GIL) use
`vllm_station.sim.process.SimProcess`.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from typing import Any

from aiohttp import web

from vllm_station.sim.config import SimConfig
from vllm_station.sim.server import Simulator, serve


class SimServer:
    """In-process simulator on its own event loop thread (tests); `with SimServer(cfg) as s: s.base_url`."""

    def __init__(
        self,
        config: SimConfig | None = None,
        host: str = "127.0.0.1",
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.config = config or SimConfig()
        self.ssl_context = ssl_context
        self.host = host
        self.port = 0
        self.sim: Simulator | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://{self.host}:{self.port}"

    def __enter__(self) -> SimServer:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(serve(self.config, self.host, 0, self.ssl_context), self._loop)
        self._runner, self.sim, self.port = fut.result(timeout=10)
        return self

    def stats(self) -> dict[str, Any]:
        assert self.sim is not None

        async def get() -> dict[str, Any]:
            assert self.sim is not None
            return self.sim.stats()

        return asyncio.run_coroutine_threadsafe(get(), self._loop).result(timeout=10)

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
