"""`station gates`' plans: one per battery (the plan interface: `vllm_station.plans`).

    ToolsPlan(cases).run(target)            → ToolsReport    (what `station gates tools` runs)
    AgentPlan(tasks, repeats=3).run(target) → AgentReport    (`station gates agent`)
    NeedlePlan(lengths="25%,90%").run(target) → NeedleReport (`station gates needle`)

Each opens its own connection to `target.endpoint` with the plan's timeout and runs its battery with
`target.model` (None: the only model served, `api.served.resolve_model`; a model named on the command line
is checked by the CLI adapter, golive's by its smoke gate and first contact); `verdict` is the report in
one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from vllm_station import report as report_mod
from vllm_station.api.served import max_model_len, resolve_model
from vllm_station.batteries.cases import ToolCase
from vllm_station.batteries.needles import DEFAULT_DEPTHS, DEFAULT_LENGTHS, parse_depths, parse_lengths
from vllm_station.batteries.tasks import AgentTask
from vllm_station.commands.gates import agent, needle, tools
from vllm_station.commands.gates.common import Sampling
from vllm_station.plans import CannotRun, Target, Verdict


@dataclass(frozen=True)
class ToolsPlan:
    """The tool-call battery: these cases, each asked plain and streamed."""

    gate: ClassVar[str] = "tools"
    cases: tuple[ToolCase, ...]
    sampling: Sampling = field(default_factory=Sampling)
    timeout: float = 120.0

    def run(self, target: Target) -> tools.ToolsReport:
        with target.endpoint.client(timeout=self.timeout) as api:
            model = target.model or resolve_model(api, None)
            return tools.run_battery(api, model, self.cases, self.sampling, quiet=target.quiet)

    def verdict(self, report: tools.ToolsReport) -> Verdict:
        return Verdict(
            report.result == "pass", f"{report.passed}/{report.cases} cases", report_mod.to_jsonable(report)
        )


@dataclass(frozen=True)
class AgentPlan:
    """The agent battery: these tasks, `repeats` trials each (pass^k), streamed unless `stream` is off."""

    gate: ClassVar[str] = "agent"
    tasks: tuple[AgentTask, ...]
    sampling: Sampling = field(default_factory=Sampling)
    repeats: int = 1
    stream: bool = True
    max_turns: int = agent.DEFAULT_MAX_TURNS
    timeout: float = 120.0

    def run(self, target: Target) -> agent.AgentReport:
        with target.endpoint.client(timeout=self.timeout) as api:
            model = target.model or resolve_model(api, None)
            return agent.run_battery(
                api, model, self.tasks, self.sampling, repeats=self.repeats, stream=self.stream,
                max_turns=self.max_turns, quiet=target.quiet,
            )  # fmt: skip

    def verdict(self, report: agent.AgentReport) -> Verdict:
        hats = ", ".join(f"{k} {v:.2f}" for k, v in report.pass_hat.items())
        return Verdict(
            report.result == "pass",
            f"{report.passed}/{report.tasks} tasks ({hats})",
            report_mod.to_jsonable(report),
        )


@dataclass(frozen=True)
class NeedlePlan:
    """The needles: prompt lengths (`25%`, `128k`, tokens; checked by `batteries.needles.lengths_option`),
    depths in percent, the variants; `max_model_len` None: the server's; `cache` None: calibrate afresh."""

    gate: ClassVar[str] = "needle"
    lengths: str = ",".join(DEFAULT_LENGTHS)
    depths: str = ",".join(map(str, DEFAULT_DEPTHS))
    variants: tuple[str, ...] = needle.VARIANTS
    sampling: Sampling = field(default_factory=lambda: Sampling(max_tokens=256))
    timeout: float = 900.0
    max_model_len: int | None = None
    cache: Path | None = None
    seed: int = 0

    def run(self, target: Target) -> needle.NeedleReport:
        with target.endpoint.client(timeout=self.timeout) as api:
            model = target.model or resolve_model(api, None)
            mml = self.max_model_len or max_model_len(api, model)
            if mml is None:
                raise CannotRun(
                    "the server reports no max_model_len",
                    "the server does not report max_model_len: pass --max-model-len",
                )
            cases = needle.plan(parse_lengths(self.lengths, mml), parse_depths(self.depths), self.variants)
            return needle.run_battery(
                api, model, cases, self.sampling, max_model_len=mml, cache=self.cache, seed=self.seed,
                quiet=target.quiet,
            )  # fmt: skip

    def verdict(self, report: needle.NeedleReport) -> Verdict:
        """`5/6 retrieved, 3.1–3.4 s at 27,000 tokens`: the wall times at the longest length planned."""
        top = max(parse_lengths(self.lengths, report.max_model_len))
        longest = max((r.prompt_tokens or 0 for r in report.results), default=0)
        walls = [r.wall_s for r in report.results if r.wall_s is not None and r.length == top]
        wall = f", {min(walls):.1f}–{max(walls):.1f} s at {longest:,} tokens" if walls else ""
        return Verdict(
            report.result == "pass",
            f"{report.passed}/{report.cases} retrieved{wall}",
            report_mod.to_jsonable(report),
        )
