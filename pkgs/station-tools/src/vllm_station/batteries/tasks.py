"""The agent battery's tasks: the task files (`data/agent/<domain>.json`, one per domain, and an operator's
`--tasks` files), each checked at load by replaying its reference path in the office environment (`env`).

What `station gates agent` runs and what `station simulate --gates` answers along the reference path. The
file format is in docs/gates.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_station.batteries.cases import BUILTIN, data_dir, read_json, user_files
from vllm_station.batteries.env import DOMAINS, Environment
from vllm_station.batteries.match import contains_fact
from vllm_station.errors import UsageError


@dataclass(frozen=True)
class AgentTask:
    id: str
    domain: str
    instruction: str
    initial: dict[str, Any]
    reference: list[list[tuple[str, dict[str, Any]]]]
    answer: list[list[str]]
    reference_answer: str
    expected: dict[str, Any]  # the canonical final state of the reference path
    source: str = BUILTIN

    @property
    def zero_arg_calls(self) -> bool:
        """Whether the reference path calls a tool without arguments (a streaming parser's weak spot)."""
        return any(not args for turn in self.reference for _, args in turn)


def load_agent_tasks(extra: Iterable[Path] = (), *, builtin: bool = True) -> list[AgentTask]:
    files: list[tuple[Any, str]] = []
    if builtin:
        d = data_dir() / "agent"
        files += sorted(
            ((p, f"{BUILTIN}:{p.name}") for p in d.iterdir() if p.name.endswith(".json")), key=lambda x: x[1]
        )
    files += user_files(extra, "--tasks")
    tasks: list[AgentTask] = []
    seen: dict[str, str] = {}
    for path, label in files:
        for task in _parse_file(read_json(path, label), label):
            if task.id in seen:
                raise UsageError(f"{label}: task id {task.id!r} is also in {seen[task.id]}")
            if any(t.instruction == task.instruction for t in tasks):
                raise UsageError(f"{label}: task {task.id!r} repeats another task's instruction")
            seen[task.id] = label
            tasks.append(task)
    if not tasks:
        raise UsageError("the agent battery has no tasks")
    return tasks


def _parse_file(obj: dict[str, Any], label: str) -> list[AgentTask]:
    domain = obj.get("domain")
    if domain not in DOMAINS:
        raise UsageError(f'{label}: "domain" must be one of {", ".join(DOMAINS)}')
    initial = obj.get("initial")
    raw = obj.get("tasks")
    if not isinstance(raw, list) or not raw:
        raise UsageError(f'{label}: "tasks" must be a non-empty list')
    return [_parse_task(t, i, str(domain), initial, label) for i, t in enumerate(raw)]


def _parse_task(t: Any, i: int, domain: str, file_initial: Any, label: str) -> AgentTask:
    if not isinstance(t, dict) or not isinstance(t.get("id"), str):
        raise UsageError(f'{label}: task #{i + 1} has no "id" string')
    where = f"{label}: task {t['id']!r}"
    initial = t.get("initial", file_initial)
    if not isinstance(initial, dict):
        raise UsageError(f'{where}: no "initial" state (in the task or its file)')
    if not isinstance(t.get("instruction"), str) or not t["instruction"].strip():
        raise UsageError(f'{where}: "instruction" must be a non-empty string')
    ref_raw = t.get("reference")
    if (
        not isinstance(ref_raw, list)
        or not ref_raw
        or not all(isinstance(turn, list) and turn for turn in ref_raw)
    ):
        raise UsageError(f'{where}: "reference" is a non-empty list of turns, each a non-empty list of calls')
    env = Environment(domain, initial)
    reference: list[list[tuple[str, dict[str, Any]]]] = []
    for n, turn in enumerate(ref_raw, 1):
        calls: list[tuple[str, dict[str, Any]]] = []
        for c in turn:
            if (
                not isinstance(c, dict)
                or not isinstance(c.get("name"), str)
                or not isinstance(c.get("arguments", {}), dict)
            ):
                raise UsageError(f'{where}: turn {n}: each call is {{"name": …, "arguments": {{…}}}}')
            args = c.get("arguments", {})
            result, ok = env.call(c["name"], json.dumps(args))
            if not ok:
                raise UsageError(f"{where}: turn {n}: the reference call {c['name']} fails: {result}")
            calls.append((c["name"], args))
        reference.append(calls)
    answer = t.get("answer") or []
    reference_answer = t.get("reference_answer")
    if not isinstance(answer, list) or not all(
        isinstance(f, list) and f and all(isinstance(s, str) for s in f) for f in answer
    ):
        raise UsageError(f'{where}: "answer" is a list of facts, each a list of accepted spellings')
    if not isinstance(reference_answer, str):
        raise UsageError(f'{where}: "reference_answer" must be a string')
    for fact in answer:
        if not contains_fact(reference_answer, fact):
            raise UsageError(f"{where}: the reference_answer does not state the fact {fact}")
    if env.canonical() == Environment(domain, initial).canonical():
        raise UsageError(f"{where}: the reference path changes nothing; a task must change the state")
    return AgentTask(
        id=t["id"],
        domain=domain,
        instruction=t["instruction"],
        initial=initial,
        reference=reference,
        answer=answer,
        reference_answer=reference_answer,
        expected=env.canonical(),
        source=label,
    )
