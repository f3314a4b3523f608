"""Small file helpers shared by the checkpoint contract: JSON in and (atomically) out, operator messages."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vllm_station import bounded, output

MAX_LISTED = 5  # problems of one kind per file before "and N more"


def now_utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_error(exc: OSError) -> str:
    """An OSError as a short operator message."""
    if isinstance(exc, IsADirectoryError):
        return "cannot read: it is a directory, not a file"
    return f"cannot read: {exc.strerror or exc}"


def join_limited(items: list[str]) -> str:
    text = "; ".join(items[:MAX_LISTED])
    if len(items) > MAX_LISTED:
        text += f"; and {len(items) - MAX_LISTED} more"
    return text


def load_json(path: Path) -> Any:
    """Parsed JSON. Raises ValueError naming the problem ("missing", unreadable, not UTF-8, not JSON)."""
    try:
        text = bounded.read_text(path, limit=bounded.CONFIG_LIMIT)
    except FileNotFoundError as exc:
        raise ValueError("missing") from exc
    except OSError as exc:
        raise ValueError(read_error(exc)) from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text: {exc}") from exc
    try:
        return bounded.loads_json(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc}") from exc


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to a temporary file beside `path`, fsync it, then rename it over `path` (through
    `vllm_station.output`: an existing `path` that is not a regular file is refused). Raises OSError."""
    output.replace_text(path, json.dumps(obj, indent=2) + "\n", option="the file", fsync=True)
