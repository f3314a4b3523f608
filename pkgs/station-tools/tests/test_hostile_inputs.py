"""Hostile inputs that once ended in a traceback, and properties of the parsers hostile servers feed.

Each command case runs `station` as a real subprocess: the exit code is the documented one and stderr
carries a one-line reason, never a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_station.api.errors import StreamError
from vllm_station.api.sse import iter_sse_events


def station(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_station", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["smoke", "--base-url", "http://[::1"], 2, "not a URL"),
        (["wait-ready", "--base-url", "http://[::1", "--timeout", "1"], 2, "not a URL"),
        (["smoke", "--base-url", "http://h:99999"], 2, "port"),
        (["smoke", "--base-url", "http://127.0.0.1:8000", "--timeout", "nan"], 2, "--timeout"),
        (["prestart", "--max-file-pages-gib", "nan"], 2, "--max-file-pages-gib"),
        (["simulate", "--port", "-1"], 2, "--port"),
        (["numa-exec", "--membind", "0-99999999", "--", "true"], 2, "above 1023"),
        (["smoke", "--base-url", "http://127.0.0.1:9", "--ca-file", "/nonexistent.pem"], 2, "--ca-file"),
    ],
)
def test_once_a_traceback_now_a_usage_error(argv: list[str], code: int, message: str) -> None:
    r = station(*argv)
    assert r.returncode == code, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr


def test_ca_file_that_is_not_pem(tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    r = station("smoke", "--base-url", "https://127.0.0.1:9", "--ca-file", str(bad))
    assert r.returncode == 2 and "not a PEM CA bundle" in r.stderr and "Traceback" not in r.stderr


def test_a_library_that_is_not_libnuma() -> None:
    """STATION_LIBNUMA naming another library: cffi resolves symbols lazily, so this once failed at the
    first call with an AttributeError traceback."""
    libz = next(
        (
            p
            for p in (
                "/usr/lib/x86_64-linux-gnu/libz.so.1",
                "/usr/lib/aarch64-linux-gnu/libz.so.1",
                "/lib/x86_64-linux-gnu/libz.so.1",
            )
            if Path(p).exists()
        ),
        None,
    )
    if libz is None:
        pytest.skip("no libz.so.1 at the Debian paths to stand in for a wrong library")
    r = station("numa-exec", "--", "true", env={"STATION_LIBNUMA": libz})
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "not libnuma: it has no numa_available" in r.stderr


# ---- the SSE parser: what a correct server sends round-trips; anything else is a StreamError ------

_VALUE = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=40
)


@settings(max_examples=300, deadline=None)
@given(events=st.lists(st.lists(_VALUE, min_size=1, max_size=4), max_size=8), comments=st.booleans())
def test_sse_round_trip(events: list[list[str]], comments: bool) -> None:
    lines: list[str] = []
    for data_lines in events:
        if comments:
            lines.append(": keep-alive")
        lines += [f"data: {v}" for v in data_lines]
        lines.append("")
    parsed = list(iter_sse_events(lines))
    assert [e.data for e in parsed] == ["\n".join(d) for d in events]
    assert all(e.complete for e in parsed)


@settings(max_examples=500, deadline=None)
@given(lines=st.lists(st.text(max_size=30), max_size=12), strict=st.booleans())
def test_sse_garbage_is_a_stream_error_or_events(lines: list[str], strict: bool) -> None:
    try:
        events = list(iter_sse_events(lines, strict=strict))
    except StreamError as err:
        assert strict and "malformed event stream" in str(err)
        return
    for e in events:
        assert isinstance(e.data, str) and e.line >= 0


@settings(max_examples=200, deadline=None)
@given(data_lines=st.lists(_VALUE, min_size=1, max_size=3))
def test_sse_truncated_event_is_marked_incomplete(data_lines: list[str]) -> None:
    parsed = list(iter_sse_events([f"data: {v}" for v in data_lines]))
    assert len(parsed) == 1 and not parsed[0].complete and parsed[0].data == "\n".join(data_lines)
