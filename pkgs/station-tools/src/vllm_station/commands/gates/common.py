"""What the gates share: the request settings, one plain and one streamed ask, progress lines (the model
to ask and its max_model_len: the layer `api.served`)."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_station.api import ApiClient, ApiError, ApiUnreachable, ChatChunk, collect_stream
from vllm_station.commands.gates.checker import Answer

SEED = 1234
INTERRUPTED = "interrupted (Ctrl-C)"


def stopped_by(exc: BaseException) -> str:
    """Why a battery stopped early (its report is then `partial`): Ctrl-C or a server that went away."""
    return INTERRUPTED if isinstance(exc, KeyboardInterrupt) else f"server fault: {exc}"


@dataclass
class Sampling:
    """The sampling settings of every gate request: greedy, seeded, bounded."""

    max_tokens: int = 1024  # room for a reasoning model to think before it answers or calls
    temperature: float = 0.0
    seed: int = SEED
    extra: dict[str, Any] = field(default_factory=dict)  # more request fields (e.g. chat_template_kwargs)

    def kwargs(self) -> dict[str, Any]:
        return {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "seed": self.seed,
            "extra": self.extra or None,
        }


def ask_plain(
    api: ApiClient,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    sampling: Sampling,
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_choice: str | Mapping[str, Any] | None = None,
) -> Answer:
    """One non-streamed request as an `Answer` (a failed request is an answer with `error`)."""
    t0 = time.perf_counter()
    try:
        res = api.chat(model, messages, tools=tools, tool_choice=tool_choice, **sampling.kwargs())
    except ApiUnreachable:
        raise
    except ApiError as err:
        return Answer("plain", latency_s=time.perf_counter() - t0, error=str(err))
    return Answer(
        "plain",
        content=res.content,
        reasoning=res.reasoning_content,
        calls=list(res.tool_calls),
        finish_reason=res.finish_reason,
        latency_s=res.latency_s,
    )


def ask_stream(
    api: ApiClient,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    sampling: Sampling,
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_choice: str | Mapping[str, Any] | None = None,
    chunks_out: list[ChatChunk] | None = None,
) -> Answer:
    """The same request streamed; the fragments of every call are kept in order for the stream check."""
    chunks: list[ChatChunk] = [] if chunks_out is None else chunks_out
    t0 = time.perf_counter()
    try:
        for chunk in api.chat_stream(
            model, messages, tools=tools, tool_choice=tool_choice, **sampling.kwargs()
        ):
            chunks.append(chunk)
    except ApiUnreachable:
        raise
    except ApiError as err:
        return Answer("stream", latency_s=time.perf_counter() - t0, error=str(err))
    res = collect_stream(chunks)
    fragments: dict[int, list[str]] = {}
    for chunk in chunks:
        for d in chunk.tool_calls:
            if d.arguments:
                fragments.setdefault(d.index, []).append(d.arguments)
    return Answer(
        "stream",
        content=res.content,
        reasoning=res.reasoning_content,
        calls=list(res.tool_calls),
        finish_reason=res.finish_reason,
        latency_s=time.perf_counter() - t0,
        name_deltas=dict(res.name_deltas),
        fragments=fragments,
    )


class Progress:
    """One line per finished item on stderr (`[3/40] simple-enum pass`), unless quiet."""

    def __init__(self, total: int, quiet: bool = False, label: str = "") -> None:
        self.total, self.quiet, self.label, self.done = total, quiet, label, 0

    def step(self, text: str) -> None:
        self.done += 1
        if not self.quiet:
            width = len(str(self.total))
            print(f"{self.label}[{self.done:>{width}}/{self.total}] {text}", file=sys.stderr, flush=True)
