"""The tool-call battery's cases: JSON data, one file per category, shipped in this package.

A category file (`data/tools/<category>.json`)::

    {"category": "simple", "description": "...", "strings": "normalized" | "exact",
     "tools": {NAME: {"description": ..., "parameters": JSON-SCHEMA}, ...},   # optional, beside the library
     "cases": [
       {"id": "simple-string",
        "prompt": "What's the weather like in Lisbon?",          # or "messages": [...]
        "system": "...",                                          # optional
        "tools": ["get_weather"],                                 # names (library or this file)
        "tool_choice": "auto" | "none" | "required" | {"type": "function", "function": {"name": ...}},
        "calls": [{"name": "get_weather", "arguments": {"location": ["Lisbon"], "unit": [null, "celsius"]}}],
        "results": {"get_weather": {...}},      # multi-turn: fed back as the tool's result
        "answer": [["-4", "minus 4"], ["snow"]],  # multi-turn: facts the final answer must hold
        "reference_answer": "..."}              # what a correct deployment says (the simulator's answer)
     ]}

`calls` lists the expected calls (any order); `[]` expects none. Each argument lists its accepted answers
(`vllm_station.batteries.match`); `null` among them lets the parameter be left out. The tool library
(`data/tools.json`) holds the tools the shipped cases use. An operator adds cases by writing more files in
this format and passing them with `--cases FILE|DIR` (their `tools` may define new tools).

Loading validates everything a case states against the tools' JSON schemas (`jsonschema`), so a broken case
is a usage error naming its file and id, never a false failure of the model.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from vllm_station import bounded
from vllm_station.batteries.match import contains_fact, example, is_matcher, matches
from vllm_station.errors import UsageError

BUILTIN = "builtin"


@dataclass(frozen=True)
class ExpectedCall:
    name: str
    arguments: dict[str, list[Any]]  # parameter -> accepted answers (None: may be left out)

    def reference_arguments(self) -> dict[str, Any]:
        """The arguments a correct deployment sends: the first accepted answer of each parameter."""
        out: dict[str, Any] = {}
        for key, accepted in self.arguments.items():
            first = accepted[0]
            if first is not None:
                out[key] = example(first)
        return out


@dataclass(frozen=True)
class ToolCase:
    id: str
    category: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]  # OpenAI tool objects
    tool_choice: str | dict[str, Any]
    calls: list[ExpectedCall]
    exact: bool = False
    results: dict[str, Any] | None = None
    answer: list[list[str]] = field(default_factory=list)
    reference_answer: str | None = None
    source: str = BUILTIN

    @property
    def schemas(self) -> dict[str, dict[str, Any]]:
        return {t["function"]["name"]: t["function"].get("parameters") or {} for t in self.tools}

    @property
    def prompt(self) -> str:
        """The first user message (how the simulator recognises the case)."""
        return first_user_text(self.messages)

    @property
    def multi_turn(self) -> bool:
        return self.results is not None


def first_user_text(messages: Iterable[dict[str, Any]]) -> str:
    for m in messages:
        if m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, list):
                return " ".join(str(p.get("text", "")) for p in c if isinstance(p, dict))
            return str(c or "")
    return ""


def data_dir() -> Any:
    return resources.files("vllm_station.batteries") / "data"


def read_json(path: Any, label: str) -> dict[str, Any]:
    try:
        if isinstance(path, Path):  # a user's file: regular, bounded, nested at most MAX_JSON_DEPTH
            obj = bounded.read_json(path, limit=bounded.CONFIG_LIMIT)
        else:  # the shipped data (importlib.resources)
            obj = bounded.loads_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{label}: not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{label}: cannot read it ({exc.__class__.__name__}: {exc})") from None
    except ValueError as exc:
        raise UsageError(f"{label}: not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise UsageError(f"{label}: expected a JSON object")
    return obj


def tool_library() -> dict[str, dict[str, Any]]:
    """The shipped tool definitions by name (`data/tools.json`)."""
    obj = read_json(data_dir() / "tools.json", "gates data tools.json")
    tools: dict[str, dict[str, Any]] = obj["tools"]
    return tools


def _tool_object(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    fn = {"name": name, "description": spec.get("description", ""), "parameters": spec.get("parameters")}
    return {"type": "function", "function": fn}


def _builtin_files() -> list[tuple[Any, str]]:
    d = data_dir() / "tools"
    return sorted(
        ((p, f"{BUILTIN}:{p.name}") for p in d.iterdir() if p.name.endswith(".json")), key=lambda x: x[1]
    )


def user_files(paths: Iterable[Path], option: str = "--cases") -> list[tuple[Any, str]]:
    """(path, label) of every user file: a file as given, a directory's *.json (read_json refuses what
    is not a regular file)."""
    out: list[tuple[Any, str]] = []
    for p in paths:
        if p.is_dir():
            try:
                files = sorted(f for f in p.iterdir() if f.suffix == ".json")
            except OSError as exc:
                raise UsageError(f"{option} {p}: cannot list it ({exc.strerror or exc})") from None
            if not files:
                raise UsageError(f"{option} {p}: no *.json files in this directory")
            out += [(f, str(f)) for f in files]
        else:
            out.append((p, str(p)))
    return out


def load_tool_cases(extra: Iterable[Path] = (), *, builtin: bool = True) -> list[ToolCase]:
    """The battery: the shipped category files (unless `builtin` is False) and the files in `extra`."""
    library = tool_library()
    files = (_builtin_files() if builtin else []) + user_files(extra)
    cases: list[ToolCase] = []
    seen_ids: dict[str, str] = {}
    seen_prompts: dict[str, str] = {}
    for path, label in files:
        for case in _parse_file(read_json(path, label), label, library):
            if case.id in seen_ids:
                raise UsageError(f"{label}: case id {case.id!r} is also in {seen_ids[case.id]}")
            if case.prompt in seen_prompts:
                raise UsageError(
                    f"{label}: case {case.id!r} repeats the prompt of case {seen_prompts[case.prompt]!r}"
                )
            seen_ids[case.id] = label
            seen_prompts[case.prompt] = case.id
            cases.append(case)
    if not cases:
        raise UsageError("the battery has no cases")
    return cases


def _parse_file(obj: dict[str, Any], label: str, library: dict[str, dict[str, Any]]) -> list[ToolCase]:
    category = obj.get("category")
    if not isinstance(category, str) or not category:
        raise UsageError(f'{label}: no "category" string')
    own = obj.get("tools") or {}
    if not isinstance(own, dict):
        raise UsageError(f'{label}: "tools" must be an object of NAME: {{description, parameters}}')
    tools = {**library, **own}
    strings = obj.get("strings", "normalized")
    if strings not in ("normalized", "exact"):
        raise UsageError(f'{label}: "strings" is "normalized" or "exact", not {strings!r}')
    raw_cases = obj.get("cases")
    if not isinstance(raw_cases, list) or not raw_cases:
        raise UsageError(f'{label}: "cases" must be a non-empty list')
    return [_parse_case(c, i, category, label, tools, strings == "exact") for i, c in enumerate(raw_cases)]


def _parse_case(
    c: Any, i: int, category: str, label: str, tools: dict[str, dict[str, Any]], exact: bool
) -> ToolCase:
    if not isinstance(c, dict) or not isinstance(c.get("id"), str):
        raise UsageError(f'{label}: case #{i + 1} has no "id" string')
    where = f"{label}: case {c['id']!r}"
    if "messages" in c:
        messages = c["messages"]
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise UsageError(f'{where}: "messages" must be a list of message objects')
    elif isinstance(c.get("prompt"), str):
        messages = [{"role": "user", "content": c["prompt"]}]
    else:
        raise UsageError(f'{where}: give "prompt" (a string) or "messages"')
    if isinstance(c.get("system"), str):
        messages = [{"role": "system", "content": c["system"]}, *messages]
    if not first_user_text(messages):
        raise UsageError(f"{where}: no user message")
    names = c.get("tools")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise UsageError(f'{where}: "tools" must be a non-empty list of tool names')
    unknown = [n for n in names if n not in tools]
    if unknown:
        raise UsageError(
            f'{where}: unknown tools {", ".join(unknown)} (define them under the file\'s "tools")'
        )
    tool_objs = [_tool_object(n, tools[n]) for n in names]
    schemas = {n: tools[n].get("parameters") or {} for n in names}
    for n, schema in schemas.items():
        problem = _schema_problem(json.dumps(schema, sort_keys=True))
        if problem:
            raise UsageError(f"{where}: tool {n}'s parameters are not a valid JSON schema: {problem}")
    choice = c.get("tool_choice", "auto")
    if isinstance(choice, dict):
        named = (choice.get("function") or {}).get("name")
        if named not in names:
            raise UsageError(f"{where}: tool_choice names {named!r}, which the case does not offer")
    elif choice not in ("auto", "none", "required"):
        raise UsageError(f"{where}: tool_choice must be auto, none, required or a named function")
    raw_calls = c.get("calls")
    if not isinstance(raw_calls, list):
        raise UsageError(f'{where}: "calls" must be a list (empty: no call expected)')
    calls = [_parse_call(rc, where, schemas) for rc in raw_calls]
    if choice == "none" and calls:
        raise UsageError(f"{where}: tool_choice none cannot expect calls")
    if choice == "required" and not calls:
        raise UsageError(f"{where}: tool_choice required needs an expected call")
    results = c.get("results")
    answer = c.get("answer") or []
    if results is not None:
        if not isinstance(results, dict) or not calls or any(ec.name not in results for ec in calls):
            raise UsageError(f'{where}: "results" must give a result for every expected call, by name')
        if not answer:
            raise UsageError(f'{where}: a multi-turn case needs "answer" facts')
    if not isinstance(answer, list) or not all(
        isinstance(f, list) and f and all(isinstance(s, str) for s in f) for f in answer
    ):
        raise UsageError(f'{where}: "answer" is a list of facts, each a list of accepted spellings')
    reference = c.get("reference_answer")
    if reference is not None and not isinstance(reference, str):
        raise UsageError(f'{where}: "reference_answer" must be a string')
    for fact in answer:
        if reference is None or not contains_fact(reference, fact):
            raise UsageError(f"{where}: the reference_answer does not state the fact {fact}")
    return ToolCase(
        id=c["id"],
        category=category,
        messages=messages,
        tools=tool_objs,
        tool_choice=choice,
        calls=calls,
        exact=exact,
        results=results,
        answer=answer,
        reference_answer=reference,
        source=label,
    )


@functools.lru_cache(maxsize=256)
def _schema_problem(schema_json: str) -> str | None:
    """Why a tool's parameters are not a valid JSON schema (None: they are); each schema checked once."""
    try:
        jsonschema.Draft202012Validator.check_schema(bounded.loads_json(schema_json))
    except jsonschema.SchemaError as exc:
        return str(exc.message)
    return None


def _parse_call(rc: Any, where: str, schemas: dict[str, dict[str, Any]]) -> ExpectedCall:
    if not isinstance(rc, dict) or not isinstance(rc.get("name"), str):
        raise UsageError(f'{where}: each expected call needs a "name"')
    name = rc["name"]
    if name not in schemas:
        raise UsageError(f"{where}: expects a call of {name}, which the case does not offer")
    args = rc.get("arguments", {})
    if not isinstance(args, dict) or not all(isinstance(v, list) and v for v in args.values()):
        raise UsageError(f'{where}: {name}\'s "arguments" map each parameter to a non-empty list of answers')
    schema = schemas[name]
    props = schema.get("properties") or {}
    for key in args:
        if key not in props:
            raise UsageError(f"{where}: {name} has no parameter {key!r}")
    for key in schema.get("required") or []:
        if key not in args or None in args[key]:
            raise UsageError(
                f"{where}: {name}'s required parameter {key!r} must be expected (and not omittable)"
            )
    # every accepted literal must be valid for the tool: the reference answer has to pass the checker
    ref = {k: example(v[0]) for k, v in args.items() if v[0] is not None}
    for key, accepted in args.items():
        for alt in accepted:
            if alt is None or is_matcher(alt):
                continue
            errors = sorted(jsonschema.Draft202012Validator(props[key]).iter_errors(alt), key=str)
            if errors:
                raise UsageError(
                    f"{where}: accepted {key}={alt!r} violates {name}'s schema: {errors[0].message}"
                )
        first = accepted[0]
        if first is not None and not matches(example(first), first):
            raise UsageError(f"{where}: {key}'s first answer has no example that matches it")
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(ref), key=str)
    if errors:
        raise UsageError(
            f"{where}: the reference call {name}({ref}) violates the schema: {errors[0].message}"
        )
    return ExpectedCall(name, args)
