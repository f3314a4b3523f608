"""A RawResult (timestamped network reads) → one request's metrics; after the batch, off the hot path.

Each SSE event takes the timestamp of the network read that completed it. An event is *content-bearing*
when its first choice's delta carries non-empty `content`, `reasoning_content`/`reasoning` or `tool_calls`
(the role chunk's `content: ""` is not). Output tokens come from the final `usage` chunk
(`stream_options.include_usage`); when the server sends none, the number of content-bearing events is
used instead and the result says `token_source: "chunks"` (vLLM sends one event per token unless it
coalesces under load, so the fallback can undercount).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_station import bounded
from vllm_station.api.sse import excerpt
from vllm_station.commands.bench.wire import RawResult

EXCERPT = 200  # characters of server text in a failure's detail (after secrets are masked)


@dataclass(slots=True)
class RequestResult:
    index: int
    ok: bool
    failure: str | None  # kind, see FAILURE_KINDS
    detail: str
    t_start: float
    t_end: float  # the last SSE event ([DONE]) or the end of the response
    queue: float  # t_sent − t_sched: client-side delay before the request left
    ttft: float | None
    e2e: float | None
    output_tokens: int
    prompt_tokens: int | None
    token_source: str  # "usage" | "chunks"
    itl: float | None  # (E2E − TTFT) / (tokens − 1)
    gaps: list[float] = field(default_factory=list)  # gaps between content-bearing events

    @property
    def user_tok_s(self) -> float | None:
        return 1.0 / self.itl if self.itl else None

    @property
    def prefill_tok_s(self) -> float | None:
        if self.prompt_tokens is None or not self.ttft:
            return None
        return self.prompt_tokens / self.ttft


FAILURE_KINDS = (
    "connect",  # refused / reset before an answer
    "timeout",  # no complete answer within --timeout
    "http_4xx",
    "redirect",  # a 3xx answer: redirects are never followed
    "http_5xx",
    "truncated",  # stream cut off, or ended without data: [DONE]
    "stream_error",  # an SSE {"error": …} event
    "malformed",  # an event that is not JSON, or HTTP framing the client cannot read
    "oversize",  # the answer grew past the client's limit for the requested output length
    "empty",  # finished without any content-bearing event (nor a finish_reason with usage tokens)
    "length_mismatch",  # fixed output length requested, usage says otherwise
)


def _events(raw: RawResult) -> list[tuple[float, bytes]]:
    events: list[tuple[float, bytes]] = []
    buf = b""
    for t, data in raw.chunks:
        buf += data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        while True:
            cut = buf.find(b"\n\n")
            if cut < 0:
                break
            events.append((t, buf[:cut]))
            buf = buf[cut + 2 :]
    if buf.strip():
        events.append((raw.chunks[-1][0], buf))  # a last event without its blank line
    return events


def _text(data: bytes) -> str:
    return excerpt(data.decode("utf-8", errors="replace"), EXCERPT)


def parse(raw: RawResult, expected_tokens: int | None) -> RequestResult:
    queue = max(0.0, raw.t_sent - raw.t_sched)
    res = RequestResult(
        index=raw.index,
        ok=False,
        failure=raw.error_kind,
        detail=excerpt(raw.error, EXCERPT),
        t_start=raw.t_start,
        t_end=raw.t_end,
        queue=queue,
        ttft=None,
        e2e=None,
        output_tokens=0,
        prompt_tokens=None,
        token_source="chunks",
        itl=None,
    )
    if raw.error_kind is not None:
        if raw.error_kind.startswith("http_") and raw.chunks:
            # the whole body is masked before it is cut: a secret crossing the cut leaves nothing behind
            body = b"".join(d for _, d in raw.chunks).decode("utf-8", errors="replace")
            res.detail = f"{raw.error}: {excerpt(body, EXCERPT)}"
        return res
    first: float | None = None
    last_content: float | None = None
    last_event: float | None = None
    prev: float | None = None
    n_content = 0
    usage_tokens: int | None = None
    t_finish: float | None = None  # the event carrying finish_reason
    done = False
    gaps = res.gaps
    for t, ev in _events(raw):
        last_event = t
        data = b"\n".join(line[5:].lstrip() for line in ev.split(b"\n") if line.startswith(b"data:"))
        if not data:
            continue  # comments / keep-alives
        if data == b"[DONE]":
            done = True
            continue
        try:
            obj = bounded.loads_json(data)
        except (ValueError, RecursionError):
            res.failure, res.detail = "malformed", f"event is not JSON: {_text(data)}"
            return res
        if not isinstance(obj, dict):
            res.failure, res.detail = "malformed", f"event is not an object: {_text(data)}"
            return res
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            res.failure, res.detail = "stream_error", f"server error event: {excerpt(str(msg), EXCERPT)}"
            return res
        usage = obj.get("usage")
        if isinstance(usage, dict):
            ct = usage.get("completion_tokens")
            if isinstance(ct, int) and not isinstance(ct, bool) and ct >= 0:
                usage_tokens = ct
            pt = usage.get("prompt_tokens")
            if isinstance(pt, int) and not isinstance(pt, bool) and pt >= 0:
                res.prompt_tokens = pt
        choices = obj.get("choices")
        if not choices:
            continue
        c0 = choices[0] if isinstance(choices, list) else None
        delta = c0.get("delta") if isinstance(c0, dict) else None
        if c0 is None or not isinstance(c0, dict) or not isinstance(delta, dict | None):
            res.failure, res.detail = "malformed", f"event without a choice object: {_text(data)}"
            return res
        if t_finish is None and c0.get("finish_reason"):
            t_finish = t
        if delta is None:  # /v1/completions
            bearing = bool(c0.get("text"))
        else:
            bearing = bool(
                delta.get("content")
                or delta.get("reasoning_content")
                or delta.get("reasoning")
                or delta.get("tool_calls")
            )
        if bearing:
            n_content += 1
            if first is None:
                first = t
            else:
                assert prev is not None
                gaps.append(t - prev)
            prev = last_content = t
    if not done:
        res.failure, res.detail = "truncated", "the stream ended without data: [DONE]"
        return res
    if first is None and t_finish is not None and usage_tokens:
        # tokens whose text is empty (a partial UTF-8 byte, a special token): e.g. max_tokens 1 in prefill
        # mode. The event that carries finish_reason is when the last of them arrived.
        first = last_content = t_finish
        n_content = 1
    if first is None or last_event is None or last_content is None:
        res.failure, res.detail = "empty", "no content-bearing event in the stream"
        return res
    res.t_end = last_event
    res.ttft = first - raw.t_sent  # from the moment the whole request was on the socket
    res.e2e = last_event - raw.t_sent
    if usage_tokens is not None:
        res.output_tokens, res.token_source = usage_tokens, "usage"
    else:
        res.output_tokens = n_content
    if res.output_tokens > 1:
        res.itl = (res.e2e - res.ttft) / (res.output_tokens - 1)
    if expected_tokens is not None and res.output_tokens != expected_tokens:
        res.failure = "length_mismatch"
        res.detail = (
            f"asked for exactly {expected_tokens} tokens, got {res.output_tokens} ({res.token_source})"
        )
        return res
    res.ok = True
    res.failure = None
    return res
