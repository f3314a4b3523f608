"""Per-level statistics from parsed requests. Definitions (also in docs/bench.md):

- TTFT: request start → first content-bearing SSE event.
- ITL (`itl`): per request (E2E − TTFT) / (output tokens − 1); `itl_chunks`: pooled gaps between successive
  content-bearing events of all requests.
- E2E: request start → last SSE event (`[DONE]`).
- tok_s: output tokens of successful requests / (last end − first start) of the repeat.
- user_tok_s: per request 1 / ITL (the decode rate one user sees).
- req_s: successful requests / the same window.
- queue: request due (a worker free, or the burst start line) → request headers on the socket.
- prefill_tok_s (prefill mode): prompt tokens (usage) / TTFT.

Distributions pool the measured requests of all repeats (mean, median, p90, p99, min, max) and carry the
range of the per-repeat medians (`repeat_median_min/max`); throughputs carry mean/min/max across repeats.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_station.commands.bench.parse import RequestResult


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        raise ValueError("percentile of nothing")
    k = (len(sorted_values) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


@dataclass
class Dist:
    n: int = 0
    mean: float | None = None
    median: float | None = None
    p90: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None
    repeat_median_min: float | None = None
    repeat_median_max: float | None = None

    @classmethod
    def of(cls, values: Sequence[float], per_repeat: Sequence[Sequence[float]] = ()) -> Dist:
        if not values:
            return cls()
        s = sorted(values)
        medians = [statistics.median(r) for r in per_repeat if r]
        return cls(
            n=len(s),
            mean=statistics.fmean(s),
            median=percentile(s, 50),
            p90=percentile(s, 90),
            p99=percentile(s, 99),
            min=s[0],
            max=s[-1],
            repeat_median_min=min(medians) if medians else None,
            repeat_median_max=max(medians) if medians else None,
        )


@dataclass
class Span:
    """A throughput across repeats."""

    mean: float | None = None
    min: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: Sequence[float]) -> Span:
        if not values:
            return cls()
        return cls(mean=statistics.fmean(values), min=min(values), max=max(values))


@dataclass
class RepeatReport:
    repeat: int
    requests: int
    ok: int
    failed: int
    duration_s: float
    output_tokens: int
    tok_s: float
    req_s: float
    ttft_p50: float | None
    itl_p50: float | None
    e2e_p50: float | None


@dataclass
class LevelReport:
    name: str  # c32 (sweep/burst) or p8192 (prefill)
    mode: str
    concurrency: int
    prompt_tokens_target: int | None
    output_tokens_target: int | None
    requests: int
    ok: int
    failures: dict[str, int]
    failure_examples: list[str]
    token_source: str  # usage | chunks | mixed | none
    tok_s: Span
    req_s: Span
    ttft: Dist
    itl: Dist
    itl_chunks: Dist
    e2e: Dist
    user_tok_s: Dist
    queue: Dist
    prompt_tokens: Dist
    output_tokens: Dist
    prefill_tok_s: Dist | None
    repeats: list[RepeatReport]
    server: dict[str, Any] | None = None
    # per-request values for the plots; left out of JSON and CSV
    raw_ttft: list[float] = field(default_factory=list, repr=False, metadata={"json": False})
    raw_e2e: list[float] = field(default_factory=list, repr=False, metadata={"json": False})

    @property
    def n_failed(self) -> int:
        return sum(self.failures.values())


def _opt(values: list[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def summarise_repeat(i: int, results: list[RequestResult]) -> RepeatReport:
    ok = [r for r in results if r.ok]
    window = max(r.t_end for r in results) - min(r.t_start for r in results) if results else 0.0
    toks = sum(r.output_tokens for r in ok)

    def med(get: Callable[[RequestResult], float | None]) -> float | None:
        vals = _opt([get(r) for r in ok])
        return statistics.median(vals) if vals else None

    return RepeatReport(
        repeat=i,
        requests=len(results),
        ok=len(ok),
        failed=len(results) - len(ok),
        duration_s=window,
        output_tokens=toks,
        tok_s=toks / window if window > 0 else 0.0,
        req_s=len(ok) / window if window > 0 else 0.0,
        ttft_p50=med(lambda r: r.ttft),
        itl_p50=med(lambda r: r.itl),
        e2e_p50=med(lambda r: r.e2e),
    )


def summarise_level(
    name: str,
    mode: str,
    concurrency: int,
    prompt_target: int | None,
    output_target: int | None,
    repeats: list[list[RequestResult]],
) -> LevelReport:
    reps = [summarise_repeat(i + 1, rs) for i, rs in enumerate(repeats)]
    every = [r for rs in repeats for r in rs]
    ok = [r for r in every if r.ok]
    ok_by_rep = [[r for r in rs if r.ok] for rs in repeats]
    failures: dict[str, int] = {}
    examples: list[str] = []
    for r in every:
        if not r.ok:
            kind = r.failure or "unknown"
            failures[kind] = failures.get(kind, 0) + 1
            if len(examples) < 5:
                examples.append(f"{kind}: {r.detail}")
    sources = {r.token_source for r in ok}
    source = sources.pop() if len(sources) == 1 else ("mixed" if sources else "none")

    def dist(get: Callable[[RequestResult], float | None]) -> Dist:
        return Dist.of(_opt([get(r) for r in ok]), [_opt([get(r) for r in rs]) for rs in ok_by_rep])

    gaps = [g for r in ok for g in r.gaps]
    gaps_by_rep = [[g for r in rs for g in r.gaps] for rs in ok_by_rep]
    prefill = dist(lambda r: r.prefill_tok_s) if mode == "prefill" else None
    return LevelReport(
        name=name,
        mode=mode,
        concurrency=concurrency,
        prompt_tokens_target=prompt_target,
        output_tokens_target=output_target,
        requests=len(every),
        ok=len(ok),
        failures=failures,
        failure_examples=examples,
        token_source=source,
        tok_s=Span.of([r.tok_s for r in reps if r.ok]),
        req_s=Span.of([r.req_s for r in reps if r.ok]),
        ttft=dist(lambda r: r.ttft),
        itl=dist(lambda r: r.itl),
        itl_chunks=Dist.of(gaps, gaps_by_rep),
        e2e=dist(lambda r: r.e2e),
        user_tok_s=dist(lambda r: r.user_tok_s),
        queue=Dist.of([r.queue for r in every], [[r.queue for r in rs] for rs in repeats]),
        prompt_tokens=Dist.of([float(r.prompt_tokens) for r in ok if r.prompt_tokens is not None]),
        output_tokens=Dist.of([float(r.output_tokens) for r in ok]),
        prefill_tok_s=prefill,
        repeats=reps,
        raw_ttft=_opt([r.ttft for r in ok]),
        raw_e2e=_opt([r.e2e for r in ok]),
    )
