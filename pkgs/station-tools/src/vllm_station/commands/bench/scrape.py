"""Optional server-side view of a level: vLLM's Prometheus `/metrics` before, during (max) and after.

Gauges (running, waiting, KV-cache use) are sampled every `interval` seconds during the level and
reported as their maximum; counters (prompt/generation tokens, preemptions) and the server's own TTFT
histogram as their change over the level. Label sets are summed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from vllm_station.api.prometheus import parse_prometheus
from vllm_station.commands.bench.client import BenchClient

log = logging.getLogger("vllm_station.commands.bench")

GAUGES = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
}
COUNTERS = {
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    "ttft_sum": ("vllm:time_to_first_token_seconds_sum",),
    "ttft_count": ("vllm:time_to_first_token_seconds_count",),
}


def _pick(values: dict[str, float], names: tuple[str, ...]) -> float | None:
    for n in names:
        if n in values:
            return values[n]
    return None


@dataclass
class Scraper:
    client: BenchClient
    interval: float = 1.0
    before: dict[str, float] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None
    errors: int = 0

    async def _read(self) -> dict[str, float] | None:
        try:
            return parse_prometheus(await self.client.get_text("/metrics", timeout=5.0))
        except Exception as err:  # a broken /metrics must never break the benchmark
            self.errors += 1
            log.debug("scrape failed: %s", err)
            return None

    def _note(self, values: dict[str, float]) -> None:
        for key, names in GAUGES.items():
            v = _pick(values, names)
            if v is not None:
                self.peaks[key] = max(self.peaks.get(key, v), v)

    async def start(self) -> None:
        self.before = await self._read() or {}
        self.peaks = {}
        self._note(self.before)
        self._task = asyncio.ensure_future(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            v = await self._read()
            if v is not None:
                self._note(v)

    def cancel(self) -> None:
        """Stop sampling now, without waiting (after Ctrl-C); a no-op after `stop()`."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def stop(self) -> dict[str, Any] | None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        after = await self._read()
        if after is None and not self.before:
            return None
        after = after or {}
        self._note(after)
        out: dict[str, Any] = {f"{k}_max": self.peaks.get(k) for k in GAUGES}
        for key, names in COUNTERS.items():
            a, b = _pick(after, names), _pick(self.before, names)
            out[f"{key}_delta"] = (a - b) if a is not None and b is not None else None
        s, c = out.pop("ttft_sum_delta"), out.pop("ttft_count_delta")
        out["server_ttft_mean"] = s / c if s is not None and c else None
        out["scrape_errors"] = self.errors
        return out
