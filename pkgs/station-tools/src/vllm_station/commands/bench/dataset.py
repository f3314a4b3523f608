"""`--prompts FILE.jsonl`: a prompt set to replay instead of generated prompts (sweep and burst).

One JSON value per line (blank lines are skipped), each one request:

* an OpenAI messages list: `[{"role": "system", "content": "…"}, {"role": "user", "content": "…"}]`;
* the same inside an object: `{"messages": [...]}` (a chat request's shape; other keys are ignored);
* ShareGPT: `{"conversations": [{"from": "human", "value": "…"}, {"from": "gpt", "value": "…"}, …]}`;
  `human`/`user` → user, `gpt`/`assistant`/`chatgpt`/`model` → assistant, `system` → system. The
  recorded answers after the last user turn are dropped (they are what the server is asked to produce);
  earlier ones stay as the conversation's history.

Roles are `system`, `developer`, `user`, `assistant`, `tool`; content is a string, a list of OpenAI
content parts, or null (an assistant turn with `tool_calls`). A line that is none of these is a usage
error naming the line number. The file must be a regular file of at most `MAX_FILE_BYTES`, UTF-8, with at
most `MAX_PROMPTS` prompts: it is read whole before the first request.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_station import bounded
from vllm_station.errors import UsageError

MAX_FILE_BYTES = 128 * 1024 * 1024
MAX_PROMPTS = 100_000
ROLES = ("system", "developer", "user", "assistant", "tool")
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "model": "assistant",
    "system": "system",
}

Messages = list[dict[str, Any]]


@dataclass
class PromptFile:
    path: Path
    prompts: list[Messages]
    formats: dict[str, int] = field(default_factory=dict)  # openai | sharegpt → prompts


def _bad(path: Path, line: int, why: str) -> UsageError:
    return UsageError(f"--prompts {path}: line {line}: {why}")


def _openai(path: Path, line: int, value: Any) -> Messages:
    if not isinstance(value, list) or not value:
        raise _bad(path, line, "the messages list is empty or not a list")
    out: Messages = []
    for i, msg in enumerate(value, 1):
        if not isinstance(msg, dict):
            raise _bad(path, line, f"message {i} is not an object")
        role = msg.get("role")
        if role not in ROLES:
            raise _bad(path, line, f"message {i}: role {role!r} is not one of {', '.join(ROLES)}")
        content = msg.get("content")
        if content is None:
            if not (role == "assistant" and msg.get("tool_calls")):
                raise _bad(path, line, f"message {i}: no content (only an assistant turn with tool_calls)")
        elif isinstance(content, list):
            if not all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in content):
                raise _bad(path, line, f"message {i}: content parts must be objects with a type")
        elif not isinstance(content, str):
            raise _bad(path, line, f"message {i}: content is {type(content).__name__}, not a string")
        out.append(msg)
    return out


def _sharegpt(path: Path, line: int, turns: Any) -> Messages:
    if not isinstance(turns, list) or not turns:
        raise _bad(path, line, "conversations is empty or not a list")
    out: Messages = []
    for i, turn in enumerate(turns, 1):
        if not isinstance(turn, dict):
            raise _bad(path, line, f"turn {i} is not an object")
        who, value = turn.get("from"), turn.get("value")
        role = SHAREGPT_ROLES.get(who) if isinstance(who, str) else None
        if role is None:
            raise _bad(path, line, f"turn {i}: from {who!r} is not one of {', '.join(SHAREGPT_ROLES)}")
        if not isinstance(value, str):
            raise _bad(path, line, f"turn {i}: value is not a string")
        out.append({"role": role, "content": value})
    while out and out[-1]["role"] == "assistant":
        out.pop()
    if not any(m["role"] == "user" for m in out):
        raise _bad(path, line, "the conversation has no human turn")
    return out


def parse_line(path: Path, line: int, raw: bytes) -> tuple[Messages, str]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad(path, line, f"not UTF-8 (byte {exc.start})") from None
    try:
        value = bounded.loads_json(text)
    except bounded.JsonTooDeep:
        raise _bad(path, line, "nested too deeply") from None
    except ValueError as exc:
        raise _bad(path, line, f"not JSON ({exc})") from None
    except RecursionError:
        raise _bad(path, line, "nested too deeply") from None
    if isinstance(value, list):
        return _openai(path, line, value), "openai"
    if isinstance(value, dict):
        if "conversations" in value:
            return _sharegpt(path, line, value["conversations"]), "sharegpt"
        if "messages" in value:
            return _openai(path, line, value["messages"]), "openai"
    raise _bad(
        path,
        line,
        'expected a messages list, {"messages": [...]} or ShareGPT {"conversations": [...]}',
    )


def _read(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block the open
    except OSError as exc:
        raise UsageError(f"--prompts {path}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise UsageError(f"--prompts {path}: {what}; give a JSONL file")
    with os.fdopen(fd, "rb") as fh:
        if st.st_size > MAX_FILE_BYTES:
            raise UsageError(
                f"--prompts {path}: {st.st_size:,} bytes; at most {MAX_FILE_BYTES:,} (split the set)"
            )
        data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:  # grew while being read
        raise UsageError(f"--prompts {path}: larger than {MAX_FILE_BYTES:,} bytes")
    return data


def load(path: Path) -> PromptFile:
    data = _read(path)
    out = PromptFile(path, [])
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        if len(out.prompts) >= MAX_PROMPTS:
            raise _bad(path, n, f"more than {MAX_PROMPTS:,} prompts")
        messages, fmt = parse_line(path, n, raw)
        out.prompts.append(messages)
        out.formats[fmt] = out.formats.get(fmt, 0) + 1
    if not out.prompts:
        raise UsageError(f"--prompts {path}: no prompts (one JSON messages list per line)")
    return out
