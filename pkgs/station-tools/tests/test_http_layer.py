"""The HTTP layer (`vllm_station.api.transport`) against a real hostile server (`hostileserver.py`).

A total deadline per request, not per read: a server that drips one byte every 0.5 s — in the body or in
the status line itself — is cut off at the deadline (per-read timeouts never fire against it: before the
layer it kept commands alive for minutes). Caps on the body, on each event-stream line and on the event
count, raised as soon as they are passed. Redirects refused, never followed, on the httpx and the aiohttp
paths alike; the server records every path asked for, so "not followed" is checked where it would show.

The deadline checks bound the time generously (a loaded machine is slow, the servers here never stop);
the figures printed are the measured ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from vllm_station.api import ApiClient, ApiTimeout, HttpStatusError, ProtocolError
from vllm_station.api.transport import AsyncHttp, Limits, RedirectRefused, SyncHttp, TooLarge
from vllm_station.commands.preflight.core import Context
from vllm_station.commands.preflight.pair import fetch_peer_stamp

TESTS = Path(__file__).resolve().parent
NEVER_S = 20.0  # the hostile servers here never stop: a request still open after this is unbounded


def _followed(hits: Path) -> list[str]:
    return [h for h in hits.read_text().splitlines() if h.startswith("followed~")]


@pytest.mark.parametrize("mode", ["drip", "loris"])
def test_a_dripping_server_is_cut_off_at_the_total_deadline(hostile: tuple[str, Path], mode: str) -> None:
    root, _ = hostile
    t0 = time.monotonic()
    with (
        pytest.raises(httpx.TimeoutException),
        SyncHttp() as http,
        http.stream("GET", f"{root}/{mode}/v1/models", timeout=2.0) as resp,
    ):
        resp.read()
    took = time.monotonic() - t0
    print(f"{mode}: cut off after {took:.2f} s (deadline 2 s)")
    assert 1.9 <= took < NEVER_S


@pytest.mark.parametrize("mode", ["drip", "loris"])
def test_a_chat_stream_from_a_dripping_server_ends_at_the_deadline(
    hostile: tuple[str, Path], mode: str
) -> None:
    """The case that kept smoke, probe, gates and golive alive for minutes: a stream whose bytes come one
    every 0.5 s and never complete a line (or a status line)."""
    root, _ = hostile
    t0 = time.monotonic()
    with ApiClient(f"{root}/{mode}", timeout=2.0) as api, pytest.raises(ApiTimeout, match="within 2 s"):
        list(api.chat_stream("m", [{"role": "user", "content": "hi"}]))
    took = time.monotonic() - t0
    print(f"{mode} stream: ApiTimeout after {took:.2f} s (deadline 2 s)")
    assert took < NEVER_S


def test_an_endless_body_stops_at_the_cap(hostile: tuple[str, Path]) -> None:
    root, _ = hostile
    with (
        SyncHttp(limits=Limits(max_body=1 << 20)) as http,
        http.stream("GET", f"{root}/endless/v1/models", timeout=NEVER_S) as resp,
        pytest.raises(TooLarge, match=r"passed 1,048,576 bytes"),
    ):
        resp.read()


def test_the_default_cap_holds_a_real_endless_body(hostile: tuple[str, Path]) -> None:
    """The shipped limit, end to end through ApiClient: a one-line error, not the deadline, not memory."""
    root, _ = hostile
    with ApiClient(f"{root}/endless", timeout=NEVER_S) as api, pytest.raises(ProtocolError) as err:
        api.models()
    assert "passed 67,108,864 bytes without ending" in str(err.value)


def test_an_endless_sse_line_stops_at_the_line_cap(hostile: tuple[str, Path]) -> None:
    root, _ = hostile
    body = {"model": "m", "messages": [], "stream": True}
    with (
        SyncHttp(limits=Limits(max_line=64 * 1024)) as http,
        http.stream("POST", f"{root}/line~a/v1/chat/completions", timeout=NEVER_S, json_body=body) as resp,
        pytest.raises(TooLarge, match=r"a line of the stream passed 65,536 bytes"),
    ):
        list(resp.iter_lines())


def test_endless_events_stop_at_the_event_cap(hostile: tuple[str, Path]) -> None:
    root, _ = hostile
    body = {"model": "m", "messages": [], "stream": True}
    with (
        SyncHttp(limits=Limits(max_events=1000)) as http,
        http.stream("POST", f"{root}/events~a/v1/chat/completions", timeout=NEVER_S, json_body=body) as resp,
    ):
        lines = 0
        with pytest.raises(TooLarge, match=r"the stream passed 1,000 events"):
            for _ in resp.iter_lines():
                lines += 1
    assert lines == 2 * 1000 + 1  # each event: a data line and the blank line ending it; then one more


def test_endless_events_in_a_chat_stream_end_at_the_deadline(hostile: tuple[str, Path]) -> None:
    root, _ = hostile
    t0 = time.monotonic()
    with ApiClient(f"{root}/events~b", timeout=2.0) as api, pytest.raises(ApiTimeout, match="within 2 s"):
        list(api.chat_stream("m", [{"role": "user", "content": "hi"}]))
    assert time.monotonic() - t0 < NEVER_S


def test_lines_split_by_any_terminator(hostile: tuple[str, Path]) -> None:
    """\\n, \\r\\n and \\r end a line, also when a \\r\\n is split between two reads."""
    from vllm_station.api.transport import Response

    class Raw:
        encoding = "utf-8"

        def iter_raw(self) -> Iterator[bytes]:
            yield from (b"a\r", b"\nb\rc\n", b"\n", b"d")

    lines = list(Response(Raw(), Limits(), time.monotonic() + 60).iter_lines())  # type: ignore[arg-type]
    assert lines == ["a", "b", "c", "", "d"]


def test_a_redirect_is_refused_not_followed(hostile: tuple[str, Path]) -> None:
    root, hits = hostile
    with (
        SyncHttp() as http,
        pytest.raises(RedirectRefused) as err,
        http.stream("GET", f"{root}/redirect/v1/models", timeout=5.0),
    ):
        pass
    assert err.value.status == 302 and err.value.location == "/followed~redirect/v1/models"
    assert "HTTP 302 redirect to /followed~redirect/v1/models, not followed" in str(err.value)
    with ApiClient(f"{root}/redirect", timeout=5.0) as api, pytest.raises(HttpStatusError) as api_err:
        api.health()
    assert "redirect to /followed~redirect/health, not followed" in str(api_err.value)
    assert _followed(hits) == []


def test_the_aiohttp_path_keeps_the_same_rules(hostile: tuple[str, Path]) -> None:
    root, hits = hostile

    async def go() -> None:
        http = AsyncHttp(limits=Limits(max_body=1 << 20))
        try:
            got = await http.fetch("GET", f"{root}/redirect/v1/models", timeout=5.0)
            assert (got.status, got.location) == (302, "/followed~redirect/v1/models")
            got = await http.fetch("GET", f"{root}/endless/v1/models", timeout=NEVER_S)
            assert got.truncated and len(got.body) == 1 << 20
            t0 = time.monotonic()
            with pytest.raises(TimeoutError):
                await http.fetch("GET", f"{root}/drip/v1/models", timeout=2.0)
            assert 1.9 <= time.monotonic() - t0 < NEVER_S
        finally:
            await http.close()

    asyncio.run(go())
    assert _followed(hits) == []


@pytest.mark.parametrize(
    ("mode", "problem"),
    [("redirect", "redirect to /followed~redirect/stamp, not followed"), ("endless", "without ending")],
)
def test_the_peer_stamp_fetch_goes_through_the_layer(
    hostile: tuple[str, Path], mode: str, problem: str, tmp_path: Path
) -> None:
    from preflight_config import make_config

    root, hits = hostile
    ctx = Context(root=tmp_path, config=make_config())
    with pytest.raises(ValueError, match=problem):
        fetch_peer_stamp(ctx, f"{root}/{mode}/stamp", timeout=NEVER_S)
    assert _followed(hits) == []
