"""Judging one answer of the tool-call battery: the AST check, the stream check and the reasoning check.

* `ast_check`: BFCL's AST checker — the right functions (any order, each expected call matched once),
  arguments a JSON object, valid against the tool's JSON schema (`jsonschema`: types, enums, required),
  no parameter the case does not allow, each value one of the accepted answers (`match`).
* `stream_check`: the streamed answer against the non-streamed one of the same request — every call is
  there (a zero-argument one too), each name arrives once and is the same, no argument fragment repeats
  what came before, `{}` is not flushed over real arguments, and the joined fragments parse to the same
  object.
* `leak_check`: with a reasoning parser on, reasoning stays out of `content` and out of the arguments.

Each problem is a `(class, detail)` pair; the classes are `vllm_station.batteries.classes`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from vllm_station import bounded
from vllm_station.api import ToolCall
from vllm_station.api.sse import excerpt
from vllm_station.batteries import classes as C
from vllm_station.batteries.cases import ExpectedCall
from vllm_station.batteries.match import contains_fact, matches

Problem = tuple[str, str]
THINK_MARKERS = ("<think>", "</think>")
MIN_REASONING_CHARS = 16  # shorter reasoning is too common a phrase to call a leak


@dataclass
class Answer:
    """One answer as the client saw it (`variant`: plain or stream)."""

    variant: str
    content: str | None = None
    reasoning: str | None = None
    calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    latency_s: float = 0.0
    name_deltas: dict[int, int] = field(default_factory=dict)  # stream: chunks that carried a name
    fragments: dict[int, list[str]] = field(default_factory=dict)  # stream: argument fragments, in order
    error: str | None = None  # the request failed: why

    @property
    def ok(self) -> bool:
        return self.error is None


def parse_arguments(text: str) -> tuple[dict[str, Any] | None, str]:
    """(the arguments object, "") or (None, why not)."""
    try:
        obj = bounded.loads_json(text)
    except ValueError as exc:
        return None, f"not JSON ({exc}): {excerpt(text, 80)!r}"
    if not isinstance(obj, dict):
        return None, f"a JSON {type(obj).__name__}, not an object: {excerpt(text, 80)!r}"
    return obj, ""


def _schema_problems(args: dict[str, Any], schema: dict[str, Any], fn: str) -> tuple[list[Problem], set[str]]:
    """The JSON-schema violations, and the top-level parameters whose values violate it."""
    out: list[Problem] = []
    wrong: set[str] = set()
    for err in sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(args), key=lambda e: str(list(e.path))
    ):
        where = ".".join(str(p) for p in err.path) or "arguments"
        if err.validator == "required" and not err.path:
            out.append((C.MISSING_PARAM, f"{fn}: {err.message}"))
        elif err.validator == "additionalProperties" and not err.path:
            out.append((C.UNEXPECTED_PARAM, f"{fn}: {err.message}"))
        else:
            out.append((C.WRONG_TYPE, f"{fn}: {where}: {err.message}"))
            if err.path:
                wrong.add(str(err.path[0]))
    return out, wrong


def check_call(call: ToolCall, exp: ExpectedCall, schema: dict[str, Any], exact: bool) -> list[Problem]:
    """One call against one expected call: [] when it is an accepted answer."""
    if call.name != exp.name:
        return [(C.WRONG_FUNCTION, f"called {call.name!r}, expected {exp.name!r}")]
    args, why = parse_arguments(call.arguments)
    if args is None:
        return [(C.INVALID_ARGUMENTS, f"{exp.name} arguments are {why}")]
    out, typed_wrong = _schema_problems(args, schema, exp.name)
    for key, accepted in exp.arguments.items():
        if key not in args and None not in accepted and not any(p[0] == C.MISSING_PARAM for p in out):
            out.append((C.MISSING_PARAM, f"{exp.name}: {key!r} is missing"))
    for key, value in args.items():
        if key not in exp.arguments:
            out.append(
                (
                    C.UNEXPECTED_PARAM,
                    f"{exp.name}: unexpected parameter {key!r}={excerpt(json.dumps(value), 40)}",
                )
            )
        elif key not in typed_wrong and not any(
            matches(value, alt, exact=exact) for alt in exp.arguments[key] if alt is not None
        ):
            shown = [a for a in exp.arguments[key] if a is not None][:3]
            out.append(
                (C.WRONG_VALUE, f"{exp.name}: {key}={json.dumps(value, ensure_ascii=False)}, accepted: "
                 f"{json.dumps(shown, ensure_ascii=False)}")
            )  # fmt: skip
    return out


def _names(calls: Iterable[ToolCall]) -> str:
    return ", ".join(str(c.name) for c in calls) or "none"


def ast_check(
    calls: Sequence[ToolCall],
    expected: Sequence[ExpectedCall],
    schemas: dict[str, dict[str, Any]],
    exact: bool,
) -> list[Problem]:
    """The calls of one answer against the expected calls (any order)."""
    if not expected:
        return [(C.UNEXPECTED_CALL, f"called {_names(calls)}; no call expected")] if calls else []
    want = ", ".join(e.name for e in expected)
    if not calls:
        return [(C.NO_CALL, f"no tool call; expected {want}")]
    out: list[Problem] = []
    if len(calls) != len(expected):
        out.append(
            (C.WRONG_COUNT, f"{len(calls)} calls ({_names(calls)}); expected {len(expected)} ({want})")
        )
    unused = list(range(len(calls)))
    unmatched: list[ExpectedCall] = []
    for exp in expected:
        hit = next(
            (i for i in unused if not check_call(calls[i], exp, schemas.get(exp.name, {}), exact)), None
        )
        if hit is None:
            unmatched.append(exp)
        else:
            unused.remove(hit)
    for exp in unmatched:
        same = [i for i in unused if calls[i].name == exp.name]
        if same:
            unused.remove(same[0])
            out += check_call(calls[same[0]], exp, schemas.get(exp.name, {}), exact)
        elif unused and len(calls) == len(expected):
            out += check_call(calls[unused.pop(0)], exp, schemas.get(exp.name, {}), exact)
        elif not out:
            out.append((C.NO_CALL, f"no call of {exp.name}"))
    return out


def text_check(ans: Answer, facts: Sequence[Sequence[str]]) -> list[Problem]:
    """A text answer is there and states every fact (each in one of its spellings)."""
    content = (ans.content or "").strip()
    if not content:
        said = f" (reasoning only: {excerpt(ans.reasoning, 60)!r})" if ans.reasoning else ""
        return [(C.NO_ANSWER, f"no text answer{said}; finish_reason={ans.finish_reason}")]
    missing = [f[0] for f in facts if not contains_fact(content, list(f))]
    if missing:
        return [(C.ANSWER_MISSING_FACTS, f"the answer lacks {', '.join(missing)}: {excerpt(content, 80)!r}")]
    return []


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def leak_check(ans: Answer, reasoning: Iterable[str | None]) -> list[Problem]:
    """Reasoning (think markers, or the text of this request's reasoning) in the content or the arguments."""
    refs = [r.strip() for r in reasoning if r and len(r.strip()) >= MIN_REASONING_CHARS]

    def leaked(text: str) -> str | None:
        for m in THINK_MARKERS:
            if m in text:
                return m
        return next((r for r in refs if r in text), None)

    out: list[Problem] = []
    hit = leaked(ans.content or "")
    if hit:
        out.append((C.REASONING_IN_CONTENT, f"content holds reasoning {excerpt(hit, 50)!r}"))
    for call in ans.calls:
        args, _ = parse_arguments(call.arguments)
        texts = [call.arguments, *(_strings(args) if args is not None else [])]
        hit = next((h for h in map(leaked, texts) if h), None)
        if hit:
            out.append(
                (C.REASONING_IN_ARGUMENTS, f"{call.name} arguments hold reasoning {excerpt(hit, 50)!r}")
            )
    return out


def _zero_arg(call_args: str | None, exp: ExpectedCall | None) -> bool:
    if exp is not None:
        return not exp.arguments
    args, _ = parse_arguments(call_args or "")
    return args == {}


def _pair(
    ref: Sequence[ToolCall], stream: Sequence[ToolCall]
) -> tuple[dict[int, ToolCall], list[tuple[int, ToolCall]], list[ToolCall], list[int]]:
    """Streamed calls matched to non-streamed ones: by name first (k-th with k-th), then what is left over
    in order. Returns (twin per streamed position, renamed pairs (position, non-streamed call),
    non-streamed calls never streamed, streamed positions with no non-streamed call)."""
    twins: dict[int, ToolCall] = {}
    left = list(ref)
    unmatched: list[int] = []
    for pos, call in enumerate(stream):
        hit = next((r for r in left if r.name == call.name), None)
        if hit is None:
            unmatched.append(pos)
        else:
            left.remove(hit)
            twins[pos] = hit
    renamed = list(zip(unmatched, left, strict=False))
    for pos, r in renamed:
        twins[pos] = r
    return twins, renamed, left[len(renamed) :], unmatched[len(renamed) :]


def stream_check(
    plain: Answer | None,
    stream: Answer,
    expected: Sequence[ExpectedCall],
    schemas: dict[str, dict[str, Any]],
) -> list[Problem]:
    """Serving faults visible in the streamed answer, against the non-streamed one where it is there."""
    out: list[Problem] = []
    ref = plain.calls if plain is not None and plain.ok else None
    by_name = {e.name: e for e in expected}
    offered = set(schemas)
    if stream.finish_reason == "tool_calls" and not stream.calls:
        lost = ref or []
        zero = (
            any(_zero_arg(c.arguments, None) for c in lost)
            if lost
            else any(not e.arguments for e in expected)
        )
        out.append(
            (C.ZERO_ARG_DROPPED if zero else C.STREAM_CALL_DROPPED,
             "the stream ended with finish_reason tool_calls but no delta.tool_calls"
             + (f" (non-streamed: {_names(lost)})" if lost else ""))
        )  # fmt: skip
        return out
    twins, renamed, dropped, extra = _pair(ref or [], stream.calls)
    for call in dropped if ref is not None else []:
        zero = _zero_arg(call.arguments, by_name.get(str(call.name)))
        out.append(
            (C.ZERO_ARG_DROPPED if zero else C.STREAM_CALL_DROPPED,
             f"streamed without the call of {call.name} that the non-streamed answer has")
        )  # fmt: skip
    renamed_at = dict(renamed)
    for pos in extra if ref is not None else []:
        out.append(
            (
                C.STREAM_MISMATCH,
                f"streamed a call of {stream.calls[pos].name} that the non-streamed answer lacks",
            )
        )
    for pos, call in enumerate(stream.calls):
        nd = stream.name_deltas.get(call.index, 0)
        if nd != 1:
            out.append(
                (
                    C.WRONG_STREAM_NAME,
                    f"call {pos}: the name arrived in {nd} chunks ({call.name!r}); expected once",
                )
            )
        elif pos in renamed_at:
            out.append(
                (C.WRONG_STREAM_NAME, f"call {pos}: streamed name {call.name!r} where the non-streamed "
                 f"answer calls {renamed_at[pos].name!r}")
            )  # fmt: skip
        elif call.name not in offered and ref is None:  # with a twin of that name, the model chose it
            out.append(
                (C.WRONG_STREAM_NAME, f"call {pos}: streamed name {call.name!r} is not an offered tool")
            )
        frags = stream.fragments.get(call.index, [])
        cumulative = next(
            (
                k
                for k in range(1, len(frags))
                if "".join(frags[:k]).strip() and frags[k].startswith("".join(frags[:k]))
            ),
            None,
        )
        if cumulative is not None:
            out.append(
                (C.CUMULATIVE_DELTA, f"{call.name}: fragment {cumulative + 1} of {len(frags)} repeats the "
                 f"{len(''.join(frags[:cumulative]))} characters before it: "
                 f"{excerpt(frags[cumulative], 60)!r}")
            )  # fmt: skip
            continue
        twin = twins.get(pos)
        text = call.arguments.strip()
        twin_args = parse_arguments(twin.arguments)[0] if twin is not None else None
        name = twin.name if twin is not None else call.name
        required = (schemas.get(str(name)) or {}).get("required") or []
        if text.endswith("{}") and (
            (text == "{}" and (bool(twin_args) or bool(required)))
            or (text != "{}" and parse_arguments(text[:-2])[0] is not None)
        ):
            out.append(
                (
                    C.EMPTY_ARGS_FLUSHED,
                    f"{name}: streamed arguments {excerpt(text, 60)!r}"
                    + (f"; non-streamed {excerpt(twin.arguments, 60)!r}" if twin is not None else ""),
                )
            )
            continue
        if twin is not None and twin_args is not None and parse_arguments(call.arguments)[0] != twin_args:
            out.append(
                (C.STREAM_MISMATCH, f"{name}: streamed arguments {excerpt(call.arguments, 60)!r}, "
                 f"non-streamed {excerpt(twin.arguments, 60)!r}")
            )  # fmt: skip
    return out
