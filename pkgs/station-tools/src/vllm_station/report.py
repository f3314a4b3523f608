"""Render reports (lists of dataclass rows) as a human table or JSON, in one place."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, lists, dicts and scalars to plain JSON types."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    return obj


def dump_json(obj: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(to_jsonable(obj), indent=2, sort_keys=False) + "\n")


def fmt_cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value == 0 or abs(value) >= 100:
            return f"{value:,.1f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.3f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain aligned text table; numbers right-aligned."""
    cells = [[fmt_cell(v) for v in row] for row in rows]
    raw_rows = [list(r) for r in cells]
    widths = [len(h) for h in headers]
    for row in raw_rows:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    lines = ["  ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in raw_rows:
        parts = []
        for i, c in enumerate(row):
            numeric = c.replace(",", "").replace(".", "", 1).lstrip("-").isdigit()
            parts.append(c.rjust(widths[i]) if numeric else c.ljust(widths[i]))
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)
