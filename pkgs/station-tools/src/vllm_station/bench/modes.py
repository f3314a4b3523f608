"""The three modes as one plan of levels: sweep (closed loop), burst (all together), prefill (long prompts).

A level is: build distinct prompts (exact token counts where a tokenizer is available) → warm-up requests
(not measured) → R measured repeats → parse and summarise. Python's garbage collector is paused inside
each measured repeat (and run between them) so a collection cannot land in the middle of a token stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gc
import json
import logging
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from vllm_station.api.client import STATUS_HINTS
from vllm_station.bench import expect as expect_mod
from vllm_station.bench import prompts
from vllm_station.bench.client import BenchClient, RawResult, run_burst, run_closed_loop
from vllm_station.bench.metrics import LevelReport, summarise_level
from vllm_station.bench.parse import RequestResult, parse
from vllm_station.bench.report import BenchReport
from vllm_station.bench.scrape import Scraper
from vllm_station.errors import StationError, Unreachable, UsageError

log = logging.getLogger("vllm_station.bench")

DEFAULT_LEVELS = {
    "sweep": [1, 8, 16, 32, 64, 128, 256],
    "burst": [1, 32, 256],
    "prefill": [8192, 32768, 131072],
}


@dataclass(frozen=True)
class Count:
    """A request count: absolute (`40`) or per unit of concurrency (`3x` = 3 × C)."""

    value: int
    per_user: bool

    @classmethod
    def parse(cls, text: str) -> Count:
        t = text.strip().lower()
        try:
            if t.endswith("x"):
                return cls(int(t[:-1]), True)
            return cls(int(t), False)
        except ValueError:
            raise UsageError(
                f"{text!r} is not a request count (e.g. 40, or 3x for 3 × concurrency)"
            ) from None

    def resolve(self, concurrency: int) -> int:
        return self.value * concurrency if self.per_user else self.value

    def __str__(self) -> str:
        return f"{self.value}x" if self.per_user else str(self.value)


@dataclass
class BenchOptions:
    mode: str = "sweep"
    base_url: str = "http://127.0.0.1:8000"
    model: str | None = None
    api_key: str | None = None
    levels: list[int] = field(default_factory=lambda: list(DEFAULT_LEVELS["sweep"]))
    warmup: Count = field(default_factory=lambda: Count(1, True))
    requests: Count = field(default_factory=lambda: Count(4, True))
    repeats: int = 1
    concurrency: int = 1  # prefill: requests in flight at once
    input_len: int = 128
    output_len: int = 256
    ignore_eos: bool = True
    temperature: float | None = 0.0
    timeout: float = 600.0
    tokenizer: Path | None = None
    scrape: bool = False
    scrape_interval: float = 1.0
    seed: int = 0
    progress: bool = True
    expectations: list[expect_mod.Expectation] = field(default_factory=list)

    def level_names(self) -> list[str]:
        return [("p" if self.mode == "prefill" else "c") + str(v) for v in self.levels]


class Progress:
    """A one-line live display on stderr (a TTY), or one line per phase otherwise. Never on the hot path:
    requests only bump counters; a separate task redraws every half second."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = enabled and sys.stderr.isatty()
        self.label = ""
        self.total = 0
        self.done = 0
        self.failed = 0
        self.t0 = 0.0
        self._task: asyncio.Task[None] | None = None

    def on_done(self, r: RawResult) -> None:
        self.done += 1
        if r.error_kind is not None:
            self.failed += 1

    def _line(self) -> str:
        el = time.perf_counter() - self.t0
        return f"{self.label}: {self.done}/{self.total} requests, {self.failed} failed, {el:.1f}s"

    async def _redraw(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            print("\r\x1b[K" + self._line(), end="", file=sys.stderr, flush=True)

    def begin(self, label: str, total: int) -> None:
        self.label, self.total, self.done, self.failed = label, total, 0, 0
        self.t0 = time.perf_counter()
        if self.tty:
            self._task = asyncio.ensure_future(self._redraw())

    async def end(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.enabled:
            print(("\r\x1b[K" if self.tty else "") + self._line(), file=sys.stderr, flush=True)


def _body(opts: BenchOptions, model: str, text: str, max_tokens: int) -> bytes:
    b: dict[str, Any] = {
        "model": model,
        "messages": prompts.messages_for(text),
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": max_tokens,
    }
    if opts.ignore_eos:
        b["min_tokens"] = max_tokens
        b["ignore_eos"] = True
    if opts.temperature is not None:
        b["temperature"] = opts.temperature
    return json.dumps(b, separators=(",", ":")).encode()


async def _discover_model(client: BenchClient) -> str:
    try:
        data = await client.get_json("/v1/models", timeout=15.0)
    except aiohttp.ClientConnectorError as err:
        raise Unreachable(f"{client.base_url}: cannot connect ({err.os_error}); is the server up?") from None
    except aiohttp.ClientResponseError as err:  # it answered: not unreachable (a 401 is the key)
        hint = STATUS_HINTS.get(err.status, "pass --model to skip discovery")
        raise StationError(f"{client.base_url}/v1/models: HTTP {err.status} {err.message} — {hint}") from None
    except (aiohttp.ClientError, TimeoutError) as err:
        raise Unreachable(
            f"{client.base_url}/v1/models failed: {err}; pass --model to skip discovery"
        ) from None
    try:
        return str(data["data"][0]["id"])
    except (KeyError, IndexError, TypeError):
        raise StationError(f"{client.base_url}/v1/models lists no model; pass --model") from None


async def _counter(
    client: BenchClient, model: str, tokenizer: Path | None
) -> tuple[prompts.Counter | None, str]:
    async def server_count(messages: list[dict[str, Any]]) -> int | None:
        status, data = await client.post_json(
            "/tokenize", {"model": model, "messages": messages, "add_generation_prompt": True}
        )
        if status != 200 or not isinstance(data, dict):
            return None
        c = data.get("count")
        return int(c) if isinstance(c, int) else len(data.get("tokens") or [])

    try:
        probe = await server_count(prompts.messages_for("hello world"))
    except (aiohttp.ClientError, TimeoutError):
        probe = None
    if probe is not None:
        return server_count, "server /tokenize"
    if tokenizer is not None:
        return prompts.local_counter(tokenizer), f"local tokenizer {tokenizer}"
    return None, "none"


@dataclass
class _Level:
    name: str
    concurrency: int
    prompt_tokens: int
    output_tokens: int
    warmup: int
    per_repeat: int
    burst: bool


def plan(opts: BenchOptions) -> list[_Level]:
    out: list[_Level] = []
    for v in opts.levels:
        if opts.mode == "prefill":
            c = opts.concurrency
            out.append(_Level(f"p{v}", c, v, 1, opts.warmup.resolve(c), opts.requests.resolve(c), False))
        elif opts.mode == "burst":
            out.append(
                _Level(f"c{v}", v, opts.input_len, opts.output_len, opts.warmup.resolve(1) * v, v, True)
            )
        else:
            out.append(
                _Level(
                    f"c{v}",
                    v,
                    opts.input_len,
                    opts.output_len,
                    opts.warmup.resolve(v),
                    opts.requests.resolve(v),
                    False,
                )
            )
    return out


Runner = Callable[[list[bytes]], Awaitable[list[RawResult]]]


async def _run_level(
    client: BenchClient,
    opts: BenchOptions,
    model: str,
    lv: _Level,
    counter: prompts.Counter | None,
    counted_by: str,
    progress: Progress,
) -> tuple[LevelReport, prompts.PromptSet]:
    n_measured = lv.per_repeat * opts.repeats
    ps = await prompts.build(
        lv.warmup + n_measured,
        lv.prompt_tokens,
        counter,
        counted_by,
        seed=opts.seed * 7919 + lv.concurrency,
        verify=3 if opts.mode != "prefill" else lv.warmup + n_measured,
    )
    bodies = [client.encode(_body(opts, model, t, lv.output_tokens)) for t in ps.texts]
    expected = lv.output_tokens if opts.ignore_eos else None

    async def go(batch: list[bytes]) -> list[RawResult]:
        if lv.burst:
            out: list[RawResult] = []
            for i in range(0, len(batch), lv.concurrency):
                out.extend(await run_burst(client, batch[i : i + lv.concurrency], progress.on_done))
            return out
        return await run_closed_loop(client, batch, lv.concurrency, progress.on_done)

    await client.warm(lv.concurrency)
    if lv.warmup:
        progress.begin(f"{lv.name} warm-up", lv.warmup)
        await go(bodies[: lv.warmup])
        await progress.end()
    scraper = Scraper(client, opts.scrape_interval) if opts.scrape else None
    if scraper is not None:
        await scraper.start()
    repeats: list[list[RequestResult]] = []
    for r in range(opts.repeats):
        start = lv.warmup + r * lv.per_repeat
        batch = bodies[start : start + lv.per_repeat]
        await client.warm(lv.concurrency)  # no TCP handshake inside a measured TTFT
        gc.collect()
        gc.disable()
        progress.begin(f"{lv.name} repeat {r + 1}/{opts.repeats}", len(batch))
        try:
            raws = await go(batch)
        finally:
            gc.enable()
        await progress.end()
        repeats.append([parse(x, expected) for x in raws])
    server = await scraper.stop() if scraper is not None else None
    report = summarise_level(
        lv.name,
        opts.mode,
        lv.concurrency,
        lv.prompt_tokens,
        lv.output_tokens if opts.ignore_eos else None,
        repeats,
    )
    report.server = server
    return report, ps


async def execute(opts: BenchOptions) -> BenchReport:
    started = dt.datetime.now(dt.UTC)
    levels_plan = plan(opts)
    max_c = max(lv.concurrency for lv in levels_plan)
    progress = Progress(opts.progress)
    notes: list[str] = []
    prompt_info: dict[str, Any] = {}
    async with BenchClient(
        opts.base_url, api_key=opts.api_key, max_concurrency=max_c, timeout=opts.timeout
    ) as client:
        model = opts.model or await _discover_model(client)
        counter, counted_by = await _counter(client, model, opts.tokenizer)
        if counter is None:
            notes.append(
                "prompt lengths are approximate (no /tokenize on the server and no --tokenizer); "
                "the metrics use the server's usage.prompt_tokens"
            )
        levels: list[LevelReport] = []
        for lv in levels_plan:
            report, ps = await _run_level(client, opts, model, lv, counter, counted_by, progress)
            levels.append(report)
            prompt_info = {"counted_by": ps.counted_by, "exact": ps.exact, "verified_per_level": ps.verified}
            if report.ok == 0 and report.requests:
                notes.append(f"{lv.name}: no request succeeded ({', '.join(report.failure_examples[:1])})")
    for lv_r in levels:
        if lv_r.token_source == "chunks":
            notes.append(
                f"{lv_r.name}: the server sent no usage chunk; output tokens counted from content events "
                "(may undercount if the server coalesces tokens)"
            )
    results = expect_mod.evaluate(opts.expectations, levels)
    failures = sum(lv.n_failed for lv in levels)
    opt_dict = {k: (str(v) if isinstance(v, Count | Path) else v) for k, v in asdict(opts).items()}
    opt_dict.pop("api_key", None)
    opt_dict.pop("expectations", None)
    opt_dict["warmup"], opt_dict["requests"] = str(opts.warmup), str(opts.requests)
    return BenchReport(
        mode=opts.mode,
        base_url=opts.base_url,
        model=model,
        started_at=started.isoformat(timespec="seconds"),
        finished_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        options=opt_dict,
        client={
            "hot_path": "asyncio.Protocol HTTP/1.1, keep-alive, connections opened before each phase",
            "connections": max_c,
            "python": platform.python_version(),
        },
        prompts=prompt_info,
        levels=levels,
        failures=failures,
        expect=results,
        passed=all(e.passed for e in results),
        notes=notes,
    )
