"""The go/no-go checks of an OpenAI-compatible server: one request each, one judgement, one result.

What `station smoke` runs in order and `station probe` runs on a timer — one definition of each check:

1. `models`           GET /v1/models lists the served name (without a model: the single listed model).
2. `chat`             a chat completion returns content (or reasoning content); finish_reason and usage.
3. `tool_call`        get_weather(location, unit) with tool_choice auto|required: exactly one call, type
                      function, name get_weather, arguments a JSON object with a non-empty location.
4. `tool_call_stream` the same call streamed: the name arrives once, the argument fragments join to a JSON
                      object with the same keys as the non-streamed call's and a non-empty location.

Each check returns a `CheckResult` (pass | warn | fail | skip, a latency, a one-line reason, details with
stable keys) and never raises `ApiError`: a failed request is a failed check whose `error` names its kind.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from vllm_station import bounded
from vllm_station.api import (
    ApiClient,
    ApiError,
    ApiTimeout,
    ChatResult,
    HttpStatusError,
    ProtocolError,
    StreamError,
    StreamResult,
    ToolCall,
    Usage,
    collect_stream,
)
from vllm_station.api.sse import excerpt
from vllm_station.errors import EXIT_FAIL, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, Unreachable

log = logging.getLogger(__name__)

CHECKS = ("models", "chat", "tool_call", "tool_call_stream")
SEED = 1234
CHAT_MAX_TOKENS = 64
TOOL_MAX_TOKENS = 512  # room for a reasoning model to think before it calls the tool

CHAT_MESSAGES = [{"role": "user", "content": "Say hello."}]
WEATHER_MESSAGES = [{"role": "user", "content": "What is the weather in Paris in celsius?"}]
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"


@dataclass
class CheckResult:
    name: str
    result: str  # pass | warn | fail | skip
    latency_s: float | None
    reason: str
    details: dict[str, Any] = field(default_factory=dict)
    # what kind of error made it fail: unreachable | timeout | http | protocol | stream | api; None otherwise
    error: str | None = None

    def __post_init__(self) -> None:
        if self.latency_s is not None:
            self.latency_s = round(self.latency_s, 4)


# ---- details with stable keys -------------------------------------------------------------------


def _usage(u: Usage | None) -> dict[str, int | None] | None:
    return (
        None
        if u is None
        else {
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens,
        }
    )


def _details(name: str) -> dict[str, Any]:
    if name == "models":
        return {"models": [], "max_model_len": None}
    base: dict[str, Any] = {"finish_reason": None, "usage": None}
    if name == "chat":
        return {**base, "content_chars": 0, "reasoning_chars": 0}
    base |= {"tool_calls": 0, "name": None, "arguments": None, "content_chars": 0}
    if name == "tool_call_stream":
        base |= {
            "chunks": 0,
            "first_chunk_s": None,
            "name_deltas": None,
            "argument_fragments": None,
            "matches_non_streamed": None,
        }
    return base


def _usage_text(u: Usage | None) -> str:
    if u is None:
        return "no usage"
    return (
        f"{u.prompt_tokens if u.prompt_tokens is not None else '?'} prompt + "
        f"{u.completion_tokens if u.completion_tokens is not None else '?'} completion tokens"
    )


# ---- the checks ---------------------------------------------------------------------------------


@dataclass
class _ToolVerdict:
    ok: bool
    reason: str
    arguments: dict[str, Any] | None = None


def judge_tool_calls(calls: list[ToolCall], content: str | None) -> _ToolVerdict:
    """Exactly one call, type function, name get_weather, JSON-object arguments with a non-empty location."""
    if not calls:
        said = (
            f": the model answered in text: {excerpt(content, 60)!r}" if content and content.strip() else ""
        )
        return _ToolVerdict(False, f"no tool call{said}")
    if len(calls) > 1:
        names = ", ".join(str(c.name) for c in calls)
        return _ToolVerdict(False, f"{len(calls)} tool calls ({names}); expected exactly one")
    call = calls[0]
    if call.type != "function":
        return _ToolVerdict(False, f"tool call type is {call.type!r}, expected 'function'")
    if call.name != "get_weather":
        return _ToolVerdict(False, f"tool call name is {call.name!r}, expected 'get_weather'")
    try:
        args = bounded.loads_json(call.arguments)
    except ValueError as exc:
        return _ToolVerdict(
            False,
            f"get_weather arguments are not valid JSON ({exc.__class__.__name__}: "
            f"{exc}): {excerpt(call.arguments, 80)!r}",
        )
    if not isinstance(args, dict):
        return _ToolVerdict(
            False,
            f"get_weather arguments are a JSON {type(args).__name__}, expected an object: "
            f"{excerpt(call.arguments, 80)!r}",
        )
    loc = args.get("location")
    if not isinstance(loc, str) or not loc.strip():
        return _ToolVerdict(
            False,
            f"get_weather arguments have no non-empty 'location': {excerpt(call.arguments, 80)!r}",
            args,
        )
    return _ToolVerdict(True, f"get_weather({json.dumps(args, ensure_ascii=False)})", args)


def error_kind(err: ApiError) -> str:
    if isinstance(err, Unreachable):
        return "unreachable"
    if isinstance(err, ApiTimeout):
        return "timeout"
    if isinstance(err, HttpStatusError):
        return "http"
    if isinstance(err, StreamError):
        return "stream"
    if isinstance(err, ProtocolError):
        return "protocol"
    return "api"


def _fail_from_error(name: str, err: ApiError, t0: float) -> CheckResult:
    return CheckResult(name, FAIL, time.perf_counter() - t0, str(err), _details(name), error_kind(err))


def check_models(api: ApiClient, want: str | None) -> tuple[CheckResult, str | None, int]:
    """(result, the model to use, exit code if the run must stop here else 0)."""
    d = _details("models")
    t0 = time.perf_counter()
    try:
        models = api.models()
    except ApiError as err:
        return (
            _fail_from_error("models", err, t0),
            None,
            EXIT_UNREACHABLE if isinstance(err, Unreachable) else EXIT_FAIL,
        )
    latency = time.perf_counter() - t0
    ids = [m.id for m in models]
    d["models"] = ids
    if not ids:
        return CheckResult("models", FAIL, latency, "the server lists no models", d), None, EXIT_FAIL
    if want is None:
        if len(ids) > 1:
            reason = f"the server lists {len(ids)} models ({', '.join(ids)}): choose one with --model"
            return CheckResult("models", FAIL, latency, reason, d), None, EXIT_USAGE
        want = ids[0]
        how = "the only model listed"
    elif want not in ids:
        reason = f"model {want!r} is not served; the server lists: {', '.join(ids)} (use --model {ids[0]})"
        return CheckResult("models", FAIL, latency, reason, d), None, EXIT_FAIL
    else:
        how = "the only model listed" if len(ids) == 1 else f"one of {len(ids)} models listed"
    info = next(m for m in models if m.id == want)
    d["max_model_len"] = info.max_model_len
    mml = f", max_model_len {info.max_model_len}" if info.max_model_len else ""
    return CheckResult("models", PASS, latency, f"serves {want} ({how}{mml})", d), want, EXIT_OK


def check_chat(api: ApiClient, model: str) -> CheckResult:
    d = _details("chat")
    t0 = time.perf_counter()
    try:
        res = api.chat(model, CHAT_MESSAGES, max_tokens=CHAT_MAX_TOKENS, temperature=0, seed=SEED)
    except ApiError as err:
        return _fail_from_error("chat", err, t0)
    content, reasoning = (res.content or "").strip(), (res.reasoning_content or "").strip()
    d |= {
        "finish_reason": res.finish_reason,
        "usage": _usage(res.usage),
        "content_chars": len(content),
        "reasoning_chars": len(reasoning),
    }
    tail = f"finish_reason={res.finish_reason}, {_usage_text(res.usage)}"
    if content:
        return CheckResult("chat", PASS, res.latency_s, f"{excerpt(content, 50)!r}; {tail}", d)
    if reasoning:
        return CheckResult(
            "chat",
            PASS,
            res.latency_s,
            f"reasoning only ({len(reasoning)} chars): {excerpt(reasoning, 40)!r}; {tail}",
            d,
        )
    return CheckResult(
        "chat", FAIL, res.latency_s, f"empty answer: no content and no reasoning content; {tail}", d
    )


def _tool_hint(tool_choice: str) -> str:
    """What to look at when the model answered without a tool call."""
    if tool_choice == "auto":
        return (
            " — is vLLM's --tool-call-parser the one for this model's tool-call format? "
            "(--tool-choice required tests the model without the parser)"
        )
    return ""


def _weather_request(tool_choice: str) -> dict[str, Any]:
    """The get_weather request both tool checks send: the streamed one must repeat the plain one."""
    return {
        "tools": [WEATHER_TOOL],
        "tool_choice": tool_choice,
        "max_tokens": TOOL_MAX_TOKENS,
        "temperature": 0,
        "seed": SEED,
    }


def _answer_details(res: ChatResult | StreamResult, v: _ToolVerdict, content: str) -> dict[str, Any]:
    """What the report keeps of a get_weather answer, plain or streamed."""
    return {
        "finish_reason": res.finish_reason,
        "usage": _usage(res.usage),
        "tool_calls": len(res.tool_calls),
        "name": res.tool_calls[0].name if len(res.tool_calls) == 1 else None,
        "arguments": v.arguments,
        "content_chars": len(content),
    }


def check_tool_call(
    api: ApiClient, model: str, tool_choice: str
) -> tuple[CheckResult, dict[str, Any] | None]:
    d = _details("tool_call")
    t0 = time.perf_counter()
    try:
        res: ChatResult = api.chat(model, WEATHER_MESSAGES, **_weather_request(tool_choice))
    except ApiError as err:
        return _fail_from_error("tool_call", err, t0), None
    log.debug("tool_call answer: %s", excerpt(json.dumps(res.raw), 400))
    v = judge_tool_calls(res.tool_calls, res.content)
    content = (res.content or "").strip()
    d |= _answer_details(res, v, content)
    fr = f"finish_reason={res.finish_reason}"
    if not v.ok:
        hint = _tool_hint(tool_choice) if not res.tool_calls else ""
        return CheckResult("tool_call", FAIL, res.latency_s, f"{v.reason} ({fr}){hint}", d), None
    text = f", with {len(content)} chars of text next to it" if content else ""
    if res.finish_reason != "tool_calls":
        return CheckResult(
            "tool_call", WARN, res.latency_s, f"{v.reason}{text}; {fr}, expected tool_calls", d
        ), v.arguments
    return CheckResult("tool_call", PASS, res.latency_s, f"{v.reason}{text}; {fr}", d), v.arguments


def check_tool_call_stream(
    api: ApiClient, model: str, tool_choice: str, plain_args: dict[str, Any] | None
) -> CheckResult:
    d = _details("tool_call_stream")
    t0 = time.perf_counter()
    try:
        res: StreamResult = collect_stream(
            api.chat_stream(model, WEATHER_MESSAGES, **_weather_request(tool_choice))
        )
    except ApiError as err:
        return _fail_from_error("tool_call_stream", err, t0)
    latency = time.perf_counter() - t0
    v = judge_tool_calls(res.tool_calls, res.content)
    content = (res.content or "").strip()
    d |= _answer_details(res, v, content) | {
        "chunks": res.chunks,
        "first_chunk_s": None if res.first_chunk_s is None else round(res.first_chunk_s, 4),
        "name_deltas": res.name_deltas.get(0) if res.tool_calls else None,
        "argument_fragments": res.argument_fragments.get(0) if res.tool_calls else None,
    }
    fr = f"finish_reason={res.finish_reason}"
    if not v.ok:
        hint = _tool_hint(tool_choice) if not res.tool_calls else ""
        return CheckResult("tool_call_stream", FAIL, latency, f"streamed: {v.reason} ({fr}){hint}", d)
    if res.name_deltas.get(0, 0) != 1:
        return CheckResult(
            "tool_call_stream",
            FAIL,
            latency,
            f"the tool name arrived in {res.name_deltas.get(0, 0)} chunks, expected exactly once",
            d,
        )
    frag = f"streamed in {res.chunks} chunks ({res.argument_fragments.get(0, 0)} argument fragments)"
    assert v.arguments is not None
    if plain_args is None:
        compare = "not compared: the non-streamed call failed"
    elif set(v.arguments) != set(plain_args):
        d["matches_non_streamed"] = False
        return CheckResult(
            "tool_call_stream",
            FAIL,
            latency,
            f"streamed arguments have keys {sorted(v.arguments)} but the non-streamed call had "
            f"{sorted(plain_args)}: {json.dumps(v.arguments)}",
            d,
        )
    else:
        d["matches_non_streamed"] = True
        if v.arguments == plain_args:
            compare = "same arguments as the non-streamed call"
        else:
            diff = [k for k in sorted(v.arguments) if v.arguments[k] != plain_args[k]]
            compare = f"same keys as the non-streamed call (values of {', '.join(diff)} differ)"
    summary = f"get_weather {frag}, {compare}"
    if res.finish_reason != "tool_calls":
        return CheckResult("tool_call_stream", WARN, latency, f"{summary}; {fr}, expected tool_calls", d)
    return CheckResult("tool_call_stream", PASS, latency, f"{summary}; {fr}", d)


def skipped(name: str, why: str) -> CheckResult:
    """A check not run, and why (`not run: endpoint unreachable`)."""
    return CheckResult(name, SKIP, None, why, _details(name))
