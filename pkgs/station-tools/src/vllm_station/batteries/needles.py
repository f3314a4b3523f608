"""The needle battery's wording: the needle sentence, the two questions, the `record_number` tool, and
how to find which needle a prompt asks for.

What `station gates needle` builds its prompts from and what `station simulate --gates` answers.
"""

from __future__ import annotations

import re
from typing import Any

NEEDLE = "The special magic number for {key} is {value}."
QUESTION = (
    "What is the special magic number for {key} mentioned in the text above? Answer with the number only."
)
TOOL_QUESTION = (
    "Call the tool record_number with the key {key} and the special magic number for {key} mentioned in the "
    "text above."
)
RECORD_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "record_number",
        "description": "Record the special magic number found for a key",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string"}, "number": {"type": "integer"}},
            "required": ["key", "number"],
        },
    },
}
_NEEDLE_RE = re.compile(r"The special magic number for ([a-z]+-[a-z]+) is (\d{7})\.")
_ASK_RE = re.compile(
    r"(?:What is|Call the tool record_number with the key) .*?special magic number for ([a-z]+-[a-z]+)"
)


def find_answer(text: str) -> tuple[str, str, bool] | None:
    """(key, value, tool question) of the needle a prompt asks for, or None (the simulator's reference)."""
    asked = None
    for m in _ASK_RE.finditer(text[-2000:]):
        asked = m
    if asked is None:
        return None
    key = asked.group(1)
    for m in _NEEDLE_RE.finditer(text):
        if m.group(1) == key:
            return key, m.group(2), "record_number" in asked.group(0)
    return None
