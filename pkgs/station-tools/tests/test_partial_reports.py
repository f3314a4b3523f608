"""Partial reports: a long command stopped early still writes what it measured, marked `"partial": true`.

Three ways to stop early, each with real processes and servers: Ctrl-C (SIGINT to a `station` started in
its own session, as a terminal sends it), a server that goes away in the middle (its listening socket
closed: later connections are refused), and a gate that aborts (golive's needle gate when /tokenize
fails). The report files are read back from disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from faultserver import FaultServer, Reply, Request, answer_of, fake_chat, fake_openai_routes

from vllm_station.cli import main
from vllm_station.errors import EXIT_INTERRUPTED, EXIT_UNREACHABLE

STOP_WITHIN_S = 30  # generous: a loaded machine; the command itself stops within a second


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATION_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def _gone_after(srv: FaultServer, n: int) -> Callable[[Request], object]:
    """The chat route: answers `n` requests, then the server stops listening (a crash between two)."""
    seen = {"n": 0}
    chat = fake_chat("fake")

    def answer(req: Request) -> object:
        seen["n"] += 1
        if seen["n"] >= n:
            srv.stop_listening()
        return answer_of(chat, req)

    return answer


def test_gates_tools_writes_a_partial_report_when_the_server_goes_away(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tools.json"
    with FaultServer(fake_openai_routes("fake")) as srv:
        srv.route("POST", "/v1/chat/completions", _gone_after(srv, 3))
        code = main(["gates", "tools", "--base-url", srv.url, "--quiet", "--output", str(out)])
    err = capsys.readouterr().err
    assert code == EXIT_UNREACHABLE, err
    rep = json.loads(out.read_text())
    assert rep["partial"] is True and rep["stopped"].startswith("server fault:"), rep["stopped"]
    assert rep["result"] == "fail"
    assert 1 <= rep["cases"] < len(_builtin_cases()), rep["cases"]  # what ran, not the whole battery
    assert "the report holds what ran" in err


def _builtin_cases() -> list[str]:
    from vllm_station.batteries.cases import load_tool_cases

    return [c.id for c in load_tool_cases()]


def test_golive_records_an_aborted_gate_and_still_writes_its_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The needle gate's /tokenize calibration gets an answer without a count (an error out of the gate,
    not a case failure): the run is not lost — golive.json/.html are written, the gate is recorded as
    failed, the report says partial, the exit is 1 (no-go), not 2 (usage)."""
    out = tmp_path / "out"
    with FaultServer(fake_openai_routes("fake")) as srv:
        srv.route("POST", "/tokenize", Reply(json={"tokens": "not a count"}))
        code = main(["golive", "--base-url", srv.url, "--skip", "tools,agent,bench", "--quiet",
                     "--out", str(out)])  # fmt: skip
    cap = capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == ["golive.html", "golive.json"]
    rep = json.loads((out / "golive.json").read_text())
    needle = [g for g in rep["gates"] if g["name"] == "needle"]
    assert needle and needle[0]["held"] is False, rep["gates"]
    assert code == 1 and rep["result"] == "no-go" and rep["exit_code"] == 1, cap.err
    assert rep["partial"] is True and rep["stopped"].startswith("needle aborted: /tokenize"), rep["stopped"]
    assert "PARTIAL: needle aborted" in cap.out


# ---- Ctrl-C: a real process, SIGINT to its group ----------------------------------------------------


@pytest.fixture
def spawn() -> Iterator[Callable[[list[str]], subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str]) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k not in ("STATION_API_KEY", "OPENAI_API_KEY")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "vllm_station", *args], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)


def _ctrl_c_once_waiting(proc: subprocess.Popen[bytes], srv: FaultServer, path: str) -> tuple[int, str]:
    """SIGINT once the command's request to `path` is waiting on the server; (exit code, stderr)."""
    deadline = time.monotonic() + 60
    while not any(r.path == path for r in srv.requests):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the command never sent its request"
        time.sleep(0.05)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=STOP_WITHIN_S)
    return int(proc.returncode), err.decode(errors="replace")


def _slow_chat() -> Reply:
    return Reply(json={"error": "too late"}, delay_s=120)


def test_ctrl_c_during_gates_writes_a_partial_report(
    tmp_path: Path, spawn: Callable[[list[str]], subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "agent.json"
    with FaultServer(fake_openai_routes("fake")) as srv:
        srv.route("POST", "/v1/chat/completions", _slow_chat())
        proc = spawn(["gates", "agent", "--base-url", srv.url, "--quiet", "--output", str(out), "--json"])
        code, err = _ctrl_c_once_waiting(proc, srv, "/v1/chat/completions")
    assert code == EXIT_INTERRUPTED, err
    assert "Traceback" not in err
    rep = json.loads(out.read_text())
    assert rep["partial"] is True and rep["stopped"] == "interrupted (Ctrl-C)"
    assert rep["result"] == "fail"


def test_ctrl_c_during_golive_writes_both_files_marked_partial(
    tmp_path: Path, spawn: Callable[[list[str]], subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "out"
    with FaultServer(fake_openai_routes("fake")) as srv:
        srv.route("POST", "/v1/chat/completions", _slow_chat())
        proc = spawn(["golive", "--base-url", srv.url, "--quiet", "--out", str(out)])
        code, err = _ctrl_c_once_waiting(proc, srv, "/v1/chat/completions")
    assert code == EXIT_INTERRUPTED, err
    assert "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == ["golive.html", "golive.json"]
    rep = json.loads((out / "golive.json").read_text())
    assert rep["partial"] is True and rep["stopped"].startswith("interrupted (Ctrl-C) during smoke")
    assert rep["result"] == "no-go" and rep["exit_code"] == EXIT_INTERRUPTED
    assert "PARTIAL" in (out / "golive.html").read_text() or rep["partial"]


def test_verify_interrupted_reports_what_it_checked_and_stamps_nothing(tmp_path: Path) -> None:
    """Ctrl-C while `verify --sha256` hashes (raised from its progress callback, in the main thread)."""
    from hubserver import make_checkpoint
    from test_verify import record_hashes

    from vllm_station.checkpoint.verification import verify_checkpoint

    ckpt = tmp_path / "ckpt"
    make_checkpoint(ckpt, shards=2, tensors_per_shard=2)
    record_hashes(ckpt)

    def interrupt(_: str) -> None:
        raise KeyboardInterrupt

    report = verify_checkpoint(ckpt, sha256=True, on_progress=interrupt)
    assert report.partial is True and report.ok is False and report.stamp is None
    assert not (ckpt / ".station-verified.json").exists()
    assert any("interrupted (Ctrl-C)" in p.problem for p in report.problems)


def test_the_ctrl_c_tests_cannot_pass_by_accident() -> None:
    """A command that ignored SIGINT would run into the 120 s delay and fail on `STOP_WITHIN_S`."""
    assert _slow_chat().delay_s > STOP_WITHIN_S * 2
    assert threading.current_thread() is threading.main_thread()
