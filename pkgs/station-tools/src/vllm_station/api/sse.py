"""A small, strict server-sent-events parser (the WHATWG event-stream format, as OpenAI servers send it).

`iter_sse_events(lines)` takes lines without their line terminators (what `httpx.Response.iter_lines()`
yields) and yields one `SseEvent` per dispatched event. Strict where the spec is lenient, because a
smoke test wants to *see* a broken stream: a line that is neither a comment (`:`), a blank line nor one
of the fields `data`, `event`, `id`, `retry` raises `StreamError`. An event still open when the lines
end (no blank line after it) is yielded with `complete=False`, so the caller can tell a truncated
stream from a finished one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from vllm_station.api.errors import StreamError
from vllm_station.redact import redact

_FIELDS = frozenset({"data", "event", "id", "retry"})


@dataclass(frozen=True)
class SseEvent:
    data: str
    event: str = "message"
    id: str | None = None
    complete: bool = True  # False: the stream ended before the blank line that closes this event
    line: int = 0  # 1-based line number of the event's first line, for messages


def excerpt(text: str, limit: int = 120) -> str:
    """`text` on one line, secrets masked, then shortened to `limit` characters (mask first: a secret
    crossing the cut must not leave its first characters behind)."""
    flat = " ".join(redact(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def iter_sse_events(lines: Iterable[str], *, strict: bool = True) -> Iterator[SseEvent]:
    data: list[str] = []
    event = ""
    event_id: str | None = None
    first_line = 0
    seen_field = False
    n = 0
    for n, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if line == "":
            if data:
                yield SseEvent("\n".join(data), event or "message", event_id, True, first_line)
            data, event, seen_field = [], "", False
            continue
        if line.startswith(":"):
            continue  # comment / keep-alive
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name not in _FIELDS:
            if strict:
                raise StreamError(
                    f"malformed event stream: line {n} is not an SSE field: {excerpt(line)!r} "
                    "(expected 'data: {…}')"
                )
            continue
        if not seen_field:
            first_line, seen_field = n, True
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id":
            event_id = value
        # "retry" only matters to reconnecting browsers
    if data:
        yield SseEvent("\n".join(data), event or "message", event_id, False, first_line or n)
