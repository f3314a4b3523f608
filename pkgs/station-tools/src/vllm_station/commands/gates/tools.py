"""`station gates tools`: the tool-call battery. Every case runs non-streamed and streamed; both are judged.

Per case (and per step of a multi-turn case):

1. the non-streamed answer: reasoning leaks, then the AST check (or, when no call is expected, a text
   answer holding the case's facts);
2. the streamed answer of the same request: reasoning leaks and the stream check against the non-streamed
   answer (serving faults); its AST check only when the non-streamed request failed;
3. multi-turn: the call (the model's own when it passed, else the expected one) and the case's result are
   fed back, and the final answer (both ways) must state the case's facts without calling again.

A case passes when no step has a problem. The report counts cases per category and failing cases per class.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vllm_station.api import ApiClient, ApiUnreachable
from vllm_station.batteries import classes as C
from vllm_station.batteries.cases import ExpectedCall, ToolCase
from vllm_station.commands.gates.checker import (
    Answer,
    Problem,
    ast_check,
    leak_check,
    stream_check,
    text_check,
)
from vllm_station.commands.gates.common import Progress, Sampling, ask_plain, ask_stream, stopped_by

SCHEMA_VERSION = 1


@dataclass
class Failure:
    cls: str
    variant: str  # plain | stream
    step: int  # 1, or 2 for a multi-turn case's final answer
    detail: str


@dataclass
class CaseResult:
    id: str
    category: str
    passed: bool
    classes: list[str]  # the failure classes, each once, in order
    failures: list[Failure]
    calls: dict[str, list[dict[str, Any]]]  # variant -> the calls of step 1 (name, arguments)
    latency_s: dict[str, float]


@dataclass
class CategoryCount:
    cases: int = 0
    passed: int = 0


@dataclass
class ToolsReport:
    schema: int
    gate: str
    base_url: str
    model: str
    cases: int
    passed: int
    failed: int
    result: str  # pass | fail
    by_category: dict[str, CategoryCount]
    by_class: dict[str, int]  # failing cases per class
    results: list[CaseResult]
    partial: bool = False  # stopped early (Ctrl-C, the server went away): `stopped` says why
    stopped: str | None = None


def _calls_json(ans: Answer) -> list[dict[str, Any]]:
    return [{"name": c.name, "arguments": c.arguments} for c in ans.calls]


def _judge(
    case: ToolCase,
    step: int,
    plain: Answer,
    stream: Answer,
    expected: Sequence[ExpectedCall],
    facts: Sequence[Sequence[str]],
) -> list[Failure]:
    out: list[Failure] = []

    def add(variant: str, problems: list[Problem]) -> None:
        out.extend(Failure(cls, variant, step, detail) for cls, detail in problems)

    reasoning = [plain.reasoning, stream.reasoning]
    schemas = case.schemas
    if plain.ok:
        leaks = leak_check(plain, reasoning)
        add("plain", leaks)
        if not any(cls == C.REASONING_IN_ARGUMENTS for cls, _ in leaks):
            add("plain", ast_check(plain.calls, expected, schemas, case.exact))
        if not expected and not plain.calls and not leaks:
            add("plain", text_check(plain, facts))
    else:
        add("plain", [(C.REQUEST_FAILED, plain.error or "")])
    if not stream.ok:
        add("stream", [(C.REQUEST_FAILED, stream.error or "")])
        return out
    leaks = leak_check(stream, reasoning)
    add("stream", leaks)
    structural = stream_check(plain if plain.ok else None, stream, expected, schemas)
    add("stream", structural)
    if not plain.ok and not structural and not leaks:
        add("stream", ast_check(stream.calls, expected, schemas, case.exact))
    if not expected and not stream.calls and not leaks and not structural:
        add("stream", text_check(stream, facts))
    return out


def _history(case: ToolCase, plain: Answer, passed: bool) -> list[dict[str, Any]]:
    """The first step's call and the case's results, as the messages of the second step."""
    if passed:
        calls = [(c.id or f"call_{i}", str(c.name), c.arguments) for i, c in enumerate(plain.calls)]
    else:
        calls = [
            (f"call_{i}", e.name, json.dumps(e.reference_arguments(), ensure_ascii=False))
            for i, e in enumerate(case.calls)
        ]
    assert case.results is not None
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in calls
        ],
    }
    results = [
        {"role": "tool", "tool_call_id": cid, "content": json.dumps(case.results[name], ensure_ascii=False)}
        for cid, name, _ in calls
    ]
    return [*case.messages, assistant, *results]


def run_case(api: ApiClient, model: str, case: ToolCase, sampling: Sampling) -> CaseResult:
    kw: dict[str, Any] = {"tools": case.tools, "tool_choice": case.tool_choice}
    plain = ask_plain(api, model, case.messages, sampling, **kw)
    stream = ask_stream(api, model, case.messages, sampling, **kw)
    failures = _judge(case, 1, plain, stream, case.calls, [] if case.multi_turn else case.answer)
    latency = {"plain": round(plain.latency_s, 4), "stream": round(stream.latency_s, 4)}
    if case.multi_turn:
        step1_ok = plain.ok and not any(f.variant == "plain" for f in failures)
        messages = _history(case, plain, step1_ok)
        plain2 = ask_plain(api, model, messages, sampling, **kw)
        stream2 = ask_stream(api, model, messages, sampling, **kw)
        failures += _judge(case, 2, plain2, stream2, [], case.answer)
        latency |= {"plain_final": round(plain2.latency_s, 4), "stream_final": round(stream2.latency_s, 4)}
    classes = list(dict.fromkeys(f.cls for f in failures))
    return CaseResult(
        id=case.id,
        category=case.category,
        passed=not failures,
        classes=classes,
        failures=failures,
        calls={"plain": _calls_json(plain), "stream": _calls_json(stream)},
        latency_s=latency,
    )


def run_battery(
    api: ApiClient,
    model: str,
    cases: Sequence[ToolCase],
    sampling: Sampling,
    *,
    quiet: bool = False,
) -> ToolsReport:
    progress = Progress(len(cases), quiet, "tools ")
    results: list[CaseResult] = []
    stopped: str | None = None
    try:
        for case in cases:
            r = run_case(api, model, case, sampling)
            results.append(r)
            progress.step(f"{case.id}: {'pass' if r.passed else 'FAIL ' + ', '.join(r.classes)}")
    except (KeyboardInterrupt, ApiUnreachable) as exc:  # a partial report of the cases that ran
        stopped = stopped_by(exc)
    by_cat: dict[str, CategoryCount] = {}
    for r in results:
        cc = by_cat.setdefault(r.category, CategoryCount())
        cc.cases += 1
        cc.passed += int(r.passed)
    by_class = Counter(cls for r in results for cls in r.classes)
    passed = sum(r.passed for r in results)
    return ToolsReport(
        schema=SCHEMA_VERSION,
        gate="tools",
        base_url=api.api_url,
        model=model,
        cases=len(results),
        passed=passed,
        failed=len(results) - passed,
        # nothing run, or stopped early: not held
        result="pass" if results and passed == len(results) and stopped is None else "fail",
        by_category=by_cat,
        by_class=dict(sorted(by_class.items())),
        results=results,
        partial=stopped is not None,
        stopped=stopped,
    )


def render(report: ToolsReport) -> str:
    lines = []
    for r in report.results:
        if r.passed:
            lines.append(f"pass  {r.id} ({r.category})")
            continue
        lines.append(f"FAIL  {r.id} ({r.category}): {', '.join(r.classes)}")
        for f in r.failures:
            step = f" step {f.step}" if f.step > 1 else ""
            lines.append(f"        {f.cls} [{f.variant}{step}] {f.detail}")
    lines.append("")
    width = max(len(c) for c in report.by_category)
    for cat, cc in report.by_category.items():
        lines.append(f"  {cat:<{width}}  {cc.passed:>3}/{cc.cases}")
    if report.by_class:
        lines.append("  failing cases by class: " + ", ".join(f"{k} {v}" for k, v in report.by_class.items()))
    verdict = "PASS" if report.result == "pass" else "FAIL"
    lines.append(f"{verdict}: tool-call battery {report.passed}/{report.cases} ({report.model})")
    return "\n".join(lines)
