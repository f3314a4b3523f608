"""The plan interface: how a verb that composes other verbs (`station golive`) runs their cores.

A verb never imports another verb (docs/architecture.md), with one door: a composable verb exposes one
module, `commands/<verb>/plan.py`, the only module of a verb that another verb may import. It holds the
verb's plan types and their runners, and nothing that parses arguments or prints:

- `Plan`, a frozen dataclass: what to run, typed, every value already checked (`check()` where a value
  can only be checked against others). Its class attribute `gate` names it in a composer's report. The
  verb's own CLI adapter builds the same plan from its options, so the core is reached one way.
- `Plan.run(target) -> Report`: the verb's core against `target`; the verb's own report dataclass.
- `Plan.verdict(report) -> Verdict`: that report in a composer's words: held or not, one line, its JSON.

`station gates` exposes one plan per battery (`ToolsPlan`, `AgentPlan`, `NeedlePlan`), `station smoke`
and `station bench` one each. What a plan needs from the server is the `Target`; what it found, the
`Verdict`. A composer walks a list of plans in one loop (commands/golive/cli.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from vllm_station.api.args import Endpoint
from vllm_station.errors import UsageError

UNREACHABLE = "unreachable"
INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class Target:
    """What a plan runs against: the endpoint, the model (None: the only one the server lists), and
    whether progress lines are kept off stderr."""

    endpoint: Endpoint
    model: str | None = None
    quiet: bool = False


@dataclass(frozen=True)
class Stop:
    """Why a composer must not run the next plan: the server is gone (`UNREACHABLE`) or the operator
    pressed Ctrl-C (`INTERRUPTED`, a verb that catches it itself and returns a partial report)."""

    kind: str
    why: str


@dataclass(frozen=True)
class Verdict:
    """A report in a composer's words."""

    held: bool
    summary: str  # one line: "4 pass", "40/40 cases", "not held: c1.tok_s = …"
    report: Any  # the report as JSON types, as the verb's own --json writes it
    stop: Stop | None = None
    model: str | None = None  # the model the plan found served (smoke), for the plans after it
    figures: Callable[[Path], list[Path]] | None = None  # draws the report's plots (PNG) into a directory


class CannotRun(UsageError):
    """The plan cannot run against this server (the needle battery when the server reports no
    max_model_len): to a composer, a gate that did not hold (`summary`), and its walk goes on; to the
    verb's own CLI, a usage error (exit 2) that says what to pass."""

    def __init__(self, summary: str, message: str) -> None:
        super().__init__(message)
        self.summary = summary


R = TypeVar("R")


class Plan(Protocol[R]):
    """What every `commands/<verb>/plan.py` plan is (structurally: the plans do not inherit from it)."""

    gate: ClassVar[str]

    def run(self, target: Target) -> R: ...

    def verdict(self, report: R) -> Verdict: ...
