"""`station simulate`: an OpenAI-compatible server with a *known* timing schedule.

It is the ground truth for `station bench` (accuracy tests, client-capacity measurements) and a GPU-free
way to rehearse a go-live. Streams are shaped exactly like vLLM 0.32's chat SSE: a role chunk
(`delta: {role: assistant, content: ""}`), one chunk per token, the last token's chunk carrying
`finish_reason`, a usage chunk with `choices: []` (when `stream_options.include_usage`), then `data: [DONE]`.

Schedule per request (all times from the moment the handler starts):
    first token at  ttft + prefill_per_token × prompt_tokens (+ jitter)
    token k at      first + k × itl (+ jitter, uniform in ±jitter, never before the previous token)
Tokens are timed against an absolute schedule (no drift). The server records the moment it hands every
token to the socket and reports that emitted schedule at `GET /sim/stats` (and on exit, `--stats-file`):
its own timing is measured, never assumed.

Tokenizer (also `/tokenize`): one whitespace-separated word is one token; each chat message adds
`MESSAGE_OVERHEAD` tokens and the generation prompt `GENERATION_OVERHEAD`.

Failure injection (`--fail KIND=RATE,...`, seeded): `5xx` (HTTP 500 JSON error before streaming), `4xx`
(HTTP 400), `truncate` (connection dropped after half the tokens, no terminating chunk), `stall` (role chunk,
then nothing until the client gives up), `error_event` (an SSE `{"error": …}` event mid-stream, like vLLM's
GenerationError, then `[DONE]`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from vllm_station.errors import UsageError

HELP = "an OpenAI-compatible server with a known timing schedule (bench ground truth)"
log = logging.getLogger("vllm_station.simulate")

MESSAGE_OVERHEAD = 4
GENERATION_OVERHEAD = 3
FAIL_KINDS = ("5xx", "4xx", "truncate", "stall", "error_event")
_WORD_TEXT = (  # one token each in common BPE/SentencePiece vocabularies
    "the of and to in is it that was for on are as with his they at be this from have or one had by word "
    "but not what all were we when your can said there use an each which she do how their if will up "
    "other about out many then them these so some her would make like him into time has look two more "
    "write go see number no way could people my than first water been call who oil its now find long down "
    "day did get come made may part"
)
_WORDS = _WORD_TEXT.split()


_ROLE_CHOICE = '{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}'


# When did the bytes of a request reach this process? aiohttp starts a handler only after its event loop has
# parsed every other pending request, so under a burst of 256 requests the handler start lags the arrival by
# tens of milliseconds. The simulator times its schedule from the arrival (the last read on the connection
# before the handler runs), recorded by wrapping RequestHandler.data_received (slotted: keyed by id()).
_RX: dict[int, float] = {}
_orig_data_received = RequestHandler.data_received


def _stamped_data_received(self: RequestHandler, data: bytes) -> None:
    _RX[id(self)] = time.perf_counter()
    _orig_data_received(self, data)


def _install_arrival_stamp() -> None:
    """Patch once, when a simulator starts (never at import: other aiohttp servers stay untouched)."""
    if RequestHandler.data_received is not _stamped_data_received:
        RequestHandler.data_received = _stamped_data_received  # type: ignore[method-assign]


def _arrival(request: web.Request) -> float:
    now = time.perf_counter()
    t = _RX.get(id(request.protocol))
    return t if t is not None and now - t < 5.0 else now


@dataclass
class SimConfig:
    model: str = "sim"
    ttft: float = 0.05
    itl: float = 0.01
    jitter: float = 0.0
    prefill_per_token: float = 0.0
    output_len: int = 64
    eos_after: int | None = None
    max_model_len: int = 131072
    fail: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    tokenize: bool = True
    api_key: str | None = None
    stall_seconds: float = 300.0

    def first_token_delay(self, prompt_tokens: int) -> float:
        return self.ttft + self.prefill_per_token * prompt_tokens


@dataclass
class _ReqRecord:
    arrive: float
    prompt_tokens: int
    first_due: float
    emits: list[float] = field(default_factory=list)
    late: list[float] = field(default_factory=list)
    end: float | None = None
    injected: str | None = None
    stream: bool = True
    rid: str = ""


def _dist(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "mean": None, "median": None, "p90": None, "p99": None, "min": None, "max": None}
    s = sorted(values)

    def pct(p: float) -> float:
        k = (len(s) - 1) * p / 100.0
        lo = int(k)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)

    return {
        "n": len(s),
        "mean": statistics.fmean(s),
        "median": pct(50),
        "p90": pct(90),
        "p99": pct(99),
        "min": s[0],
        "max": s[-1],
    }


def count_tokens(messages: list[dict[str, Any]] | None, prompt: str | None = None) -> int:
    """The simulator's tokenizer: words, plus a fixed template overhead per message."""
    if prompt is not None:
        return len(prompt.split())
    total = GENERATION_OVERHEAD
    for msg in messages or []:
        content = msg.get("content")
        if isinstance(content, list):  # [{"type": "text", "text": ...}]
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += MESSAGE_OVERHEAD + len(str(content or "").split())
    return total


class Simulator:
    """The aiohttp application and its emission records."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.records: list[_ReqRecord] = []
        self.injected: dict[str, int] = {}
        self.running = 0
        self.counters = {"prompt_tokens": 0, "generation_tokens": 0, "success": 0, "ttft_sum": 0.0}
        self.created = int(time.time())

    # ---- application -------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[self._auth])
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        if self.config.tokenize:
            app.router.add_post("/tokenize", self.tokenize)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/sim/stats", self.stats_handler)
        app.router.add_post("/sim/reset", self.reset_handler)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        key = self.config.api_key
        if key and request.path.startswith("/v1") and request.headers.get("Authorization") != f"Bearer {key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        resp: web.StreamResponse = await handler(request)
        return resp

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "station-simulate"})

    async def models(self, request: web.Request) -> web.Response:
        m = self.config.model
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": m,
                        "object": "model",
                        "created": self.created,
                        "owned_by": "vllm",
                        "root": m,
                        "parent": None,
                        "max_model_len": self.config.max_model_len,
                    }
                ],
            }
        )

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        if "messages" in body:
            n = count_tokens(body["messages"])
            if not body.get("add_generation_prompt", True):
                n -= GENERATION_OVERHEAD
        else:
            n = count_tokens(None, str(body.get("prompt", "")))
        tokens = [(i * 2654435761) % 32000 for i in range(n)]
        return web.json_response({"count": n, "max_model_len": self.config.max_model_len, "tokens": tokens})

    async def metrics(self, request: web.Request) -> web.Response:
        c = self.counters
        label = f'{{model_name="{self.config.model}"}}'
        lines = [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{label} {self.running}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{label} 0",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{label} {min(1.0, self.running / 256.0)}",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{label} {c['prompt_tokens']}",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{label} {c['generation_tokens']}",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{label} 0",
            "# TYPE vllm:time_to_first_token_seconds histogram",
            f"vllm:time_to_first_token_seconds_sum{label} {c['ttft_sum']}",
            f"vllm:time_to_first_token_seconds_count{label} {c['success']}",
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def stats_handler(self, request: web.Request) -> web.Response:
        stats = self.stats()
        if request.query.get("records"):  # per request, on this host's monotonic clock (perf_counter)
            stats["records"] = [
                {
                    "id": r.rid,
                    "arrive": r.arrive,
                    "first_emit": r.emits[0] if r.emits else None,
                    "last_emit": r.emits[-1] if r.emits else None,
                    "tokens": len(r.emits),
                    "injected": r.injected,
                }
                for r in self.records
            ]
        return web.json_response(stats)

    async def reset_handler(self, request: web.Request) -> web.Response:
        self.records.clear()
        self.injected.clear()
        return web.json_response({"reset": True})

    # ---- emission statistics -----------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """The schedule the server actually emitted (write times), next to the configured one."""
        ttft: list[float] = []
        gaps: list[float] = []
        per_req_itl: list[float] = []
        late: list[float] = []
        for r in self.records:
            if r.injected is not None or not r.emits or not r.stream:
                continue
            ttft.append(r.emits[0] - r.arrive)
            e = r.emits
            gaps.extend(e[i] - e[i - 1] for i in range(1, len(e)))
            if len(e) > 1:
                per_req_itl.append((e[-1] - e[0]) / (len(e) - 1))
            late.extend(r.late)
        cfg = self.config
        return {
            "configured": {
                "ttft": cfg.ttft,
                "itl": cfg.itl,
                "jitter": cfg.jitter,
                "prefill_per_token": cfg.prefill_per_token,
                "output_len": cfg.output_len,
                "fail": cfg.fail,
            },
            "requests": len(self.records),
            "completed": sum(1 for r in self.records if r.injected is None and r.end is not None),
            "injected": dict(self.injected),
            "emitted": {
                "ttft": _dist(ttft),
                "itl_gaps": _dist(gaps),
                "itl_request": _dist(per_req_itl),
                "lateness": _dist(late),
            },
        }

    # ---- request handling --------------------------------------------------------------------------
    def _pick_failure(self) -> str | None:
        draw = self.rng.random()
        acc = 0.0
        for kind in FAIL_KINDS:
            acc += self.config.fail.get(kind, 0.0)
            if draw < acc:
                self.injected[kind] = self.injected.get(kind, 0) + 1
                return kind
        return None

    def _n_tokens(self, body: dict[str, Any]) -> int:
        n = body.get("max_completion_tokens") or body.get("max_tokens") or self.config.output_len
        n = int(n)
        eos = self.config.eos_after
        if eos is not None and not body.get("ignore_eos", False):
            n = max(min(n, eos), int(body.get("min_tokens") or 0))
        return max(n, 1)

    async def _sleep_until(self, due: float) -> None:
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)

    def _schedule(self, first_due: float, n: int) -> list[float]:
        cfg = self.config
        due = [first_due + k * cfg.itl for k in range(n)]
        if cfg.jitter > 0:
            prev = 0.0
            for k in range(n):
                d = due[k] + self.rng.uniform(-cfg.jitter, cfg.jitter)
                due[k] = prev = max(d, prev)
        return due

    async def chat(self, request: web.Request) -> web.StreamResponse:
        arrive = _arrival(request)
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return _error(400, "BadRequestError", "invalid JSON body")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "BadRequestError", "messages must be a non-empty list")
        return await self._complete(request, body, arrive, count_tokens(messages), chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        arrive = _arrival(request)
        body = await request.json()
        prompt = body.get("prompt", "")
        n_prompt = len(prompt) if isinstance(prompt, list) else count_tokens(None, str(prompt))
        return await self._complete(request, body, arrive, n_prompt, chat=False)

    async def _complete(
        self, request: web.Request, body: dict[str, Any], arrive: float, n_prompt: int, *, chat: bool
    ) -> web.StreamResponse:
        cfg = self.config
        if n_prompt + int(body.get("max_tokens") or 0) > cfg.max_model_len:
            return _error(
                400,
                "BadRequestError",
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, you requested "
                f"{n_prompt} tokens in the messages.",
            )
        first_due = arrive + cfg.first_token_delay(n_prompt)
        if cfg.jitter > 0:
            first_due = max(arrive, first_due + self.rng.uniform(-cfg.jitter, cfg.jitter))
        stream = bool(body.get("stream", False))
        rec = _ReqRecord(arrive=arrive, prompt_tokens=n_prompt, first_due=first_due, stream=stream)
        self.records.append(rec)
        rec.injected = self._pick_failure()
        if rec.injected == "5xx":
            await self._sleep_until(first_due)
            return _error(500, "InternalServerError", "simulated server failure")
        if rec.injected == "4xx":
            return _error(400, "BadRequestError", "simulated bad request")
        n = self._n_tokens(body)
        tools = body.get("tools") if chat and body.get("tool_choice", "auto") != "none" else None
        if tools:
            pieces = _tool_call_pieces(tools, body.get("tool_choice"))
            n = len(pieces)
        else:
            pieces = []
        finish = "tool_calls" if tools else ("length" if n >= self._n_requested(body) else "stop")
        due = self._schedule(first_due, n)
        rid = rec.rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.running += 1
        try:
            if not stream:
                return await self._respond_whole(rec, body, rid, due, n_prompt, pieces, finish, chat)
            return await self._respond_stream(request, rec, body, rid, due, n_prompt, pieces, finish, chat)
        finally:
            self.running -= 1

    def _n_requested(self, body: dict[str, Any]) -> int:
        return int(body.get("max_completion_tokens") or body.get("max_tokens") or self.config.output_len)

    async def _respond_whole(
        self,
        rec: _ReqRecord,
        body: dict[str, Any],
        rid: str,
        due: list[float],
        n_prompt: int,
        pieces: list[dict[str, Any]],
        finish: str,
        chat: bool,
    ) -> web.Response:
        await self._sleep_until(due[-1])
        now = time.perf_counter()
        rec.emits = [now]
        rec.end = now
        n = len(due)
        text = " ".join(_WORDS[k % len(_WORDS)] for k in range(n))
        usage = {"prompt_tokens": n_prompt, "total_tokens": n_prompt + n, "completion_tokens": n}
        self._count_success(rec, n_prompt, n)
        base = {"id": rid, "created": int(time.time()), "model": self.config.model}
        if not chat:
            choice_c = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
            return web.json_response(
                {**base, "object": "text_completion", "choices": [choice_c], "usage": usage}
            )
        message: dict[str, Any] = {"role": "assistant", "content": None if pieces else text}
        if pieces:
            call = pieces[0]["tool_calls"][0]
            args = "".join(p["tool_calls"][0]["function"].get("arguments", "") for p in pieces)
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": args},
                }
            ]
        else:
            message["tool_calls"] = []
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
        }
        return web.json_response({**base, "object": "chat.completion", "choices": [choice], "usage": usage})

    def _count_success(self, rec: _ReqRecord, n_prompt: int, n: int) -> None:
        c = self.counters
        c["prompt_tokens"] += n_prompt
        c["generation_tokens"] += n
        c["success"] += 1
        if rec.emits:
            c["ttft_sum"] += rec.emits[0] - rec.arrive

    async def _respond_stream(
        self,
        request: web.Request,
        rec: _ReqRecord,
        body: dict[str, Any],
        rid: str,
        due: list[float],
        n_prompt: int,
        pieces: list[dict[str, Any]],
        finish: str,
        chat: bool,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        created = int(time.time())
        model = self.config.model
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = f'{{"id":"{rid}","object":"{obj}","created":{created},"model":{json.dumps(model)},"choices":['
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        n = len(due)
        words = _WORDS
        nw = len(words)
        kind = rec.injected
        cut = n // 2 if kind in ("truncate", "error_event") else n
        write = resp.write
        perf = time.perf_counter
        sleep = asyncio.sleep
        for k in range(n):
            delay = due[k] - perf()
            if delay > 0:
                await sleep(delay)
            if k == cut:
                break
            if pieces:
                delta = json.dumps(pieces[k])
            else:
                delta = '{"content":' + ('" ' if k else '"') + words[k % nw] + '"}'
            if chat:
                ch = '{"index":0,"delta":' + delta + ',"logprobs":null,"finish_reason":'
            else:
                ch = (
                    '{"index":0,"text":"'
                    + (" " if k else "")
                    + words[k % nw]
                    + '","logprobs":null,"finish_reason":'
                )
            last = k == n - 1
            ch += (f'"{finish}","stop_reason":null}}' if last else "null}") + "]}\n\n"
            data = "data: " + head + ch
            if k == 0 and chat:  # vLLM's first iteration: the role chunk, then the first token
                role = _ROLE_CHOICE
                data = "data: " + head + role + "]}\n\n" + data
                if kind == "stall":
                    await write(("data: " + head + role + "]}\n\n").encode())
                    await self._stall(request)
                    return resp
            t = perf()
            await write(data.encode())
            rec.emits.append(t)
            rec.late.append(t - due[k])
        if kind == "truncate":
            if request.transport is not None:
                request.transport.close()
            return resp
        tail = ""
        if kind == "error_event":
            err = {
                "error": {"message": "simulated generation error", "type": "InternalServerError", "code": 500}
            }
            tail += "data: " + json.dumps(err) + "\n\n"
        elif include_usage:
            usage = {"prompt_tokens": n_prompt, "total_tokens": n_prompt + n, "completion_tokens": n}
            tail += "data: " + head + "]," + '"usage":' + json.dumps(usage, separators=(",", ":")) + "}\n\n"
        tail += "data: [DONE]\n\n"
        await write(tail.encode())
        rec.end = perf()
        if kind is None:
            self._count_success(rec, n_prompt, n)
        await resp.write_eof()
        return resp

    async def _stall(self, request: web.Request) -> None:
        deadline = time.perf_counter() + self.config.stall_seconds
        while time.perf_counter() < deadline:
            tr = request.transport
            if tr is None or tr.is_closing():
                return
            await asyncio.sleep(0.05)


def _error(status: int, etype: str, message: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": etype, "param": None, "code": status}}, status=status
    )


def _tool_call_pieces(tools: list[dict[str, Any]], tool_choice: Any) -> list[dict[str, Any]]:
    """Streamed tool-call deltas like vLLM's hermes parser: id+name first, then argument fragments."""
    fn: dict[str, Any] = tools[0].get("function", {})
    if isinstance(tool_choice, dict):
        want = tool_choice.get("function", {}).get("name")
        fn = next((t.get("function", {}) for t in tools if t.get("function", {}).get("name") == want), fn)
    name = str(fn.get("name", "tool"))
    params = fn.get("parameters") or {}
    props: dict[str, Any] = params.get("properties") or {}
    required = params.get("required") or list(props)
    args: dict[str, Any] = {}
    for key in required:
        typ = (props.get(key) or {}).get("type", "string")
        enum = (props.get(key) or {}).get("enum")
        args[key] = enum[0] if enum else {"integer": 1, "number": 1.5, "boolean": True}.get(typ, "Paris")
    text = json.dumps(args)
    third = max(1, len(text) // 3)
    frags = [text[i : i + third] for i in range(0, len(text), third)]
    call_id = f"chatcmpl-tool-{zlib.crc32(text.encode()):08x}"
    first = {
        "tool_calls": [
            {"id": call_id, "type": "function", "index": 0, "function": {"name": name, "arguments": ""}}
        ]
    }
    rest = [{"tool_calls": [{"index": 0, "function": {"arguments": f}}]} for f in frags]
    return [first, *rest]


# ---- running it ------------------------------------------------------------------------------------------
def parse_fail(spec: str | None) -> dict[str, float]:
    out: dict[str, float] = {}
    if not spec:
        return out
    for part in spec.split(","):
        kind, _, rate = part.strip().partition("=")
        if kind not in FAIL_KINDS:
            raise UsageError(f"--fail: unknown kind {kind!r}; choose from {', '.join(FAIL_KINDS)}")
        try:
            out[kind] = float(rate)
        except ValueError:
            raise UsageError(f"--fail: {part!r} is not KIND=RATE (e.g. 5xx=0.1)") from None
    if sum(out.values()) > 1:
        raise UsageError("--fail: the rates add up to more than 1")
    return out


async def serve(
    config: SimConfig, host: str, port: int, ready: Any = None
) -> tuple[web.AppRunner, Simulator, int]:
    _install_arrival_stamp()
    sim = Simulator(config)
    runner = web.AppRunner(sim.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=2048, reuse_address=True)
    await site.start()
    actual = port
    for addr in runner.addresses:  # the bound port when port 0 asked for a free one
        actual = int(addr[1])
    return runner, sim, actual


class SimServer:
    """In-process simulator on its own event loop thread (tests); `with SimServer(cfg) as s: s.base_url`."""

    def __init__(self, config: SimConfig | None = None, host: str = "127.0.0.1") -> None:
        self.config = config or SimConfig()
        self.host = host
        self.port = 0
        self.sim: Simulator | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> SimServer:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(serve(self.config, self.host, 0), self._loop)
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


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed on stderr)")
    parser.add_argument("--model", default="sim", help="served model name")
    parser.add_argument("--ttft", type=float, default=0.05, help="seconds to the first token (default 0.05)")
    parser.add_argument("--itl", type=float, default=0.01, help="seconds between tokens (default 0.01)")
    parser.add_argument("--jitter", type=float, default=0.0, help="± uniform jitter per token, seconds")
    parser.add_argument(
        "--prefill-per-token",
        type=float,
        default=0.0,
        help="extra TTFT per prompt token, seconds (e.g. 3e-5)",
    )
    parser.add_argument(
        "--output-len", type=int, default=64, help="tokens when the request sets no max_tokens"
    )
    parser.add_argument(
        "--eos-after", type=int, default=None, help="stop after N tokens unless ignore_eos (emulates EOS)"
    )
    parser.add_argument("--max-model-len", type=int, default=131072 + 4096)
    parser.add_argument(
        "--fail", default=None, help="failure injection KIND=RATE,… kinds: " + ", ".join(FAIL_KINDS)
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-tokenize", action="store_true", help="serve no /tokenize (like a non-vLLM server)"
    )
    parser.add_argument("--api-key-file", type=Path, default=None, help="require this bearer key on /v1")
    parser.add_argument(
        "--stats-file", type=Path, default=None, help="write the emitted schedule here on exit"
    )


def options(args: argparse.Namespace) -> SimConfig:
    key = args.api_key_file.read_text().strip() if args.api_key_file else None
    if args.ttft < 0 or args.itl < 0 or args.jitter < 0:
        raise UsageError("--ttft, --itl and --jitter must be >= 0")
    return SimConfig(
        model=args.model,
        ttft=args.ttft,
        itl=args.itl,
        jitter=args.jitter,
        prefill_per_token=args.prefill_per_token,
        output_len=args.output_len,
        eos_after=args.eos_after,
        max_model_len=args.max_model_len,
        fail=parse_fail(args.fail),
        seed=args.seed,
        tokenize=not args.no_tokenize,
        api_key=key,
    )


def run(args: argparse.Namespace) -> int:
    config = options(args)
    return asyncio.run(_run(config, args.host, args.port, args.stats_file))


async def _run(config: SimConfig, host: str, port: int, stats_file: Path | None) -> int:
    try:
        runner, sim, actual = await serve(config, host, port)
    except OSError as err:
        raise UsageError(f"cannot listen on {host}:{port}: {err.strerror}; pick another --port") from None
    print(
        f"station simulate: listening on http://{host}:{actual} (model {config.model}, ttft {config.ttft}s, "
        f"itl {config.itl}s)",
        file=sys.stderr,
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()
    stats = sim.stats()
    em = stats["emitted"]
    if em["ttft"]["n"]:
        print(
            f"station simulate: emitted {stats['completed']} streams; "
            f"TTFT median {em['ttft']['median']:.4f}s "
            f"(configured {config.ttft}s), token gap median {em['itl_gaps']['median'] or 0:.4f}s "
            f"(configured {config.itl}s), lateness p99 {em['lateness']['p99'] or 0:.4f}s",
            file=sys.stderr,
        )
    if stats_file is not None:
        stats_file.write_text(json.dumps(stats, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    from vllm_station.cli import command_main

    return command_main("simulate", argv)


class SimProcess:
    """`station simulate` in a subprocess of its own session (tests, scripts/bench-accuracy): real timing,
    no shared GIL. `with SimProcess(["--ttft", "0.05"]) as sim: sim.base_url, sim.stats()`; stopped by
    process group on exit."""

    def __init__(self, args: list[str], python: str | None = None, start_timeout: float = 20.0) -> None:
        self.args = args
        self.python = python or sys.executable
        self.start_timeout = start_timeout
        self.base_url = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: list[str] = []

    def __enter__(self) -> SimProcess:
        cmd = [self.python, "-m", "vllm_station", "simulate", "--port", "0", *self.args]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, start_new_session=True)
        assert self.proc.stderr is not None
        deadline = time.monotonic() + self.start_timeout
        line = b""
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            if b"listening on " in line:
                self.base_url = line.split(b"listening on ", 1)[1].split()[0].decode()
                # keep draining stderr so a chatty server can never block on a full pipe
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        self.__exit__()
        raise RuntimeError(f"station simulate did not start: {line.decode(errors='replace')}")

    def _drain(self) -> None:
        proc = self.proc
        if proc is not None and proc.stderr is not None:
            with contextlib.suppress(ValueError, OSError):
                for raw in proc.stderr:
                    self.log.append(raw.decode(errors="replace"))

    def stats(self) -> dict[str, Any]:
        resp = httpx.get(self.base_url + "/sim/stats", timeout=10, trust_env=False)
        resp.raise_for_status()
        data: dict[str, Any] = resp.json()
        return data

    def reset(self) -> None:
        httpx.post(self.base_url + "/sim/reset", timeout=10, trust_env=False).raise_for_status()

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None
