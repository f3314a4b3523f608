"""The three modes as one plan of levels: sweep (closed loop), burst (all together), prefill (long prompts).

A level is: build distinct prompts (exact token counts where a tokenizer is available), or take the next
ones of a `--prompts` file → warm-up requests (not measured) → R measured repeats → parse and summarise.
Python's garbage collector is paused inside each measured repeat (and run between them) so a collection
cannot land in the middle of a token stream.

Ctrl-C (asyncio cancels the run) ends the run after the phase in flight is dropped: the report keeps the
levels that finished, and the finished repeats of the level in flight, and says `partial: true`.
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
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from vllm_station import argtypes, bounded
from vllm_station.api.client import status_hint
from vllm_station.api.sse import excerpt
from vllm_station.api.transport import is_redirect, redirect_message
from vllm_station.commands.bench import expect as expect_mod
from vllm_station.commands.bench import prompts
from vllm_station.commands.bench.client import BenchClient, RawResult, run_burst, run_closed_loop
from vllm_station.commands.bench.dataset import Messages, PromptFile
from vllm_station.commands.bench.metrics import LevelReport, summarise_level
from vllm_station.commands.bench.parse import RequestResult, parse
from vllm_station.commands.bench.report import BenchReport
from vllm_station.commands.bench.responses import ResponseLog, clock
from vllm_station.commands.bench.scrape import Scraper
from vllm_station.errors import StationError, Unreachable, UsageError

log = logging.getLogger("vllm_station.commands.bench")

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
                return cls(argtypes.parse_int(t[:-1]), True)
            return cls(argtypes.parse_int(t), False)
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
    ca_file: str | None = None  # verify https against this CA bundle only (a gateway's private CA)
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
    prompts_file: Path | None = None  # the prompts themselves are passed to execute()
    save_responses: Path | None = None

    def level_names(self) -> list[str]:
        return [("p" if self.mode == "prefill" else "c") + str(v) for v in self.levels]


class Progress:
    """A one-line live display on stderr (a TTY), or one line per phase otherwise. Never on the hot path:
    requests only bump counters; a separate task redraws every half second.

    The line says which level of how many, and an estimate of the time left: the run's work counted in
    rounds (a level's requests / its concurrency: one closed-loop round or one burst), times the time per
    round of the level in progress (before its first answer: of the level before it, or of the run so
    far). Higher levels take longer per round, so the estimate runs low until the last level starts."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = enabled and sys.stderr.isatty()
        self.label = ""
        self.total = 0
        self.done = 0
        self.failed = 0
        self.t0 = 0.0
        self._task: asyncio.Task[None] | None = None
        self.levels = 0  # how many levels the run has; 0: no level line (plan() not called)
        self.level = 0  # the level in progress, from 1
        self._rounds: list[float] = []  # per level: its requests / its concurrency
        self._concurrency = 1
        self._rounds_before = 0.0  # rounds of the levels before this one
        self._run_t0 = 0.0
        self._level_t0 = 0.0
        self._level_rounds = 0.0  # rounds of this level's finished phases
        self._round_s: float | None = None  # seconds per round of the last level measured

    def plan(self, rounds: list[float]) -> None:
        """The run's levels, each as rounds of work (requests / concurrency, warm-up included)."""
        self._rounds = rounds
        self.levels = len(rounds)
        self._run_t0 = time.perf_counter()

    def start_level(self, index: int, concurrency: int) -> None:
        self.level = index + 1
        self._concurrency = max(1, concurrency)
        self._rounds_before = sum(self._rounds[:index])
        self._level_t0 = time.perf_counter()
        self._level_rounds = 0.0

    def on_done(self, r: RawResult) -> None:
        self.done += 1
        if r.error_kind is not None:
            self.failed += 1

    def seconds_left(self) -> float | None:
        """The estimate of the time left (None before any work is done)."""
        if not self._rounds:
            return None
        now = time.perf_counter()
        in_level = self._level_rounds + self.done / self._concurrency
        done = self._rounds_before + in_level
        if in_level > 0:
            self._round_s = (now - self._level_t0) / in_level
        elif self._round_s is None:
            if done <= 0:
                return None
            self._round_s = (now - self._run_t0) / done
        return max(0.0, self._round_s * (sum(self._rounds) - done))

    def _line(self) -> str:
        el = time.perf_counter() - self.t0
        line = f"{self.label}: {self.done}/{self.total} requests, {self.failed} failed, {el:.1f}s"
        if self.levels:
            left = self.seconds_left()
            eta = "" if left is None else f", {eta_text(left)}"
            line = f"level {self.level}/{self.levels}{eta} — {line}"
        return line

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
        self._level_rounds += self.done / self._concurrency
        self.done = 0

    @contextlib.asynccontextmanager
    async def phase(self, label: str, total: int) -> AsyncIterator[None]:
        """`begin` … `end`; on Ctrl-C (cancellation) the redraw stops without waiting for anything."""
        self.begin(label, total)
        try:
            yield
        except BaseException:
            if self._task is not None:
                self._task.cancel()
                self._task = None
            if self.enabled:
                print(("\r\x1b[K" if self.tty else "") + self._line() + " (interrupted)", file=sys.stderr)
            raise
        await self.end()


def eta_text(seconds: float) -> str:
    """`~40 s left`, `~3 min left`."""
    if seconds < 120:
        return f"~{seconds:.0f} s left"
    return f"~{seconds / 60:.0f} min left"


def _body(opts: BenchOptions, model: str, messages: Messages, max_tokens: int) -> bytes:
    b: dict[str, Any] = {
        "model": model,
        "messages": messages,
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


MODELS_MAX_BYTES = 4 * 1024 * 1024  # a /v1/models answer larger than this is not a model list
RATE_HINT = "rate limited: the server or a gateway refuses more requests now; wait and retry"


def _not_a_list(url: str, why: str) -> StationError:
    return StationError(
        f"{url}: {why}, not an OpenAI model list — is --base-url the server's root or its /v1 URL? "
        "(or pass --model to skip discovery)"
    )


async def _discover_model(client: BenchClient) -> str:
    """The first model of `/v1/models`. Answers that are not a model list are errors (exit 1) that say
    what came back; only a server that cannot be reached at all is `Unreachable` (exit 3)."""
    url = f"{client.base_url}/v1/models"
    try:
        got = await client.get_bytes("/v1/models", timeout=min(15.0, client.timeout), limit=MODELS_MAX_BYTES)
    except aiohttp.ClientConnectorError as err:
        raise Unreachable(f"{client.base_url}: cannot connect ({err.os_error}); is the server up?") from None
    except aiohttp.ClientResponseError as err:  # aiohttp could not read an HTTP answer at all
        if "status line" in str(err.message):
            said = excerpt(" ".join(str(err.message).split()), 120)
            raise StationError(f"{url}: no HTTP answer ({said}) — is that port an HTTP server?") from None
        raise Unreachable(f"{url} failed: {excerpt(str(err), 200)}; pass --model to skip discovery") from None
    except (aiohttp.ClientError, TimeoutError) as err:
        raise Unreachable(
            f"{url} failed: {excerpt(str(err) or type(err).__name__, 200)}; pass --model to skip discovery"
        ) from None
    if is_redirect(got.status):  # never followed: the measured requests would go elsewhere
        where = got.location and excerpt(got.location, 200)
        raise StationError(f"{url}: {redirect_message(got.status, where)}")
    if got.status != 200:  # it answered: not unreachable (a 401 is the key, a 429 the rate)
        hint = status_hint(got.status, key_sent=client.key_sent) or (RATE_HINT if got.status == 429 else "")
        if got.status == 429 and got.retry_after:
            hint += f" (Retry-After: {excerpt(got.retry_after, 40)})"
        reason = excerpt(got.reason, 80)
        body = excerpt(got.body.decode("utf-8", errors="replace"), 200)
        raise StationError(
            f"{url}: HTTP {got.status} {reason}"
            + (f": {body}" if body else "")
            + f" — {hint or 'pass --model to skip discovery'}"
        )
    if got.truncated:
        raise _not_a_list(url, f"an answer larger than {MODELS_MAX_BYTES:,} bytes")
    try:
        text = got.body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _not_a_list(url, f"an answer that is not UTF-8 (byte {exc.start})") from None
    try:
        data = bounded.loads_json(text)
    except (ValueError, RecursionError):
        kind = got.content_type or "no content type"
        raise _not_a_list(url, f"a {kind} answer that is not JSON ({excerpt(text, 80)!r})") from None
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise _not_a_list(url, 'a JSON answer without a "data" list')
    if not entries:
        raise StationError(f"{url} lists no model; pass --model")
    first = entries[0]
    model_id = first.get("id") if isinstance(first, dict) else None
    if not isinstance(model_id, str) or not model_id.strip():
        raise _not_a_list(url, 'a "data" list whose first entry has no string "id"')
    return model_id


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
        if isinstance(c, int) and not isinstance(c, bool):
            return c
        tokens = data.get("tokens")
        return len(tokens) if isinstance(tokens, list) else None

    try:
        probe = await server_count(prompts.messages_for("hello world"))
    except (aiohttp.ClientError, TimeoutError, ValueError):
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
    prompt_tokens: int | None  # None: prompts from a file
    output_tokens: int
    warmup: int
    per_repeat: int
    burst: bool


# Ranges, checked when the command line (or golive's config) is parsed: exit 2 naming the option and the
# range. They bound what one run holds in memory: every request's prompt is built and serialised before
# its level starts (about 10 bytes per prompt token), and every streamed answer is kept until its repeat
# ends (about 340 bytes per token as vLLM streams them; 33 bytes once parsed).
MAX_CONCURRENCY = 4096  # connections held open at once (also limited by `ulimit -n`)
MAX_LEVELS = 32
MAX_TOKENS = 4 * 1024 * 1024  # --lengths, --input-len: 4096k, beyond any served context
MAX_OUTPUT_LEN = 1024 * 1024
MAX_REPEATS = 100
MAX_COUNT = 100_000  # --warmup/--requests N
MAX_PER_USER = 1000  # --warmup/--requests Nx
# Budgets per level, checked once the plan is known (exit 2 naming the options to lower)
MAX_LEVEL_REQUESTS = 100_000  # warm-up + measured
MAX_LEVEL_PROMPT_TOKENS = 2**25  # prompt tokens built for one level: ~340 MB
MAX_REPEAT_OUTPUT_TOKENS = 2**21  # tokens streamed in one repeat: ~700 MB before parsing


def check_budgets(opts: BenchOptions) -> None:
    """What one level holds in memory, from the plan: a usage error naming the options to lower."""
    for lv in plan(opts):
        n = lv.warmup + lv.per_repeat * opts.repeats
        if n > MAX_LEVEL_REQUESTS:
            raise UsageError(
                f"{lv.name}: {n:,} requests (warm-up + --requests × --repeats); at most "
                f"{MAX_LEVEL_REQUESTS:,} per level: lower --warmup, --requests or --repeats"
            )
        if lv.prompt_tokens is not None and n * lv.prompt_tokens > MAX_LEVEL_PROMPT_TOKENS:
            what = "--lengths" if opts.mode == "prefill" else "--input-len"
            raise UsageError(
                f"{lv.name}: {n:,} prompts × {lv.prompt_tokens:,} tokens is more than "
                f"{MAX_LEVEL_PROMPT_TOKENS:,} prompt tokens per level: lower {what}, --warmup, --requests "
                "or --repeats"
            )
        if lv.per_repeat * lv.output_tokens > MAX_REPEAT_OUTPUT_TOKENS:
            raise UsageError(
                f"{lv.name}: {lv.per_repeat:,} requests × {lv.output_tokens:,} output tokens in one repeat "
                f"is more than {MAX_REPEAT_OUTPUT_TOKENS:,}: lower --output-len or --requests"
            )


def plan(opts: BenchOptions) -> list[_Level]:
    out: list[_Level] = []
    input_len = None if opts.prompts_file is not None else opts.input_len
    for v in opts.levels:
        if opts.mode == "prefill":
            c = opts.concurrency
            out.append(_Level(f"p{v}", c, v, 1, opts.warmup.resolve(c), opts.requests.resolve(c), False))
        elif opts.mode == "burst":
            out.append(_Level(f"c{v}", v, input_len, opts.output_len, opts.warmup.resolve(1) * v, v, True))
        else:
            out.append(
                _Level(
                    f"c{v}",
                    v,
                    input_len,
                    opts.output_len,
                    opts.warmup.resolve(v),
                    opts.requests.resolve(v),
                    False,
                )
            )
    return out


@dataclass
class _FilePrompts:
    """The `--prompts` set, taken in file order across the whole run, wrapping around at its end."""

    source: PromptFile
    cursor: int = 0
    sent: int = 0

    def take(self, n: int) -> list[int]:
        size = len(self.source.prompts)
        ids = [(self.cursor + i) % size for i in range(n)]
        self.cursor = (self.cursor + n) % size
        self.sent += n
        return ids

    def info(self) -> dict[str, Any]:
        size = len(self.source.prompts)
        return {
            "counted_by": "none (prompts from a file; the metrics use the server's usage.prompt_tokens)",
            "exact": False,
            "verified_per_level": 0,
            "file": str(self.source.path),
            "file_prompts": size,
            "formats": dict(self.source.formats),
            "requests_sent": self.sent,
            "max_uses_per_prompt": -(-self.sent // size) if self.sent else 0,
        }


@dataclass
class _LevelState:
    """What a level has done so far: read after Ctrl-C to keep its finished repeats."""

    phase: str = "prompts"
    repeats: list[list[RequestResult]] = field(default_factory=list)


async def _prepare(
    client: BenchClient,
    opts: BenchOptions,
    model: str,
    lv: _Level,
    counter: prompts.Counter | None,
    counted_by: str,
    file_prompts: _FilePrompts | None,
) -> tuple[list[bytes], list[int] | None, dict[str, Any]]:
    """The wire bytes of every request of the level, the prompt ids (file prompts) and the prompt info."""
    n = lv.warmup + lv.per_repeat * opts.repeats
    if file_prompts is not None:
        ids = file_prompts.take(n)
        cache: dict[int, bytes] = {}  # a prompt used twice is one bytes object
        bodies: list[bytes] = []
        for i in ids:
            if i not in cache:
                messages = file_prompts.source.prompts[i]
                cache[i] = client.encode(_body(opts, model, messages, lv.output_tokens))
            bodies.append(cache[i])
        return bodies, ids, file_prompts.info()
    assert lv.prompt_tokens is not None
    ps = await prompts.build(
        n,
        lv.prompt_tokens,
        counter,
        counted_by,
        seed=opts.seed * 7919 + lv.concurrency,
        verify=3 if opts.mode != "prefill" else n,
    )
    bodies = [client.encode(_body(opts, model, prompts.messages_for(t), lv.output_tokens)) for t in ps.texts]
    info = {"counted_by": ps.counted_by, "exact": ps.exact, "verified_per_level": ps.verified}
    return bodies, None, info


async def _run_level(
    client: BenchClient,
    opts: BenchOptions,
    model: str,
    lv: _Level,
    counter: prompts.Counter | None,
    counted_by: str,
    progress: Progress,
    state: _LevelState,
    file_prompts: _FilePrompts | None,
    responses: ResponseLog | None,
) -> tuple[LevelReport, dict[str, Any]]:
    bodies, prompt_ids, info = await _prepare(client, opts, model, lv, counter, counted_by, file_prompts)
    expected = lv.output_tokens if opts.ignore_eos else None

    async def go(batch: list[bytes]) -> list[RawResult]:
        if lv.burst:
            out: list[RawResult] = []
            for i in range(0, len(batch), lv.concurrency):
                part = await run_burst(client, batch[i : i + lv.concurrency], progress.on_done)
                for r in part:
                    r.index += i
                out.extend(part)
            return out
        return await run_closed_loop(client, batch, lv.concurrency, progress.on_done)

    def save(
        phase: str, start: int, raws: list[RawResult], parsed: list[RequestResult], t0: tuple[float, float]
    ) -> None:
        if responses is not None:
            ids = prompt_ids[start : start + len(raws)] if prompt_ids is not None else None
            responses.write_phase(lv.name, phase, raws, parsed, ids, t0)

    state.phase = "warm-up"
    await client.warm(lv.concurrency)
    if lv.warmup:
        t0 = clock()
        async with progress.phase(f"{lv.name} warm-up", lv.warmup):
            raws = await go(bodies[: lv.warmup])
        if responses is not None:
            save("warmup", 0, raws, [parse(x, expected) for x in raws], t0)
        del raws
    scraper = Scraper(client, opts.scrape_interval) if opts.scrape else None
    try:
        if scraper is not None:
            await scraper.start()
        for r in range(opts.repeats):
            state.phase = f"repeat {r + 1}/{opts.repeats}"
            start = lv.warmup + r * lv.per_repeat
            batch = bodies[start : start + lv.per_repeat]
            await client.warm(lv.concurrency)  # no TCP handshake inside a measured TTFT
            gc.collect()
            t0 = clock()
            async with progress.phase(f"{lv.name} repeat {r + 1}/{opts.repeats}", len(batch)):
                gc.disable()
                try:
                    raws = await go(batch)
                finally:
                    gc.enable()
            parsed = [parse(x, expected) for x in raws]
            save(f"repeat{r + 1}", start, raws, parsed, t0)
            del raws
            state.repeats.append(parsed)
        state.phase = "scrape"
        server = await scraper.stop() if scraper is not None else None
    finally:
        if scraper is not None:
            scraper.cancel()
    report = _summarise(opts, lv, state.repeats)
    report.server = server
    return report, info


def _summarise(opts: BenchOptions, lv: _Level, repeats: list[list[RequestResult]]) -> LevelReport:
    return summarise_level(
        lv.name,
        opts.mode,
        lv.concurrency,
        lv.prompt_tokens,
        lv.output_tokens if opts.ignore_eos else None,
        repeats,
    )


async def execute(opts: BenchOptions, prompt_file: PromptFile | None = None) -> BenchReport:
    started = dt.datetime.now(dt.UTC)
    levels_plan = plan(opts)
    max_c = max(lv.concurrency for lv in levels_plan)
    progress = Progress(opts.progress)
    notes: list[str] = []
    prompt_info: dict[str, Any] = {}
    file_prompts = _FilePrompts(prompt_file) if prompt_file is not None else None
    responses = ResponseLog(opts.save_responses) if opts.save_responses is not None else None
    if responses is not None:
        responses.open()
        if responses.error is not None:
            raise UsageError(responses.error)
    levels: list[LevelReport] = []
    interrupted: str | None = None
    async with BenchClient(
        opts.base_url,
        api_key=opts.api_key,
        ca_file=opts.ca_file,
        max_concurrency=max_c,
        timeout=opts.timeout,
        max_body=response_limit(opts.output_len),
    ) as client:
        model = opts.model or await _discover_model(client)
        if file_prompts is None:
            counter, counted_by = await _counter(client, model, opts.tokenizer)
        else:
            counter, counted_by = None, "file"
        if counter is None and file_prompts is None:
            notes.append(
                "prompt lengths are approximate (no /tokenize on the server and no --tokenizer); "
                "the metrics use the server's usage.prompt_tokens"
            )
        state = _LevelState()
        progress.plan([(lv.warmup + opts.repeats * lv.per_repeat) / lv.concurrency for lv in levels_plan])
        try:
            for i, lv in enumerate(levels_plan):
                state = _LevelState()
                progress.start_level(i, lv.concurrency)
                report, prompt_info = await _run_level(
                    client, opts, model, lv, counter, counted_by, progress, state, file_prompts, responses
                )
                levels.append(report)
                if report.ok == 0 and report.requests:
                    notes.append(
                        f"{lv.name}: no request succeeded ({', '.join(report.failure_examples[:1])})"
                    )
        except asyncio.CancelledError:  # Ctrl-C: keep what finished (cli.run exits 130 after writing it)
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            kept = ""
            if len(levels) < len(levels_plan):
                lv = levels_plan[len(levels)]
                interrupted = f"{lv.name} {state.phase}"
                if state.repeats:
                    levels.append(_summarise(opts, lv, state.repeats))
                    kept = f" ({len(state.repeats)} of {opts.repeats} repeats of {lv.name})"
            else:
                interrupted = "the end of the run"
            if file_prompts is not None:
                prompt_info = file_prompts.info()
            done = ", ".join(x.name for x in levels) or "no level"
            notes.append(f"interrupted (Ctrl-C) during {interrupted}; the report holds {done}{kept}")
    for lv_r in levels:
        if lv_r.token_source == "chunks":
            notes.append(
                f"{lv_r.name}: the server sent no usage chunk; output tokens counted from content events "
                "(may undercount if the server coalesces tokens)"
            )
    if responses is not None and responses.error is not None:
        notes.append(responses.error)
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
        passed=interrupted is None and all(e.passed for e in results),
        partial=interrupted is not None,
        interrupted_during=interrupted,
        notes=notes,
    )


def response_limit(output_len: int) -> int:
    """Bytes one streamed answer may take before it is cut off as `oversize`: 64 KiB plus 1 KiB per
    requested token (vLLM sends ~220 bytes per token chunk; a server streaming past this is broken)."""
    return 64 * 1024 + 1024 * output_len
