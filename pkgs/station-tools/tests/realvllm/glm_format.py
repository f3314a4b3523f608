# ruff: noqa: E501  (Jinja template: its lines are the template text)
"""The GLM-4.5/4.7 chat format for the tiny test model tiny-tools-glm (stdlib only).

What vLLM's `--tool-call-parser glm47` and `--reasoning-parser glm45` (the glm53 presets' flags) read,
in vllm/parser/glm47_moe.py of vLLM 0.32: the generation prompt ends `<|assistant|><think>`, the model
thinks, closes with `</think>`, then answers or calls a tool as

    <tool_call>get_weather<arg_key>location</arg_key><arg_value>Paris</arg_value></tool_call>

(argument values are raw text; vLLM coerces them to the tool's JSON schema types). A turn ends with
`<|user|>` (after text) or `<|observation|>` (after a tool call), as GLM's generation_config lists them.
Tools render compactly as `name(param, ...)` like the hermes tiny-tools template, so the sequences stay
short. The data are tiny_data.py's chats: `glm_answer` rewrites their hermes answers.
"""

from __future__ import annotations

import json
from typing import Any

import tiny_data

# Turn markers and prompt prefix: special tokens (skipped in the output text, never parsed).
SPECIAL = ["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"]
# Ordinary added tokens, one id each, kept in the output text: the parsers look for them.
TAGS = ["<think>", "</think>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]
END_OF_TEXT, END_OF_CALL = "<|user|>", "<|observation|>"

# Short fixed thoughts, so that the reasoning parser has something to separate.
THINK_CALL = "The user asks for {name}."
THINK_PLAIN = "No tool is needed."
THINK_AFTER_TOOL = "The tool has answered."

GLM_COMPACT = r"""[gMASK]<sop>
{%- if tools %}
{{- '<|system|><tools>' }}
{%- for tool in tools %}
{%- set f = tool.function if tool.function is defined else tool %}
{%- set props = (f.parameters.properties if (f.parameters is defined and f.parameters and f.parameters.properties is defined) else {}) %}
{{- (' ' if not loop.first else '') + f.name + '(' + (props | list | join(', ')) + ')' }}
{%- endfor %}
{{- '</tools>' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{{- '<|system|>' + (message.content or '') }}
{%- elif message.role == 'user' %}
{{- '<|user|>' + (message.content or '') }}
{%- elif message.role == 'assistant' %}
{{- '<|assistant|></think>' + (message.content or '') }}
{%- for tool_call in (message.tool_calls or []) %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '<tool_call>' + tool_call.name }}
{%- if tool_call.arguments is mapping %}
{%- for key, value in tool_call.arguments.items() %}
{{- '<arg_key>' + key + '</arg_key><arg_value>' + (value if value is string else value | tojson) + '</arg_value>' }}
{%- endfor %}
{%- else %}{{- tool_call.arguments }}{%- endif %}
{{- '</tool_call>' }}
{%- endfor %}
{%- elif message.role == 'tool' %}
{{- '<|observation|><tool_response>' + (message.content or '') + '</tool_response>' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|assistant|><think>' }}{%- endif %}
"""


def glm_call(name: str, args: dict[str, Any]) -> str:
    pairs = "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in args.items())
    return f"<tool_call>{name}{pairs}</tool_call>"


def parse_glm_call(text: str) -> tuple[str, dict[str, str]] | None:
    """The first `<tool_call>` of a completion as (name, arguments), or None (for the builder's probes)."""
    try:
        body = text.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0]
    except IndexError:
        return None
    name, _, rest = body.partition("<arg_key>")
    args: dict[str, str] = {}
    for part in rest.split("<arg_key>") if rest else []:
        key, _, value = part.partition("</arg_key><arg_value>")
        args[key] = value.split("</arg_value>", 1)[0]
    return name.strip(), args


def glm_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool-call arguments as objects (vLLM hands them to the template that way)."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = [
                {**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                for c in m["tool_calls"]
            ]
            m = {**m, "tool_calls": calls}
        out.append(m)
    return out


def glm_answer(ex: tiny_data.Example) -> str:
    """The completion after `<|assistant|><think>`: thought, `</think>`, answer, end-of-turn token."""
    if ex.answer.startswith("<tool_call>"):
        body = json.loads(ex.answer.removeprefix("<tool_call>").removesuffix("</tool_call>"))
        think = THINK_CALL.format(name=body["name"])
        return f"{think}</think>{glm_call(body['name'], body['arguments'])}{END_OF_CALL}"
    think = THINK_AFTER_TOOL if ex.answer == tiny_data.AFTER_TOOL_ANSWER else THINK_PLAIN
    return f"{think}</think>{ex.answer}{END_OF_TEXT}"
