"""What the gates share: the request settings, one plain and one streamed ask, the model, progress lines."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_station.api import ApiClient, ApiError, ApiUnreachable, ChatChunk, collect_stream
from vllm_station.commands.gates.checker import Answer
from vllm_station.errors import CheckFailed, UsageError

SEED = 1234
# The longest max_model_len the gates build prompts for: twice GLM-5.3-Flash's full 1,048,576. A 90 % needle
# prompt at 4x that took the command past 256 MiB; a server reporting more is held to this.
MAX_CONTEXT = 2 * 1024 * 1024
log = logging.getLogger(__name__)
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


def resolve_model(api: ApiClient, want: str | None) -> str:
    """`want`, checked against /v1/models; without it, the only model served. A model the server does not
    list is the server's answer, not a bad argument: `CheckFailed` (exit 1); several models and no
    `want` is the operator's choice: `UsageError` (2) — as in every verb (docs/architecture.md)."""
    ids = [m.id for m in api.models()]
    if want is None:
        if len(ids) != 1:
            listed = ", ".join(ids) or "none"
            raise UsageError(f"the server lists {len(ids)} models ({listed}): choose one with --model")
        return ids[0]
    if want not in ids:
        raise CheckFailed(f"model {want!r} is not served; the server lists: {', '.join(ids) or 'none'}")
    return want


def max_model_len(api: ApiClient, model: str) -> int | None:
    """The server's max_model_len for `model`, held to MAX_CONTEXT (prompts are sized from it: a server
    claiming 10**12 must not make the needle gate build a 10**12-token prompt)."""
    reported = next((m.max_model_len for m in api.models() if m.id == model), None)
    if not isinstance(reported, int) or isinstance(reported, bool) or reported < 1:
        return None
    if reported > MAX_CONTEXT:
        log.warning(
            "the server reports max_model_len %s; the gates build prompts for at most %s tokens",
            f"{reported:,}", f"{MAX_CONTEXT:,}",
        )  # fmt: skip
        return MAX_CONTEXT
    return reported


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
