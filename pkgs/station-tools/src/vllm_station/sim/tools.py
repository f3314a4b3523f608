"""The simulator as a model behind a correct — or a deliberately broken — tool and reasoning parser.

With `station simulate --gates reference` the simulator answers the gates' requests as a correct deployment
would: the tool-call battery's cases with their expected calls (the first accepted answer of every
argument) and their reference answers, the agent battery's tasks along their reference path, and needle
questions with the needle found in the prompt. Every answer carries reasoning (`reasoning` in the message
and in the stream), as GLM-5.3 behind `--reasoning-parser glm45` does. Streams are shaped like vLLM's: a
tool call's first delta carries its id and name, then argument fragments follow.

`--gates FAULT` answers the same way, through one serving fault
(`vllm_station.batteries.classes.SERVING_FAULTS`):

- `zero_arg_dropped`      streamed: calls without arguments are left out; finish_reason stays tool_calls
- `empty_args_flushed`    streamed: a call's argument fragments are replaced by one `{}` flush
- `cumulative_delta`      streamed: the last argument fragment repeats the whole arguments
- `wrong_stream_name`     streamed: the tool name is cut at its first underscore (get_weather -> get)
- `reasoning_in_content`  streamed: a text answer's reasoning arrives as content, then `</think>`
- `reasoning_in_arguments` plain and streamed: the reasoning is written into the first string argument
- `long_context`          prompts over half of max_model_len: the needle's number is wrong and a call's
                          arguments are cut off (the near-full-context breakage seen with MTP on)

Requests that are none of the gates' keep the simulator's usual answers.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from vllm_station import bounded
from vllm_station.batteries import classes as C
from vllm_station.batteries.cases import ToolCase, first_user_text, load_tool_cases
from vllm_station.batteries.needles import RECORD_TOOL, find_answer
from vllm_station.batteries.tasks import AgentTask, load_agent_tasks

REFERENCE = "reference"
MODES = (REFERENCE, *C.SERVING_FAULTS)
REASONING = "Let me work out what the user needs and which of the offered tools, if any, answers it."
NO_TOOL_ANSWER = "I can answer that without calling a tool."
LONG_CONTEXT_FRACTION = 0.5


@dataclass
class Reply:
    """What the simulated model answers, before the (possibly faulty) parser renders it."""

    reasoning: str | None = None
    content: str | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)  # (name, arguments JSON)
    named: bool = False  # tool_choice named a function: vLLM finishes with "stop"

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.calls and not self.named else "stop"


def _words(text: str) -> list[str]:
    """A text as token-like pieces that join back to it exactly."""
    out: list[str] = []
    for i, w in enumerate(text.split(" ")):
        out.append(w if i == 0 else " " + w)
    return [p for p in out if p]


def _fragments(args: str) -> list[str]:
    """Argument JSON in about three fragments (one for `{}`), as a parser streams it."""
    if len(args) <= 2:
        return [args]
    third = max(1, len(args) // 3)
    return [args[i : i + third] for i in range(0, len(args), third)]


def _call_id(name: str, args: str, index: int) -> str:
    return f"chatcmpl-tool-{zlib.crc32(f'{index}:{name}:{args}'.encode()):08x}"


def _with_reasoning_in_first_string(args: str, reasoning: str) -> str:
    obj = bounded.loads_json(args)
    for key, value in obj.items():
        if isinstance(value, str):
            obj[key] = reasoning + " " + value
            return json.dumps(obj, ensure_ascii=False)
    return args


@dataclass
class Rendered:
    """A reply as the server sends it: the non-streamed message, or the streamed deltas."""

    message: dict[str, Any]
    deltas: list[dict[str, Any]]
    finish_reason: str


class GatesModel:
    """The reference answers of the gates, through the parser fault `mode` (or none: `reference`)."""

    def __init__(self, mode: str, max_model_len: int) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown gates mode {mode!r}")
        self.mode = mode
        self.max_model_len = max_model_len
        self.cases: dict[str, ToolCase] = {c.prompt: c for c in load_tool_cases()}
        self.tasks: dict[str, AgentTask] = {t.instruction: t for t in load_agent_tasks()}

    def answer(self, body: dict[str, Any], prompt_tokens: int) -> Rendered | None:
        """A gates request's answer as the server sends it, or None for any other request."""
        reply = self.reply(body, prompt_tokens)
        if reply is None:
            return None
        return Rendered(self.message(reply), self.deltas(reply), reply.finish_reason)

    # ---- what the model says ---------------------------------------------------------------------
    def reply(self, body: dict[str, Any], prompt_tokens: int) -> Reply | None:
        """The reference answer to a gates request, or None for any other request."""
        messages = body.get("messages") or []
        prompt = first_user_text(messages)
        turn = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
        choice = body.get("tool_choice", "auto")
        reply = (
            self._tool_case(prompt, turn, choice)
            or self._agent_task(prompt, turn)
            or self._needle(messages, bool(body.get("tools")))
        )
        if reply is None:
            return None
        if self.mode == C.LONG_CONTEXT and prompt_tokens > LONG_CONTEXT_FRACTION * self.max_model_len:
            reply = self._broken_long(reply)
        return reply

    def _tool_case(self, prompt: str, turn: int, choice: Any) -> Reply | None:
        case = self.cases.get(prompt)
        if case is None:
            return None
        if choice == "none" or turn > 0 or not case.calls:
            return Reply(REASONING, case.reference_answer or NO_TOOL_ANSWER)
        calls = [(e.name, json.dumps(e.reference_arguments(), ensure_ascii=False)) for e in case.calls]
        return Reply(REASONING, None, calls, named=isinstance(choice, dict))

    def _agent_task(self, prompt: str, turn: int) -> Reply | None:
        task = self.tasks.get(prompt)
        if task is None:
            return None
        if turn >= len(task.reference):
            return Reply(REASONING, task.reference_answer)
        calls = [(name, json.dumps(args, ensure_ascii=False)) for name, args in task.reference[turn]]
        return Reply(REASONING, None, calls)

    @staticmethod
    def _needle(messages: list[dict[str, Any]], tools: bool) -> Reply | None:
        last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        found = find_answer(str(last.get("content") or "")) if last is not None else None
        if found is None:
            return None
        key, value, tool = found
        if tool and tools:
            name = RECORD_TOOL["function"]["name"]
            return Reply(REASONING, None, [(name, json.dumps({"key": key, "number": int(value)}))])
        return Reply(REASONING, value)

    @staticmethod
    def _broken_long(reply: Reply) -> Reply:
        calls = [(name, args[: max(1, len(args) // 2)]) for name, args in reply.calls]
        content = reply.content
        if content is not None:
            content = "".join("0" if ch.isdigit() else ch for ch in content)
        return Reply(reply.reasoning, content, calls, reply.named)

    # ---- how the parser renders it ---------------------------------------------------------------
    def message(self, reply: Reply) -> dict[str, Any]:
        """The non-streamed `choices[0].message`."""
        calls = reply.calls
        if self.mode == C.REASONING_IN_ARGUMENTS and reply.reasoning:
            calls = [(n, _with_reasoning_in_first_string(a, reply.reasoning)) for n, a in calls]
        return {
            "role": "assistant",
            "content": reply.content,
            "reasoning": reply.reasoning,
            "tool_calls": [
                {"id": _call_id(n, a, i), "type": "function", "function": {"name": n, "arguments": a}}
                for i, (n, a) in enumerate(calls)
            ],
        }

    def deltas(self, reply: Reply) -> list[dict[str, Any]]:
        """The streamed deltas, one per chunk (the role chunk comes before them)."""
        mode = self.mode
        out: list[dict[str, Any]] = []
        reasoning = _words(reply.reasoning or "")
        if mode == C.REASONING_IN_CONTENT and reply.content is not None:
            out += [{"content": w} for w in reasoning] + [{"content": "</think>"}]
        else:
            out += [{"reasoning": w} for w in reasoning]
        if reply.content is not None:
            out += [{"content": w} for w in _words(reply.content)]
        index = 0
        for name, args in reply.calls:
            full = args
            if mode == C.REASONING_IN_ARGUMENTS and reply.reasoning:
                args = _with_reasoning_in_first_string(args, reply.reasoning)
            if mode == C.ZERO_ARG_DROPPED and args.strip() == "{}":
                continue
            frags = _fragments(args)
            if mode == C.EMPTY_ARGS_FLUSHED and args.strip() != "{}":
                frags = ["{}"]
            elif mode == C.CUMULATIVE_DELTA and len(frags) > 1:
                frags[-1] = args
            shown = name.split("_", 1)[0] if mode == C.WRONG_STREAM_NAME else name
            head = {"index": index, "id": _call_id(name, full, index), "type": "function"}
            out.append({"tool_calls": [{**head, "function": {"name": shown, "arguments": ""}}]})
            out += [{"tool_calls": [{"index": index, "function": {"arguments": f}}]} for f in frags]
            index += 1
        return out or [{"content": ""}]
