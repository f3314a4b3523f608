"""`station gates agent`: multi-step tasks against the stateful environment (`batteries.env`), after τ-bench.

A task file (`batteries/data/agent/<domain>.json`, one per domain; an operator adds more with `--tasks`;
read by `batteries.tasks`)::

    {"domain": "calendar", "initial": {...state...},
     "tasks": [{"id": ..., "instruction": "...",
                "reference": [[{"name": ..., "arguments": {...}}, ...], ...],   # one path, turn by turn
                "answer": [["fact", "other spelling"], ...],                    # the final answer's facts
                "reference_answer": "...",
                "initial": {...}}]}                                             # optional: this task's state

The expected final state is the reference path replayed on the initial state (checked at load: every
reference call must succeed, and the reference answer must state every fact). The model drives the loop —
the domain's tools offered, its calls executed, their results fed back — for up to `max_turns` answers; the
trial passes when the environment's final state equals the expected one (whatever path reached it) and
the final answer states every fact. Each turn's answer is checked for serving faults too (a dropped,
renamed or corrupted streamed call; reasoning in the content or the arguments); a streamed turn that
shows one is asked again non-streamed, so the failure names the exact class.

With `--repeats k`, every task runs k times: pass^1 is the mean success rate and pass^k the chance that
all k trials of a task pass, estimated per task as C(c, k) / C(n, k) (c successes of n trials).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vllm_station.api import ApiClient, ApiUnreachable
from vllm_station.batteries import classes as C
from vllm_station.batteries.cases import ExpectedCall
from vllm_station.batteries.env import TOOLS, Environment, state_diff
from vllm_station.batteries.tasks import AgentTask
from vllm_station.commands.gates.checker import Answer, Problem, leak_check, stream_check, text_check
from vllm_station.commands.gates.common import Progress, Sampling, ask_plain, ask_stream, stopped_by

SCHEMA_VERSION = 1
DEFAULT_MAX_TURNS = 8
SYSTEM_PROMPT = (
    "You are an assistant that acts through the tools offered. Use them to do what the user asks; never "
    "guess what a tool would return. When the work is done, answer the user briefly, stating the result."
)


# ---- running ------------------------------------------------------------------------------------


@dataclass
class Trial:
    passed: bool
    classes: list[str]
    failures: list[dict[str, Any]]  # {class, turn, detail}
    turns: int
    calls: list[str]  # the tools called, in order
    answer: str | None


@dataclass
class TaskResult:
    id: str
    domain: str
    passed: int  # trials that passed
    trials: list[Trial]


@dataclass
class AgentReport:
    schema: int
    gate: str
    base_url: str
    model: str
    stream: bool
    repeats: int
    max_turns: int
    tasks: int
    passed: int  # tasks whose every trial passed
    result: str
    pass_hat: dict[str, float]  # "pass^1" … "pass^k"
    by_domain: dict[str, dict[str, int]]
    by_class: dict[str, int]  # failing trials per class
    results: list[TaskResult]
    partial: bool = False  # stopped early (Ctrl-C, the server went away): `stopped` says why
    stopped: str | None = None


def _turn_problems(
    api: ApiClient, model: str, messages: list[dict[str, Any]], ans: Answer, tools: list[dict[str, Any]],
    sampling: Sampling,
) -> list[Problem]:  # fmt: skip
    """Serving faults in one turn's answer. A suspect streamed answer is compared with a non-streamed one."""
    problems = leak_check(ans, [ans.reasoning])
    if ans.variant != "stream":
        return problems
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    suspect = stream_check(None, ans, [], schemas)
    if not suspect and not (ans.finish_reason == "tool_calls" and not ans.calls):
        return problems
    plain = ask_plain(api, model, messages, sampling, tools=tools, tool_choice="auto")
    zero = [ExpectedCall(n, {}) for n, s in schemas.items() if not s.get("properties")]
    if not plain.ok:
        return problems + (stream_check(None, ans, zero, schemas) or suspect)
    # the same answer non-streamed: what the stream got wrong, if anything (a tool the model made up is
    # the model's choice, judged by the state, not a serving fault)
    return problems + stream_check(plain, ans, [], schemas)


def run_trial(
    api: ApiClient, model: str, task: AgentTask, sampling: Sampling, *, stream: bool, max_turns: int
) -> Trial:
    env = Environment(task.domain, task.initial)
    tools = TOOLS[task.domain]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task.instruction},
    ]
    failures: list[dict[str, Any]] = []
    called: list[str] = []
    final: Answer | None = None
    turn = 0
    for turn in range(1, max_turns + 1):
        ask = ask_stream if stream else ask_plain
        ans = ask(api, model, messages, sampling, tools=tools, tool_choice="auto")
        if not ans.ok:
            failures.append({"class": C.REQUEST_FAILED, "turn": turn, "detail": ans.error})
            break
        problems = _turn_problems(api, model, messages, ans, tools, sampling)
        if problems:
            failures += [{"class": cls, "turn": turn, "detail": detail} for cls, detail in problems]
            break
        if not ans.calls:
            final = ans
            break
        ids = [c.id or f"call_{turn}_{i}" for i, c in enumerate(ans.calls)]
        messages.append(
            {
                "role": "assistant",
                "content": ans.content,
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for cid, c in zip(ids, ans.calls, strict=True)
                ],
            }
        )
        for cid, c in zip(ids, ans.calls, strict=True):
            result, _ = env.call(c.name, c.arguments)
            called.append(str(c.name))
            messages.append({"role": "tool", "tool_call_id": cid, "content": result})
    else:
        failures.append(
            {
                "class": C.TURN_LIMIT,
                "turn": max_turns,
                "detail": f"still calling tools after {max_turns} turns",
            }
        )
    if not failures:
        got = env.canonical()
        if got != task.expected:
            failures.append(
                {"class": C.STATE_MISMATCH, "turn": turn, "detail": state_diff(got, task.expected)}
            )
        assert final is not None
        failures += [{"class": cls, "turn": turn, "detail": d} for cls, d in text_check(final, task.answer)]
    classes = list(dict.fromkeys(f["class"] for f in failures))
    return Trial(not failures, classes, failures, turn, called, final.content if final else None)


def pass_hat(successes: Sequence[int], n: int) -> dict[str, float]:
    """pass^k for k = 1..n: the mean over tasks of C(c, k) / C(n, k)."""
    if not successes:
        return {}
    return {
        f"pass^{k}": round(sum(math.comb(c, k) / math.comb(n, k) for c in successes) / len(successes), 4)
        for k in range(1, n + 1)
    }


def run_battery(
    api: ApiClient,
    model: str,
    tasks: Sequence[AgentTask],
    sampling: Sampling,
    *,
    repeats: int = 1,
    stream: bool = True,
    max_turns: int = DEFAULT_MAX_TURNS,
    quiet: bool = False,
) -> AgentReport:
    progress = Progress(len(tasks) * repeats, quiet, "agent ")
    results: list[TaskResult] = []
    stopped: str | None = None
    try:
        for task in tasks:
            trials: list[Trial] = []
            for r in range(repeats):
                trial = run_trial(api, model, task, sampling, stream=stream, max_turns=max_turns)
                trials.append(trial)
                tag = f" #{r + 1}" if repeats > 1 else ""
                verdict = "pass" if trial.passed else "FAIL " + ", ".join(trial.classes)
                progress.step(f"{task.id}{tag}: {verdict}")
            results.append(TaskResult(task.id, task.domain, sum(t.passed for t in trials), trials))
    except (KeyboardInterrupt, ApiUnreachable) as exc:  # a partial report of the tasks that finished
        stopped = stopped_by(exc)
    by_domain: dict[str, dict[str, int]] = {}
    for res in results:
        d = by_domain.setdefault(res.domain, {"tasks": 0, "passed": 0})
        d["tasks"] += 1
        d["passed"] += int(res.passed == repeats)
    by_class = Counter(cls for res in results for t in res.trials for cls in t.classes)
    passed = sum(res.passed == repeats for res in results)
    return AgentReport(
        schema=SCHEMA_VERSION,
        gate="agent",
        base_url=api.api_url,
        model=model,
        stream=stream,
        repeats=repeats,
        max_turns=max_turns,
        tasks=len(results),
        passed=passed,
        # nothing run, or stopped early: not held
        result="pass" if results and passed == len(results) and stopped is None else "fail",
        pass_hat=pass_hat([res.passed for res in results], repeats),
        by_domain=by_domain,
        by_class=dict(sorted(by_class.items())),
        results=results,
        partial=stopped is not None,
        stopped=stopped,
    )


def render(report: AgentReport) -> str:
    lines: list[str] = []
    for res in report.results:
        ok = res.passed == report.repeats
        lines.append(f"{'pass' if ok else 'FAIL'}  {res.id} ({res.domain}) {res.passed}/{report.repeats}")
        for n, t in enumerate(res.trials, 1):
            for f in t.failures:
                tag = f"#{n} " if report.repeats > 1 else ""
                lines.append(f"        {tag}{f['class']} [turn {f['turn']}] {f['detail']}")
    lines.append("")
    for dom, d in report.by_domain.items():
        lines.append(f"  {dom:<10} {d['passed']:>3}/{d['tasks']}")
    lines.append("  " + ", ".join(f"{k} {v:.3f}" for k, v in report.pass_hat.items()))
    if report.by_class:
        lines.append(
            "  failing trials by class: " + ", ".join(f"{k} {v}" for k, v in report.by_class.items())
        )
    verdict = "PASS" if report.result == "pass" else "FAIL"
    how = "streamed" if report.stream else "non-streamed"
    lines.append(
        f"{verdict}: agent battery {report.passed}/{report.tasks} ({report.model}, {how}, k={report.repeats})"
    )
    return "\n".join(lines)
