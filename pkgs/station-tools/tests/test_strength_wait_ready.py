"""Mutants of `station wait-ready` that survived the other tests (issue 17): what is retried and what is not.

A `/health` that answers 4xx for a moment (a gateway in front of a starting server) and the retryable 4xx
answers to the completion probe (408, 409, 425, 429: "too many requests" while the engine warms up) are
tried again; any other 4xx to the probe ends the wait at once. Real HTTP on 127.0.0.1 (faultserver).
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from faultserver import FaultServer, Reply, Request, fake_openai_routes

from vllm_station import options
from vllm_station.cli import main
from vllm_station.commands.wait_ready import Options, Outcome, _alive, _watch_pid, configure, wait
from vllm_station.errors import UsageError

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


# ---- the rest of wait-ready (mutants the benchmark found: scripts/bench-mutation) ----


def test_progress_lines_name_the_wait_and_the_last_reason() -> None:
    health = failing_first(1, 503, Reply(status=200, body=b""))
    lines: list[str] = []
    with FaultServer(serving() | {("GET", "/health"): health}) as srv:
        out = wait(Options(base_url=srv.url + "/v1", model="fake", timeout_s=20, interval_s=0.05),
                   progress=lines.append)  # fmt: skip
    assert out.ready and out.model == "fake"
    assert lines[0] == f"waiting up to 20 s for {srv.url} (probe every 0.05 s)"
    assert len(lines) == 2 and lines[1].startswith("not ready after 0 s (try 1): GET /health")
    assert "HTTP 503" in lines[1]


def test_the_first_listed_model_is_probed_and_an_empty_list_waits() -> None:
    listing = [
        Reply(json={"object": "list", "data": []}),
        Reply(json={"object": "list", "data": [{"id": "m-1", "object": "model"}, {"id": "m-2"}]}),
    ]
    count = itertools.count()

    def models(_req: Request) -> Reply:
        return listing[min(next(count), 1)]

    seen: list[str] = []

    def completions(req: Request) -> Reply:
        seen.append(req.json()["model"])
        return Reply(json=COMPLETION)

    lines: list[str] = []
    routes = serving() | {("GET", "/v1/models"): models, ("POST", "/v1/completions"): completions}
    with FaultServer(routes) as srv:
        out = wait(Options(base_url=srv.url, timeout_s=20, interval_s=0.05), progress=lines.append)
    assert (out.ready, out.model, out.attempts, seen) == (True, "m-1", 2, ["m-1"])
    assert f"GET /v1/models at {srv.url}/v1/models lists no model yet" in lines[1]


def test_a_chat_only_server_is_probed_with_chat_and_other_errors_are_not_hidden() -> None:
    out, _ = run(serving() | {("POST", "/v1/completions"): Reply(status=404, json={"detail": "Not Found"})})
    assert out.ready and "a 1-token POST /v1/chat/completions for 'fake'" in out.reason
    broken = {
        ("POST", "/v1/completions"): Reply(status=404, json={"detail": "Not Found"}),
        ("POST", "/v1/chat/completions"): Reply(status=404, json={"detail": "no such model"}),
    }
    out, _ = run(serving() | broken)
    assert (out.ready, out.gave_up) == (False, True) and "no such model" in out.reason


def test_watch_pid_from_the_argument_or_mainpid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAINPID", "4321")
    assert _watch_pid(None) == 4321 and _watch_pid(77) == 77
    for value in ("", "0", "-5", "12a"):
        monkeypatch.setenv("MAINPID", value)
        assert _watch_pid(None) is None, value
    monkeypatch.delenv("MAINPID")
    assert _watch_pid(None) is None
    with pytest.raises(UsageError, match=r"^--watch-pid must be a process id, got 0$"):
        _watch_pid(0)


def test_alive_sees_a_zombie_as_exited() -> None:
    assert _alive(os.getpid())
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while _alive(child.pid) and time.monotonic() < deadline:  # exits, then waits unreaped: a zombie
        time.sleep(0.02)
    assert not _alive(child.pid)
    child.wait()
    assert not _alive(child.pid), "gone altogether"


@pytest.mark.parametrize(
    ("routes", "code", "message"),
    [
        ({}, 0, None),
        ({("POST", "/v1/completions"): Reply(status=403, json={"error": {"message": "no"}})}, 1,
         "the server refuses the readiness probe (waiting will not help): POST /v1/completions"),
        ({("POST", "/v1/completions"): Reply(status=503, json={"error": {"message": "warming"}})}, 1,
         "not ready after 1 s"),
    ],
)  # fmt: skip
def test_run_outcomes(
    routes: dict[tuple[str, str], Any], code: int, message: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    with FaultServer(serving() | routes) as srv:
        rc = main(["wait-ready", "--base-url", srv.url, "--timeout", "1", "--interval", "0.1"])
    out, err = capsys.readouterr()
    assert rc == code
    if message is None:
        assert out.startswith("ready after ") and " (1 tries): /health 200 and a 1-token" in out
    else:
        assert f"station wait-ready: error: {message}" in err


def test_probe_requests_exactly() -> None:
    bodies: list[Any] = []

    def record(answer: Reply) -> Any:
        def route(req: Request) -> Reply:
            bodies.append((req.path, req.json()))
            return answer

        return route

    routes = serving() | {
        ("POST", "/v1/completions"): record(Reply(status=404, json={"detail": "Not Found"})),
        ("POST", "/v1/chat/completions"): record(Reply(json=fake_chat_answer())),
    }
    out, _ = run(routes)
    assert out.ready
    (p1, completion), (p2, chat) = bodies
    assert (p1, completion["model"], completion["prompt"], completion["max_tokens"]) == (
        "/v1/completions", "fake", "Hello", 1)  # fmt: skip
    assert (p2, chat["model"], chat["messages"], chat["max_tokens"], chat["temperature"]) == (
        "/v1/chat/completions", "fake", [{"role": "user", "content": "Hello"}], 1, 0.0)  # fmt: skip
    seconds = float(out.reason.rsplit(" in ", 1)[1].removesuffix(" s"))
    assert 0 <= seconds < 10, out.reason


def fake_chat_answer() -> dict[str, Any]:
    return {
        "id": "c", "object": "chat.completion", "created": 0, "model": "fake",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "!"},
                     "finish_reason": "length"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # fmt: skip


@pytest.mark.parametrize("slow", ["/health", "/v1/models", "/v1/completions", "/v1/chat/completions"])
def test_each_probe_request_is_bounded_by_the_time_left(slow: str) -> None:
    routes = serving()
    routes[("POST", "/v1/chat/completions")] = Reply(json=fake_chat_answer())
    if slow == "/v1/chat/completions":
        routes[("POST", "/v1/completions")] = Reply(status=404, json={"detail": "Not Found"})
    method = "GET" if slow in ("/health", "/v1/models") else "POST"
    answer = routes.get((method, slow))
    assert isinstance(answer, Reply) or callable(answer)
    base = answer if isinstance(answer, Reply) else Reply(json=fake_chat_answer())
    # 1.6 s: longer than the 1 s left (and than the 1 s floor of a request's timeout), shorter than 2 s
    routes[(method, slow)] = Reply(status=base.status, json=base.json, body=base.body, delay_s=1.6)
    with FaultServer(routes) as srv:
        out = wait(Options(base_url=srv.url, model=None if slow == "/v1/models" else "fake", timeout_s=1.0,
                           interval_s=0.5))  # fmt: skip
    assert not out.ready, f"{slow}: the request outlived the wait: {out.reason}"
    assert out.reached is True, out


def test_watch_pid_one_is_a_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _watch_pid(1) == 1
    monkeypatch.setenv("MAINPID", "1")
    assert _watch_pid(None) == 1


def test_wait_names_the_bad_option() -> None:
    with pytest.raises(UsageError) as err:
        wait(Options(base_url="http://127.0.0.1:1", timeout_s=-1.0))
    assert str(err.value) == "--timeout must be positive seconds, got -1"
    with pytest.raises(UsageError) as err:
        wait(Options(base_url="http://127.0.0.1:1", interval_s=0.0))
    assert str(err.value) == "--interval must be positive seconds, got 0"


def test_alive_reads_the_state_after_the_last_parenthesis(tmp_path: Path) -> None:
    """A process name may hold ") " and bytes that are not UTF-8; the state follows the last ")"."""
    odd = tmp_path / os.fsdecode(b"x\xff) y")
    odd.symlink_to(shutil.which("true") or "/bin/true")
    child = subprocess.Popen([str(odd)])
    deadline = time.monotonic() + 10
    while _alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(child.pid), "a zombie named 'x\\xff) y' is exited"
    child.wait()


def test_a_named_model_is_probed_not_the_first_listed() -> None:
    listing = Reply(json={"object": "list", "data": [{"id": "a", "object": "model"}, {"id": "b"}]})
    seen: list[str] = []

    def completions(req: Request) -> Reply:
        seen.append(req.json()["model"])
        return Reply(json=COMPLETION)

    routes = serving() | {("GET", "/v1/models"): listing, ("POST", "/v1/completions"): completions}
    with FaultServer(routes) as srv:
        out = wait(Options(base_url=srv.url, model="b", timeout_s=10, interval_s=0.05))
    assert (out.ready, out.model, seen) == (True, "b", ["b"])


def test_reached_and_the_reason_when_nothing_serves() -> None:
    empty = Reply(json={"object": "list", "data": []})
    with FaultServer(serving() | {("GET", "/v1/models"): empty}) as srv:
        # long enough for the first answer to arrive on a loaded machine (the empty list keeps it waiting)
        out = wait(Options(base_url=srv.url, timeout_s=2.0, interval_s=0.1))
    assert (out.ready, out.reached, out.gave_up, out.exited) == (False, True, False, False)
    assert out.reason == f"GET /v1/models at {srv.url}/v1/models lists no model yet"
    nobody = wait(Options(base_url="http://127.0.0.1:9", timeout_s=0.3, interval_s=0.1))
    assert nobody.reached is False and nobody.ready is False


def test_a_live_watched_process_keeps_the_wait_going() -> None:
    failing = Reply(status=503, json={"error": {"message": "warming"}})
    with FaultServer(serving() | {("POST", "/v1/completions"): failing}) as srv:
        opts = Options(base_url=srv.url, model="fake", timeout_s=0.6, interval_s=0.1, watch_pid=os.getpid())
        out = wait(opts)
    assert (out.ready, out.exited, out.gave_up) == (False, False, False)
    assert out.attempts >= 3


def test_the_clock_and_sleep_given_are_the_ones_used() -> None:
    now = [100.0]
    slept: list[float] = []

    def clock() -> float:
        return now[0]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    failing = Reply(status=503, json={"error": {"message": "warming"}})
    with FaultServer(serving() | {("POST", "/v1/completions"): failing}) as srv:
        opts = Options(base_url=srv.url, model="fake", timeout_s=10, interval_s=2)
        out = wait(opts, clock=clock, sleep=sleep)
    assert (out.ready, out.attempts, out.elapsed_s) == (False, 6, 10.0)
    assert slept == [2.0, 2.0, 2.0, 2.0, 2.0]
    assert out.reached is True and "HTTP 503" in out.reason


def test_ready_means_reached_and_a_timeout_names_itself() -> None:
    out, _ = run(serving())
    assert out.ready is True and out.reached is True
    slow = serving() | {("GET", "/health"): Reply(status=200, delay_s=1.6)}
    with FaultServer(slow) as srv:
        out = wait(Options(base_url=srv.url, model="fake", timeout_s=1.0, interval_s=0.5))
    assert out.reason.startswith("GET /health"), out.reason


# --- the command line: its defaults and bounds, and that each option reaches the wait -------------------


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="station wait-ready")
    configure(parser)
    return parser.parse_args(["--base-url", "http://127.0.0.1:8888", *argv])


def test_cli_defaults_and_the_bounds_of_each_option() -> None:
    args = _parse()
    assert (args.timeout, args.interval, args.model, args.watch_pid) == (900.0, 5.0, None, None)
    assert _parse("--interval", "3600").interval == 3600.0
    assert _parse("--watch-pid", "4194304").watch_pid == 4_194_304  # the kernel's largest pid_max
    for refused in (["--interval", "3600.5"], ["--watch-pid", "4194305"]):
        with pytest.raises(SystemExit) as exc:
            _parse(*refused)
        assert exc.value.code == 2, refused


def test_help_says_what_the_url_is(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # one help text per line
    assert main(["wait-ready", "--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the shared help (vllm_station.options): what the URL is, and the one default every verb has
    assert [ln.split(maxsplit=2)[2] for ln in lines if ln.lstrip().startswith("--base-url")] == [
        options.BASE_URL_HELP
    ]
    assert "http://127.0.0.1:8000" in options.BASE_URL_HELP
    assert "root or OpenAI /v1 URL" in options.BASE_URL_HELP


def test_cli_model_is_the_one_probed(capsys: pytest.CaptureFixture[str]) -> None:
    listing = Reply(json={"object": "list", "data": [{"id": m, "object": "model"} for m in ("fake", "b")]})
    with FaultServer(serving() | {("GET", "/v1/models"): listing}) as srv:
        rc = main(
            ["wait-ready", "--base-url", srv.url, "--model", "b", "--timeout", "5", "--interval", "0.1"]
        )
    out = capsys.readouterr().out
    assert rc == 0 and " for 'b' in " in out, out


def test_cli_watch_pid_ends_the_wait_when_that_process_is_gone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("MAINPID", raising=False)
    gone = subprocess.Popen(["true"])
    gone.wait()  # exited and reaped: no such process any more
    failing = Reply(status=503, json={"error": {"message": "warming"}})
    with FaultServer(serving() | {("POST", "/v1/completions"): failing}) as srv:
        rc = main(["wait-ready", "--base-url", srv.url, "--model", "fake", "--timeout", "20",
                   "--interval", "0.1", "--watch-pid", str(gone.pid)])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 1
    assert f"the server process (pid {gone.pid}) exited before it was ready" in err, err
