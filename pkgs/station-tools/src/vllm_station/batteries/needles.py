"""The needle battery's wording: the needle sentence, the two questions, the `record_number` tool, and
how to find which needle a prompt asks for; and its shape: the lengths (`25%,50%,90%` of max_model_len,
`128k`, token counts) and depths (percent) a run asks for, the grammar of `station gates needle --lengths
/--depths` and of golive.json's `needle.lengths`/`needle.depths`.

What `station gates needle` builds its prompts from and what `station simulate --gates` answers.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from vllm_station import argtypes
from vllm_station.api.served import MAX_CONTEXT
from vllm_station.errors import UsageError

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


# ---- lengths and depths ------------------------------------------------------------------------------

DEFAULT_LENGTHS = ("25%", "50%", "90%")
DEFAULT_DEPTHS = (0, 50, 100)
MIN_LENGTH = 64


def _length(part: str) -> tuple[bool, float]:
    """One `--lengths` item: (True, percent) or (False, tokens). ValueError when it is neither."""
    p = part.strip().lower()
    if p.endswith("%"):
        pct = argtypes.parse_float(p[:-1])
        if not 0 < pct < 100:
            raise ValueError("a percentage of max_model_len is more than 0 and below 100")
        return True, pct
    n = math.floor(argtypes.parse_float(p[:-1]) * 1024) if p.endswith("k") else argtypes.parse_int(p)
    if not MIN_LENGTH <= n <= MAX_CONTEXT:
        raise ValueError(f"a length is {MIN_LENGTH} to {MAX_CONTEXT:,} tokens")
    return False, n


def lengths_option(text: str) -> str:
    """argparse `type=` (and golive's config): `text` when every item reads as a length, else an error."""
    parts = [p for p in text.split(",") if p.strip()]
    if not parts or len(parts) > 64:
        raise argparse.ArgumentTypeError(f"give 1 to 64 lengths (90%, 128k or a token count), got {text!r}")
    for part in parts:
        try:
            _length(part)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r}: write 90%, 128k or a token count ({exc})"
            ) from None
    return text


def depths_option(text: str) -> str:
    """argparse `type=` for `--depths`: `text` when it parses (parse_depths), else an error."""
    try:
        parse_depths(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--depths ")) from None
    return text


def parse_lengths(text: str, max_model_len: int) -> list[int]:
    """`25%,50%,90%` (of max_model_len), `8k` (× 1024) or plain token counts, ascending."""
    out: list[int] = []
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            pct, value = _length(part)
        except ValueError:
            raise UsageError(f"--lengths {part!r}: write 90%, 128k or a token count") from None
        n = math.floor(value / 100 * max_model_len) if pct else int(value)
        if not MIN_LENGTH <= n < max_model_len:
            raise UsageError(
                f"--lengths {part!r} = {n} tokens: at least {MIN_LENGTH} and below max_model_len "
                f"{max_model_len}"
            )
        out.append(n)
    if not out:
        raise UsageError("--lengths: give at least one length")
    return sorted(set(out))


def parse_depths(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        p = part.strip().rstrip("%")
        if not p:
            continue
        try:
            d = argtypes.parse_int(p)
        except ValueError:
            raise UsageError(f"--depths {part!r}: a whole percentage 0–100") from None
        if not 0 <= d <= 100:
            raise UsageError(f"--depths {part!r}: between 0 and 100")
        out.append(d)
    if not out:
        raise UsageError("--depths: give at least one depth")
    return sorted(set(out))
