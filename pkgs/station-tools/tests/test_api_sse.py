"""The strict SSE parser, on lines."""

from __future__ import annotations

import pytest

from vllm_station.api import SseEvent, StreamError, collect_stream, iter_sse_events
from vllm_station.api.models import ChatChunk, ToolCallDelta


def test_events_comments_multiline_and_fields() -> None:
    lines = [
        ": keep-alive",
        'data: {"a": 1}',
        "",
        "event: ping",
        "id: 7",
        "data: x",
        "data:y",
        "retry: 10",
        "",
        "",
        "data: [DONE]",
        "",
    ]
    assert list(iter_sse_events(lines)) == [
        SseEvent('{"a": 1}', "message", None, True, 2),
        SseEvent("x\ny", "ping", "7", True, 4),
        SseEvent("[DONE]", "message", "7", True, 11),  # the last event id persists (spec)
    ]


def test_crlf_line_endings_are_tolerated() -> None:
    assert [e.data for e in iter_sse_events(["data: 1\r", "\r", "data: 2\r\n", ""])] == ["1", "2"]


def test_open_event_at_end_is_marked_incomplete() -> None:
    events = list(iter_sse_events(["data: 1", "", 'data: {"cho']))
    assert [e.complete for e in events] == [True, False] and events[1].data == '{"cho'


def test_unknown_line_is_malformed_when_strict() -> None:
    with pytest.raises(StreamError, match="line 2 is not an SSE field: 'garbage here'"):
        list(iter_sse_events(["data: 1", "garbage here", ""]))
    assert [e.data for e in iter_sse_events(["garbage", "data: 1", ""], strict=False)] == ["1"]


def test_collect_stream_joins_fragments_and_counts_names() -> None:
    def chunk(
        t: float, calls: list[ToolCallDelta], content: str | None = None, finish: str | None = None
    ) -> ChatChunk:
        return ChatChunk(content, None, calls, finish, None, t)

    res = collect_stream(
        [
            chunk(0.1, [], "Let me check. "),
            chunk(0.2, [ToolCallDelta(0, "c0", "function", "get_weather", None)]),
            chunk(0.3, [ToolCallDelta(0, None, None, None, '{"location": ')]),
            chunk(0.4, [ToolCallDelta(0, None, None, None, '"Paris"}')]),
            chunk(
                0.5,
                [
                    ToolCallDelta(1, "c1", "function", "get_", "{}"),
                    ToolCallDelta(1, None, None, "time", None),
                ],
            ),
            chunk(0.6, [], None, "tool_calls"),
        ]
    )
    assert res.content == "Let me check. " and res.chunks == 6 and res.first_chunk_s == 0.1
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("get_weather", '{"location": "Paris"}'),
        ("get_time", "{}"),
    ]
    assert res.name_deltas == {0: 1, 1: 2} and res.argument_fragments == {0: 2, 1: 1}
    assert res.finish_reason == "tool_calls"
