"""Mutants of `station wait-ready` that survived the other tests (issue 17): what is retried and what is not.

A `/health` that answers 4xx for a moment (a gateway in front of a starting server) and the retryable 4xx
answers to the completion probe (408, 409, 425, 429: "too many requests" while the engine warms up) are
tried again; any other 4xx to the probe ends the wait at once. Real HTTP on 127.0.0.1 (faultserver).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from faultserver import FaultServer, Reply, Request, fake_openai_routes

from vllm_station.wait_ready import Options, Outcome, wait

COMPLETION = {
    "id": "cmpl-1", "object": "text_completion", "created": 0, "model": "fake",
    "choices": [{"index": 0, "text": "!", "finish_reason": "length", "logprobs": None}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}  # fmt: skip


def failing_first(times: int, status: int, then: Reply) -> Any:
    """A route answering `status` to its first `times` requests, then `then`."""
    count = itertools.count()

    def answer(_req: Request) -> Reply:
        if next(count) < times:
            return Reply(status=status, json={"error": {"message": f"status {status} for now"}})
        return then

    return answer


def run(routes: dict[tuple[str, str], Any], timeout_s: float = 20.0) -> tuple[Outcome, list[str]]:
    lines: list[str] = []
    with FaultServer(routes) as srv:
        out = wait(Options(base_url=srv.url, model="fake", timeout_s=timeout_s, interval_s=0.05),
                   progress=lines.append)  # fmt: skip
    return out, lines


def serving(**override: Any) -> dict[tuple[str, str], Any]:
    routes = fake_openai_routes(model="fake")
    routes[("POST", "/v1/completions")] = Reply(json=COMPLETION)
    routes.update(override)
    return routes


@pytest.mark.parametrize("status", [401, 403, 404, 400])
def test_health_answering_4xx_for_a_moment_is_retried(status: int) -> None:
    health = failing_first(2, status, Reply(status=200, body=b""))
    out, _ = run(serving() | {("GET", "/health"): health})
    assert (out.ready, out.gave_up, out.attempts) == (True, False, 3), out
    assert out.reason.startswith("/health 200 and a 1-token POST /v1/completions for 'fake'")


@pytest.mark.parametrize("status", [408, 409, 425, 429])
def test_a_retryable_4xx_from_the_completion_probe_is_retried(status: int) -> None:
    completions = failing_first(2, status, Reply(json=COMPLETION))
    out, _ = run(serving() | {("POST", "/v1/completions"): completions})
    assert (out.ready, out.gave_up, out.attempts) == (True, False, 3), out


def test_a_5xx_from_the_completion_probe_is_retried() -> None:
    completions = failing_first(1, 500, Reply(json=COMPLETION))
    out, _ = run(serving() | {("POST", "/v1/completions"): completions})
    assert (out.ready, out.attempts) == (True, 2), out


@pytest.mark.parametrize("status", [400, 401, 403, 410, 422, 499])
def test_any_other_4xx_from_the_probe_gives_up_at_once(status: int) -> None:
    completions = failing_first(100, status, Reply(json=COMPLETION))
    out, _ = run(serving() | {("POST", "/v1/completions"): completions}, timeout_s=30)
    assert (out.ready, out.gave_up, out.reached, out.attempts) == (False, True, True, 1), out
    assert f"HTTP {status}" in out.reason and f"status {status} for now" in out.reason


def test_429_keeps_waiting_until_the_timeout_without_giving_up() -> None:
    completions = failing_first(10_000, 429, Reply(json=COMPLETION))
    out, lines = run(serving() | {("POST", "/v1/completions"): completions}, timeout_s=0.6)
    assert (out.ready, out.gave_up, out.reached) == (False, False, True), out
    assert out.attempts >= 3
    assert "HTTP 429" in out.reason
    assert any("not ready after" in ln and "HTTP 429" in ln for ln in lines)
