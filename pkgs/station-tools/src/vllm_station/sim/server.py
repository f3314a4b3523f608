"""The simulator's aiohttp application: vLLM-shaped responses on a known schedule, its emissions measured.

Streams are shaped exactly like vLLM 0.32's chat SSE: a role chunk (`delta: {role: assistant, content: ""}`),
one chunk per token, the last token's chunk carrying `finish_reason`, a usage chunk with `choices: []` (when
`stream_options.include_usage`), then `data: [DONE]`.

Tokens are timed against an absolute schedule (no drift; see `config`). The server records the moment it
hands every token to the socket and reports that emitted schedule at `GET /sim/stats` (and on exit,
`--stats-file`): its own timing is measured, never assumed.
"""

from __future__ import annotations

import asyncio
import json
import random
import ssl
import statistics
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from vllm_station.sim.config import (
    ENGINE_MODES,
    FAIL_KINDS,
    GENERATION_OVERHEAD,
    WORDS,
    SimConfig,
    count_tokens,
)
from vllm_station.sim.tools import GatesModel

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


class _Answer(NamedTuple):
    """How one admitted request is answered, whole or streamed: its record, body and id, every token's
    deadline, the prompt's length, the tool-call deltas (empty: words), the finish reason, chat or not."""

    rec: _ReqRecord
    body: dict[str, Any]
    rid: str
    due: list[float]
    n_prompt: int
    pieces: list[dict[str, Any]]
    finish: str
    chat: bool

    def usage(self) -> dict[str, int]:
        n = len(self.due)
        return {"prompt_tokens": self.n_prompt, "total_tokens": self.n_prompt + n, "completion_tokens": n}


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
        self.engine = config.engine  # ENGINE_MODES; POST /sim/engine changes it
        self.waiting = 0  # serial: requests queued behind the engine
        self._prefill: tuple[float, float, int] | None = None  # serial: (start, seconds, prompt tokens)
        self._engine_lock = asyncio.Lock()
        self.disconnects = 0  # streams whose client closed the connection before the end
        self.in_engine = 0  # profile: requests queued for prefill, prefilling or decoding
        self._prefill_free_at = 0.0  # profile: when the prefill queue's last admitted prefill ends
        self._frozen: str | None = None  # wedge: /metrics as it was at the wedge
        # station gates' answers (reference or one serving fault), see tools.py
        self.gates = GatesModel(config.gates, config.max_model_len) if config.gates else None

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
        app.router.add_post("/sim/engine", self.engine_handler)
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
        if self.engine == "wedge" and self._frozen is not None:
            return web.Response(text=self._frozen, content_type="text/plain")
        return web.Response(text=self._metrics_text(self.running), content_type="text/plain")

    def _metrics_text(self, running: int) -> str:
        c = self.counters
        label = f'{{model_name="{self.config.model}"}}'
        kv = min(1.0, running / 256.0)
        if self._prefill is not None:  # serial: the KV cache fills as the long prefill advances
            start, seconds, tokens = self._prefill
            done = tokens * min(1.0, (time.perf_counter() - start) / seconds) if seconds > 0 else tokens
            kv = min(1.0, kv + done / self.config.max_model_len)
        lines = [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{label} {running}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{label} {self.waiting}",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{label} {kv}",
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
        return "\n".join(lines) + "\n"

    async def engine_handler(self, request: web.Request) -> web.Response:
        mode = (await request.json()).get("mode")
        if mode not in ENGINE_MODES:
            return _error(400, "BadRequestError", f"mode must be one of {', '.join(ENGINE_MODES)}")
        self.set_engine(mode)
        return web.json_response({"engine": mode})

    def set_engine(self, mode: str) -> None:
        """wedge: /metrics freezes now, nothing running (what vLLM shows with its engine core dead)."""
        self._frozen = self._metrics_text(0) if mode == "wedge" else None
        self.engine = mode

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
                "profile": cfg.profile.name if cfg.profile is not None else None,
                "time_scale": cfg.time_scale,
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
            "disconnects": self.disconnects,
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
        """Every token's deadline; with a profile only the first token's is fixed here (each later
        token's is set when the one before it is sent, from the engine's load at that moment)."""
        cfg = self.config
        if cfg.profile is not None:
            return [first_due] * n
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
        model = body.get("model")
        if model is not None and model != cfg.model:  # as vLLM answers a model it does not serve
            return _error(404, "NotFoundError", f"The model `{model}` does not exist.")
        if n_prompt + int(body.get("max_tokens") or 0) > cfg.max_model_len:
            return _error(
                400,
                "BadRequestError",
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, you requested "
                f"{n_prompt} tokens in the messages.",
            )
        if self.engine == "wedge":  # no token ever: held until the client gives up
            await self._stall(request)
            return _error(500, "InternalServerError", "simulated wedge: the engine never answered")
        self.in_engine += 1
        try:
            return await self._admitted(request, body, arrive, n_prompt, chat=chat)
        finally:
            self.in_engine -= 1

    async def _admitted(
        self, request: web.Request, body: dict[str, Any], arrive: float, n_prompt: int, *, chat: bool
    ) -> web.StreamResponse:
        cfg = self.config
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
        gates = self.gates.answer(body, n_prompt) if self.gates is not None and chat else None
        if gates is not None:
            pieces, finish, n = gates.deltas, gates.finish_reason, len(gates.deltas)
        if self.engine == "serial":  # prefill behind whatever the engine prefills now
            first_due = rec.first_due = await self._serial_prefill(n_prompt, first_due)
        elif cfg.profile is not None:  # the profile's prefill queue
            first_due = rec.first_due = await self._queued_prefill(arrive, n_prompt)
        due = self._schedule(first_due, n)
        rid = rec.rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.running += 1
        try:
            if not stream:
                message = gates.message if gates is not None else None
                if cfg.profile is not None:  # the decode rate of the engine as it is now, for every token
                    gap = 1.0 / cfg.profile.decode_rate(self.in_engine)
                    due = [first_due + k * gap for k in range(n)]
                answer = _Answer(rec, body, rid, due, n_prompt, pieces, finish, chat)
                return await self._respond_whole(answer, message)
            return await self._respond_stream(
                request, _Answer(rec, body, rid, due, n_prompt, pieces, finish, chat)
            )
        finally:
            self.running -= 1

    def _n_requested(self, body: dict[str, Any]) -> int:
        return int(body.get("max_completion_tokens") or body.get("max_tokens") or self.config.output_len)

    async def _respond_whole(
        self, answer: _Answer, gates_message: dict[str, Any] | None = None
    ) -> web.Response:
        rec, _body, rid, due, n_prompt, pieces, finish, chat = answer
        await self._sleep_until(due[-1])
        now = time.perf_counter()
        rec.emits = [now]
        rec.end = now
        n = len(due)
        text = " ".join(WORDS[k % len(WORDS)] for k in range(n))
        usage = answer.usage()
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
        if gates_message is not None:
            message = gates_message
        elif pieces:
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

    async def _respond_stream(self, request: web.Request, answer: _Answer) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream; charset=utf-8"})
        try:
            await resp.prepare(request)
            await self._stream(request, resp, answer)
        except ConnectionResetError:  # the client went away mid-stream: counted, not a server error
            self.disconnects += 1
            answer.rec.end = None
        return resp

    async def _stream(self, request: web.Request, resp: web.StreamResponse, answer: _Answer) -> None:
        rec, body, rid, due, n_prompt, pieces, finish, chat = answer
        created = int(time.time())
        model = self.config.model
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = f'{{"id":"{rid}","object":"{obj}","created":{created},"model":{json.dumps(model)},"choices":['
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        n = len(due)
        words = WORDS
        nw = len(words)
        kind = rec.injected
        cut = n // 2 if kind in ("truncate", "error_event") else n
        write = resp.write
        perf = time.perf_counter
        sleep = asyncio.sleep
        profile = self.config.profile
        for k in range(n):
            if profile is not None and k:
                due[k] = due[k - 1] + 1.0 / profile.decode_rate(self.in_engine)
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
                    return
            t = perf()
            await write(data.encode())
            rec.emits.append(t)
            rec.late.append(t - due[k])
        if kind == "truncate":
            if request.transport is not None:
                request.transport.close()
            return
        tail = ""
        if kind == "error_event":
            err = {
                "error": {"message": "simulated generation error", "type": "InternalServerError", "code": 500}
            }
            tail += "data: " + json.dumps(err) + "\n\n"
        elif include_usage:
            usage = json.dumps(answer.usage(), separators=(",", ":"))
            tail += "data: " + head + "]," + '"usage":' + usage + "}\n\n"
        tail += "data: [DONE]\n\n"
        await write(tail.encode())
        rec.end = perf()
        if kind is None:
            self._count_success(rec, n_prompt, n)
        await resp.write_eof()

    async def _queued_prefill(self, arrive: float, n_prompt: int) -> float:
        """The profile's prefill queue, on a virtual clock (no drift under load): this prefill starts when
        the one admitted before it ends, or at arrival; the first token follows it by `ttft_fixed`."""
        profile = self.config.profile
        assert profile is not None
        seconds = profile.prefill_seconds(n_prompt, self.config.time_scale)
        start = max(arrive, self._prefill_free_at)
        self._prefill_free_at = done = start + seconds
        if start > time.perf_counter():
            self.waiting += 1
            try:
                await self._sleep_until(start)
            finally:
                self.waiting -= 1
        self._prefill = (start, seconds, n_prompt)
        try:
            await self._sleep_until(done)
        finally:
            if self._prefill is not None and self._prefill[0] == start:
                self._prefill = None
        return done + profile.ttft_fixed

    async def _serial_prefill(self, n_prompt: int, first_due: float) -> float:
        self.waiting += 1
        async with self._engine_lock:
            self.waiting -= 1
            start = time.perf_counter()
            seconds = self.config.first_token_delay(n_prompt)
            self._prefill = (start, seconds, n_prompt)
            try:
                first_due = max(first_due, start + seconds)
                await self._sleep_until(first_due)
            finally:
                self._prefill = None
        return first_due

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


async def serve(
    config: SimConfig, host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, Simulator, int]:
    """Start a simulator on host:port (0: a free port); returns its runner, its records and the bound port.
    With `ssl_context` it speaks https (tests of `--ca-file`)."""
    _install_arrival_stamp()
    sim = Simulator(config)
    runner = web.AppRunner(sim.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=2048, reuse_address=True, ssl_context=ssl_context)
    await site.start()
    actual = port
    for addr in runner.addresses:  # the bound port when port 0 asked for a free one
        actual = int(addr[1])
    return runner, sim, actual
