"""Typed views of OpenAI-compatible answers: models, chat results, stream chunks, and a stream collector."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelInfo:
    id: str
    max_model_len: int | None = None  # vLLM extension
    root: str | None = None  # vLLM: the model path or repo behind the served name


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None

    @classmethod
    def parse(cls, obj: Any) -> Usage | None:
        if not isinstance(obj, dict):
            return None

        def num(key: str) -> int | None:
            v = obj.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        return cls(num("prompt_tokens"), num("completion_tokens"), num("total_tokens"))


@dataclass(frozen=True)
class ToolCall:
    """One tool call. `arguments` is the raw JSON string the model produced (may be invalid JSON)."""

    index: int
    id: str | None
    type: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True)
class ChatResult:
    content: str | None
    reasoning_content: str | None
    tool_calls: list[ToolCall]
    finish_reason: str | None
    usage: Usage | None
    model: str | None
    latency_s: float
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True)
class ToolCallDelta:
    index: int
    id: str | None
    type: str | None
    name: str | None
    arguments: str | None


@dataclass(frozen=True)
class ChatChunk:
    """One parsed `chat.completion.chunk` (first choice only; usage-only chunks have no choice)."""

    content: str | None
    reasoning_content: str | None
    tool_calls: list[ToolCallDelta]
    finish_reason: str | None
    usage: Usage | None
    elapsed_s: float  # since the request was sent
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass
class _PartialCall:
    index: int
    id: str | None = None
    type: str | None = None
    name: str | None = None
    name_deltas: int = 0
    fragments: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StreamResult:
    """A whole stream, collected. `name_deltas[i]`: how many chunks carried a name for tool call i."""

    content: str | None
    reasoning_content: str | None
    tool_calls: list[ToolCall]
    name_deltas: dict[int, int]
    argument_fragments: dict[int, int]
    finish_reason: str | None
    usage: Usage | None
    chunks: int
    first_chunk_s: float | None
    latency_s: float


def collect_stream(chunks: Iterable[ChatChunk]) -> StreamResult:
    """Consume `chunks` (from `ApiClient.chat_stream`) and assemble content and tool calls by index."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, _PartialCall] = {}
    finish_reason: str | None = None
    usage: Usage | None = None
    n = 0
    first: float | None = None
    last = 0.0
    for chunk in chunks:
        n += 1
        last = chunk.elapsed_s
        if first is None:
            first = chunk.elapsed_s
        if chunk.content:
            content.append(chunk.content)
        if chunk.reasoning_content:
            reasoning.append(chunk.reasoning_content)
        for d in chunk.tool_calls:
            call = calls.setdefault(d.index, _PartialCall(d.index))
            call.id = call.id or d.id
            call.type = call.type or d.type
            if d.name:
                call.name_deltas += 1
                call.name = d.name if call.name is None else call.name + d.name
            if d.arguments:
                call.fragments.append(d.arguments)
        if chunk.finish_reason:
            finish_reason = chunk.finish_reason
        if chunk.usage is not None:
            usage = chunk.usage
    ordered = [calls[i] for i in sorted(calls)]
    return StreamResult(
        content="".join(content) if content else None,
        reasoning_content="".join(reasoning) if reasoning else None,
        tool_calls=[ToolCall(c.index, c.id, c.type, c.name, "".join(c.fragments)) for c in ordered],
        name_deltas={c.index: c.name_deltas for c in ordered},
        argument_fragments={c.index: len(c.fragments) for c in ordered},
        finish_reason=finish_reason,
        usage=usage,
        chunks=n,
        first_chunk_s=first,
        latency_s=last,
    )
