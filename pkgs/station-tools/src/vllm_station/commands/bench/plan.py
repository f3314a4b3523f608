"""`station bench`'s plan: a concurrency sweep judged by `--expect` thresholds (the plan interface:
`vllm_station.plans`), what `station golive` runs as its bench gate.

The plan is the sweep's knobs; `check()` holds them to bench's own ranges and budgets (what one level
keeps in memory) and the thresholds to the plan's levels, before anything is sent; `run` builds
`BenchOptions` for the target and runs bench's core (`modes.execute`). The ranges (`MAX_*`) are bench's,
for a composer's option types.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from vllm_station import thresholds
from vllm_station.commands.bench.modes import (
    MAX_CONCURRENCY,
    MAX_COUNT,
    MAX_LEVELS,
    MAX_OUTPUT_LEN,
    MAX_PER_USER,
    BenchOptions,
    Count,
    check_budgets,
    execute,
)
from vllm_station.commands.bench.report import BenchReport, to_dict
from vllm_station.plans import INTERRUPTED, Stop, Target, Verdict

__all__ = [
    "MAX_CONCURRENCY", "MAX_COUNT", "MAX_LEVELS", "MAX_OUTPUT_LEN", "MAX_PER_USER", "BenchReport", "Plan",
]  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """A sweep: these concurrency levels, `requests` measured requests per level (`40`, or `2x` = 2 ×
    the level), `output_len` tokens per answer, one warm-up round per user, the `expect` thresholds."""

    gate: ClassVar[str] = "bench"
    levels: tuple[int, ...] = (1, 32)
    requests: str = "2x"
    output_len: int = 256
    timeout: float = 600.0
    expect: tuple[str, ...] = ()
    warmup: str = "1x"
    seed: int = 0

    def options(self, target: Target | None = None) -> BenchOptions:
        """bench's options for this plan against `target` (None: the plan alone, for its checks)."""
        opts = BenchOptions(
            mode="sweep", levels=list(self.levels), warmup=Count.parse(self.warmup),
            requests=Count.parse(self.requests), output_len=self.output_len, timeout=self.timeout,
            seed=self.seed, expectations=thresholds.parse(list(self.expect)),
        )  # fmt: skip
        if target is None:
            return opts
        ep = target.endpoint
        return replace(
            opts, base_url=ep.root_url, model=target.model, api_key=ep.api_key,
            ca_file=str(ep.ca_file) if ep.ca_file else None, progress=not target.quiet,
        )  # fmt: skip

    def check_thresholds(self) -> None:
        """Every threshold reads, and names a level of the plan (a `UsageError`)."""
        names = [f"c{n}" for n in self.levels]
        thresholds.check_levels(thresholds.parse(list(self.expect)), names)

    def check(self) -> None:
        """Before anything is sent: the thresholds, and every level within bench's budgets (what one level
        holds in memory: a `UsageError` naming what to lower)."""
        self.check_thresholds()
        check_budgets(self.options())

    def run(self, target: Target) -> BenchReport:
        return asyncio.run(execute(self.options(target)))

    def verdict(self, report: BenchReport) -> Verdict:
        """Held: every threshold held; the thresholds' details (the missed ones first: `not held: …`);
        a run Ctrl-C stopped (bench catches it and returns what finished) stops a walk too."""
        missed = [e for e in report.expect if not e.passed]
        summary = "; ".join(e.detail for e in report.expect) or f"{report.failures} failures"
        if missed:
            summary = "not held: " + "; ".join(e.detail for e in missed)
        stop = Stop(INTERRUPTED, "interrupted (Ctrl-C) during bench") if report.partial else None

        def figures(out_dir: Path) -> list[Path]:
            from vllm_station.commands.bench.plots import write_plots  # matplotlib: only when drawn

            return write_plots(report, out_dir)

        return Verdict(report.passed, summary, to_dict(report), stop=stop, figures=figures)

