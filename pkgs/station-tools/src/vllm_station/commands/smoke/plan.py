"""`station smoke`'s plan: the four checks of `vllm_station.api.checks`, in order, into one report.

A model the server does not list stops the run after `models`; so does an unreachable server, and a server
that goes away later skips the checks after it (no waiting on it three times). Never raises `ApiError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from vllm_station import report as report_mod
from vllm_station.api.checks import (
    CHECKS,
    FAIL,
    PASS,
    SKIP,
    WARN,
    CheckResult,
    check_chat,
    check_models,
    check_tool_call,
    check_tool_call_stream,
    skipped,
)
from vllm_station.api.urls import display_url
from vllm_station.errors import EXIT_FAIL, EXIT_OK, EXIT_UNREACHABLE
from vllm_station.plans import UNREACHABLE, Stop, Target, Verdict

SCHEMA_VERSION = 1


@dataclass
class SmokeReport:
    schema: int
    base_url: str
    model: str | None
    tool_choice: str
    timeout_s: float
    result: str  # pass | fail
    exit_code: int
    checks: list[CheckResult]


@dataclass(frozen=True)
class Plan:
    """The smoke checks: each request's timeout, and the get_weather checks' tool_choice."""

    gate: ClassVar[str] = "smoke"
    timeout: float = 60.0
    tool_choice: str = "auto"  # auto | required

    def run(self, target: Target) -> SmokeReport:
        """The four checks in order, on one connection with `timeout` for each request."""
        checks: list[CheckResult] = []
        model = target.model
        with target.endpoint.client(timeout=self.timeout) as api:
            base = api.api_url
            res, model_found, stop = check_models(api, target.model)
            checks.append(res)
            if stop:
                why = "endpoint unreachable" if stop == EXIT_UNREACHABLE else "the models check failed"
                checks += [skipped(name, f"not run: {why}") for name in CHECKS[1:]]
                return self._finish(base, model, checks, stop)
            assert model_found is not None
            model = model_found
            plain_args: dict[str, Any] | None = None
            for name in CHECKS[1:]:
                if any(_unreachable(c) for c in checks):  # the server went away: do not wait on it 3 times
                    checks.append(skipped(name, "not run: endpoint unreachable"))
                elif name == "chat":
                    checks.append(check_chat(api, model))
                elif name == "tool_call":
                    tc, plain_args = check_tool_call(api, model, self.tool_choice)
                    checks.append(tc)
                else:
                    checks.append(check_tool_call_stream(api, model, self.tool_choice, plain_args))
        unreachable = any(_unreachable(c) for c in checks)
        failed = any(c.result == FAIL for c in checks)
        code = EXIT_UNREACHABLE if unreachable else EXIT_FAIL if failed else EXIT_OK
        return self._finish(base, model, checks, code)

    def _finish(self, base: str, model: str | None, checks: list[CheckResult], code: int) -> SmokeReport:
        return SmokeReport(
            SCHEMA_VERSION,
            display_url(base),
            model,
            self.tool_choice,
            self.timeout,
            PASS if code == EXIT_OK else FAIL,
            code,
            checks,
        )

    def verdict(self, report: SmokeReport) -> Verdict:
        """Held: exit 0 (warnings allowed); the counts by result; an unreachable server stops a walk."""
        counts = {r: sum(c.result == r for c in report.checks) for r in (PASS, WARN, FAIL, SKIP)}
        stop = None
        if report.exit_code == EXIT_UNREACHABLE:
            stop = Stop(UNREACHABLE, "server fault: unreachable at smoke")
        return Verdict(
            held=report.exit_code == EXIT_OK,
            summary=", ".join(f"{v} {k}" for k, v in counts.items() if v),
            report=report_mod.to_jsonable(report),
            stop=stop,
            model=report.model,
        )


def _unreachable(c: CheckResult) -> bool:
    return c.error == "unreachable"
