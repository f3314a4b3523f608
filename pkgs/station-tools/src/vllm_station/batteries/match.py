"""How an argument value is compared with a case's accepted answers (after BFCL's AST checker).

An accepted answer is one of:

* a JSON literal: strings compare after `normalize` (unless the case says `"strings": "exact"`), numbers
  by value (an integer and a float of the same value are equal; a boolean is never a number), lists
  element by element in order, objects key by key (the same keys);
* `{"$match": REGEX, "example": TEXT}`: a string in which REGEX is found, case-insensitive (free text
  such as a search query); `example` is what the simulator's reference answers with;
* `{"$json": VALUE}`: a string holding JSON text that parses to VALUE (JSON inside a string: any spacing).

In a case's list of accepted answers, `null` means the parameter may be left out.
"""

from __future__ import annotations

import json
import re
from typing import Any

from vllm_station import bounded

_STRIP = re.compile(r"[\s,./\-_*^'\"`()!?:;]")


def normalize(text: str) -> str:
    """Lower case without spaces and punctuation: "Lisbon, Portugal" and "lisbon portugal" compare equal."""
    return _STRIP.sub("", text).lower()


def is_matcher(value: Any) -> bool:
    return isinstance(value, dict) and any(isinstance(k, str) and k.startswith("$") for k in value)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def matches(actual: Any, accepted: Any, *, exact: bool = False) -> bool:
    """Whether `actual` (a parsed argument value) is the accepted answer `accepted`."""
    if is_matcher(accepted):
        if "$match" in accepted:
            return isinstance(actual, str) and re.search(str(accepted["$match"]), actual, re.I) is not None
        if "$json" in accepted:
            if not isinstance(actual, str):
                return False
            try:
                parsed = bounded.loads_json(actual)
            except ValueError:
                return False
            return matches(parsed, accepted["$json"], exact=True)
        return False
    if isinstance(accepted, bool) or accepted is None:
        return actual is accepted
    if _is_number(accepted):
        return _is_number(actual) and actual == accepted
    if isinstance(accepted, str):
        if not isinstance(actual, str):
            return False
        return actual == accepted if exact else normalize(actual) == normalize(accepted)
    if isinstance(accepted, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(accepted)
            and all(matches(a, e, exact=exact) for a, e in zip(actual, accepted, strict=True))
        )
    if isinstance(accepted, dict):
        return (
            isinstance(actual, dict)
            and set(actual) == set(accepted)
            and all(matches(actual[k], accepted[k], exact=exact) for k in accepted)
        )
    return bool(actual == accepted)


def example(accepted: Any) -> Any:
    """A concrete value that `matches` `accepted` (the simulator's reference answer)."""
    if is_matcher(accepted):
        if "$json" in accepted:
            return json.dumps(accepted["$json"], ensure_ascii=False)
        return accepted.get("example", "")
    return accepted


def contains_fact(text: str, spellings: list[str]) -> bool:
    """Whether `text` holds one of a fact's accepted spellings (normalised, as a substring)."""
    norm = normalize(text)
    return any(normalize(s) in norm for s in spellings)
