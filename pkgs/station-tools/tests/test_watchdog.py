"""`station watchdog`: verdicts from real servers (`station simulate` in its wedge and serial engine modes,
real vLLM), restarts within the configured time, none on a slow but progressing long prefill.

The restart the watchdog asks for is real here too: the simulator's process is stopped and a fresh one
started on the same port (under systemd that is `systemctl restart`, proven in the system tier).
"""

from __future__ import annotations

import argparse
import json
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import VllmServer, free_port
from faultserver import FaultServer, RawReply, Reply, Request
from simserver import SimServer

from vllm_station import cli, textfile
from vllm_station.api import ApiTimeout, ApiUnreachable, ProtocolError
from vllm_station.api.args import endpoint_from_args
from vllm_station.api.errors import HttpStatusError
from vllm_station.commands.watchdog import (
    Look,
    Options,
    UnitState,
    Verdict,
    Watchdog,
    classify,
    judge,
    run_loop,
)
from vllm_station.errors import UsageError
from vllm_station.sim.config import SimConfig
from vllm_station.sim.process import SimProcess

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
TEXTFILE = "station-watchdog.prom"

FAST = {"interval_s": 0.5, "probe_timeout_s": 0.4, "wedge_verdicts": 3}


def _endpoint(url: str) -> object:
    return endpoint_from_args(argparse.Namespace(base_url=url, api_key_file=None, ca_file=None))


def _look(**kw: object) -> Look:
    base: dict[str, object] = {
        "at": 0.0, "probe_ok": False, "probe_s": 0.4, "probe_error": "timed out", "failure": "transport",
        "signature": {"vllm:generation_tokens_total": 5.0}, "shown": {},
    }  # fmt: skip
    base.update(kw)
    return Look(**base)  # type: ignore[arg-type]


# ---- the verdict rule ---------------------------------------------------------------------------------


def test_judge_each_verdict() -> None:
    sig = {"vllm:generation_tokens_total": 5.0, "vllm:kv_cache_usage_perc": 0.25}
    assert judge(sig, _look(probe_ok=True, signature=sig))[0] == "ok"
    assert judge(sig, _look(signature=dict(sig)))[0] == "wedged"
    moved = {**sig, "vllm:kv_cache_usage_perc": 0.26}
    verdict, reason = judge(sig, _look(signature=moved))
    assert verdict == "busy" and "kv_cache_usage_perc moved" in reason
    assert judge(sig, _look(signature=None, metrics_error="GET /metrics: timeout"))[0] == "wedged"
    assert judge(None, _look(signature=sig))[0] == "no-baseline"
    assert judge(sig, _look(failure="refused"))[0] == "down"
    assert judge(sig, _look(failure="misconfigured", signature=dict(sig)))[0] == "misconfigured"
    assert judge(sig, _look(failure="overloaded", signature=dict(sig)))[0] == "overloaded"
    # an answer proves the server lives: not a wedge even when /metrics does not answer either
    assert judge(sig, _look(failure="misconfigured", signature=None))[0] == "misconfigured"
    assert judge(sig, _look(failure="overloaded", signature=None))[0] == "overloaded"
    failed = UnitState("failed", "failed", "start-limit-hit", 0)
    assert judge(sig, _look(unit=failed))[0] == "inactive"
    assert judge(sig, _look(unit=UnitState("active", "running", "success", 0), probe_ok=True))[0] == "ok"


def test_a_metric_that_appears_or_resets_is_progress() -> None:
    prev = {"vllm:generation_tokens_total": 5.0}
    assert judge(prev, _look(signature={**prev, "vllm:prompt_tokens_total": 1.0}))[0] == "busy"
    assert judge(prev, _look(signature={"vllm:generation_tokens_total": 0.0}))[0] == "busy"


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"interval_s": 1.0, "probe_timeout_s": 2.0}, "must not exceed --interval"),
        ({"wedge_verdicts": 0}, "--wedge-verdicts"),
        ({"interval_s": 0.0}, "--interval"),
        ({"probe_timeout_s": float("nan")}, "--probe-timeout"),
    ],
)
def test_bad_options_are_usage_errors(kw: dict[str, float], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        Options(**kw)  # type: ignore[arg-type]


# ---- what a failed probe means ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "expected"),
    [(401, "misconfigured"), (403, "misconfigured"), (404, "misconfigured"), (400, "misconfigured"),
     (422, "misconfigured"), (301, "misconfigured"), (429, "overloaded"), (503, "overloaded"),
     (500, "transport"), (502, "transport"), (504, "transport")],
)  # fmt: skip
def test_classify_an_http_answer(status: int, expected: str) -> None:
    err = HttpStatusError("POST /v1/completions: HTTP", url="http://x/v1/completions", status=status, body="")
    assert classify(err) == expected


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (ApiUnreachable("refused", kind="refused", url="u"), "refused"),
        (ApiUnreachable("connect timeout", kind="connect-timeout", url="u"), "transport"),
        (ApiUnreachable("reset while connecting", kind="connect", url="u"), "transport"),
        (ApiUnreachable("bad certificate", kind="tls", url="u"), "misconfigured"),
        (ApiUnreachable("no such host", kind="dns", url="u"), "misconfigured"),
        (ApiTimeout("no answer", url="u", timeout_s=1.0), "transport"),
        (ProtocolError("the connection broke mid-answer", url="u"), "transport"),
    ],
)
def test_classify_a_transport_failure(err: Exception, expected: str) -> None:
    assert classify(err) == expected  # type: ignore[arg-type]


FROZEN_METRICS = (
    "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total 5\n"
    "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0\n"
    "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
)
ANSWER = {
    "id": "cmpl-0", "object": "text_completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "text": "!", "finish_reason": "length"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}  # fmt: skip


class Engine:
    """A real HTTP server whose /v1/completions answers as `mode` says, with an idle engine's /metrics
    (nothing moves: an idle engine and a wedged one look alike there)."""

    def __init__(self) -> None:
        self.mode: Reply | RawReply = Reply(json=ANSWER)
        self.srv = FaultServer(
            {
                ("POST", "/v1/completions"): self._answer,
                ("GET", "/metrics"): Reply(body=FROZEN_METRICS),
            }
        ).start()

    def _answer(self, _req: Request) -> Reply | RawReply:
        return self.mode


@pytest.fixture
def engine() -> object:
    e = Engine()
    yield e
    e.srv.stop()


def _looks(engine: Engine, n: int, lines: list[str], restarts: list[str], tmp: Path | None = None,
           **kw: object) -> list[Verdict]:  # fmt: skip
    dog = _dog(engine.srv.url, lambda: restarts.append("restart") or "restarted", lines, tmp,
               **{"model": "m", **kw})  # fmt: skip
    try:
        return run_loop(dog, n, sleep=lambda _s: None)
    finally:
        dog.close()


def test_a_401_storm_is_misconfigured_and_never_restarted(engine: Engine, tmp_path: Path) -> None:
    """A stale key on an idle engine: every probe is refused and /metrics stands still. Before the
    verdicts were separated this read `wedged` and restarted a healthy engine until the start limit."""
    engine.mode = Reply(status=401, json={"error": {"message": "Unauthorized"}})
    lines: list[str] = []
    restarts: list[str] = []
    verdicts = _looks(engine, 5, lines, restarts, tmp_path, wedge_verdicts=2)
    assert [v.verdict for v in verdicts] == ["misconfigured"] * 5
    assert restarts == [] and all(v.streak == 0 and not v.restarted for v in verdicts)
    said = [line for line in lines if line.startswith("verdict misconfigured")]
    assert len(said) == 1, lines  # once, when the stretch began
    assert "HTTP 401" in said[0] and "no restart changes" in said[0]
    exported = textfile.read(tmp_path / TEXTFILE)
    assert exported['station_watchdog_verdict{verdict="misconfigured"}'] == 1
    assert exported['station_watchdog_verdict{verdict="wedged"}'] == 0
    assert exported["station_watchdog_restarts_total"] == 0
    assert exported["station_watchdog_probe_success"] == 0


@pytest.mark.parametrize("status", [403, 404, 400])
def test_other_refusals_are_misconfigured(engine: Engine, status: int) -> None:
    engine.mode = Reply(status=status, json={"error": {"message": "no"}})
    restarts: list[str] = []
    verdicts = _looks(engine, 3, [], restarts, wedge_verdicts=1)
    assert [v.verdict for v in verdicts] == ["misconfigured"] * 3 and restarts == []


def test_a_refusal_is_misconfigured_even_when_metrics_is_refused_too(engine: Engine) -> None:
    engine.mode = Reply(status=401, json={"error": {"message": "Unauthorized"}})
    engine.srv.route("GET", "/metrics", Reply(status=401))
    restarts: list[str] = []
    verdicts = _looks(engine, 3, [], restarts, wedge_verdicts=1)
    assert [v.verdict for v in verdicts] == ["misconfigured"] * 3 and restarts == []


@pytest.mark.parametrize("status", [429, 503])
def test_shedding_load_is_overloaded_and_never_restarted(engine: Engine, status: int, tmp_path: Path) -> None:
    engine.mode = Reply(status=status, json={"error": {"message": "slow down"}})
    lines: list[str] = []
    restarts: list[str] = []
    verdicts = _looks(engine, 4, lines, restarts, tmp_path, wedge_verdicts=2)
    assert [v.verdict for v in verdicts] == ["overloaded"] * 4 and restarts == []
    assert len([line for line in lines if line.startswith("verdict overloaded")]) == 1, lines
    exported = textfile.read(tmp_path / TEXTFILE)
    assert exported['station_watchdog_verdict{verdict="overloaded"}'] == 1
    assert exported["station_watchdog_restarts_total"] == 0


@pytest.mark.parametrize(
    "failure",
    [Reply(json=ANSWER, delay_s=2.0), RawReply(b""), Reply(status=500, json={"error": {"message": "boom"}}),
     Reply(status=502, body="bad gateway")],
    ids=["timeout", "reset", "500", "502"],
)  # fmt: skip
def test_a_transport_failure_without_progress_is_restarted_after_n_looks(
    engine: Engine, failure: Reply | RawReply, tmp_path: Path
) -> None:
    engine.mode = failure
    lines: list[str] = []
    restarts: list[str] = []
    verdicts = _looks(engine, 3, lines, restarts, tmp_path, wedge_verdicts=2)
    assert [v.verdict for v in verdicts] == ["no-baseline", "wedged", "wedged"], lines
    assert [v.restarted for v in verdicts] == [False, False, True]
    assert restarts == ["restart"]
    assert textfile.read(tmp_path / TEXTFILE)["station_watchdog_restarts_total"] == 1


def test_an_interrupted_wedge_starts_the_count_anew(engine: Engine) -> None:
    """wedged, healthy, wedged with 2 verdicts to restart: no restart (the healthy look resets the count);
    a second wedged look in a row then restarts."""
    hang, ok = Reply(json=ANSWER, delay_s=2.0), Reply(json=ANSWER)
    restarts: list[str] = []
    dog = _dog(engine.srv.url, lambda: restarts.append("restart") or "restarted", [], model="m",
               wedge_verdicts=2)  # fmt: skip
    seen: list[tuple[str, int]] = []
    try:
        for mode in (hang, hang, ok, hang, hang):
            engine.mode = mode
            v = run_loop(dog, 1, sleep=lambda _s: None)[0]
            seen.append((v.verdict, v.streak))
            if mode is ok:
                assert restarts == [], seen
    finally:
        dog.close()
    assert seen == [("no-baseline", 0), ("wedged", 1), ("ok", 0), ("wedged", 1), ("wedged", 2)]
    assert restarts == ["restart"]


def test_a_refusal_between_wedged_looks_starts_the_count_anew(engine: Engine) -> None:
    hang, refused = Reply(json=ANSWER, delay_s=2.0), Reply(status=401, json={"error": {"message": "no"}})
    restarts: list[str] = []
    dog = _dog(engine.srv.url, lambda: restarts.append("restart") or "restarted", [], model="m",
               wedge_verdicts=2)  # fmt: skip
    try:
        verdicts = []
        for mode in (hang, hang, refused, hang):
            engine.mode = mode
            verdicts += run_loop(dog, 1, sleep=lambda _s: None)
    finally:
        dog.close()
    assert [v.verdict for v in verdicts] == ["no-baseline", "wedged", "misconfigured", "wedged"]
    assert restarts == []


# ---- against station simulate -------------------------------------------------------------------------


class Restartable:
    """A simulator that the watchdog's restart really restarts: a new process on the same port."""

    def __init__(self, args: list[str]) -> None:
        self.port = free_port()
        self.args = ["--ttft", "0.01", "--itl", "0.002", "--model", "sim", "--port", str(self.port), *args]
        self.sim: SimProcess | None = None
        self.restarted_at: list[float] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, extra: list[str] | None = None) -> None:
        self.sim = SimProcess([*self.args, *(extra or [])]).__enter__()

    def restart(self) -> str:
        self.restarted_at.append(time.monotonic())
        self.stop()
        self.start(["--engine", "normal"])
        return "simulator process replaced"

    def stop(self) -> None:
        if self.sim is not None:
            self.sim.__exit__()
            self.sim = None

    def engine(self, mode: str) -> None:
        httpx.post(
            self.base_url + "/sim/engine", json={"mode": mode}, timeout=5, trust_env=False
        ).raise_for_status()


@pytest.fixture
def restartable() -> object:
    servers: list[Restartable] = []

    def make(args: list[str]) -> Restartable:
        r = Restartable(args)
        servers.append(r)
        r.start()
        return r

    yield make
    for r in servers:
        r.stop()


@pytest.fixture
def insim() -> object:
    """An in-process simulator (no process to start) in the given engine mode."""
    servers: list[SimServer] = []

    def make(**kw: object) -> SimServer:
        s = SimServer(SimConfig(model="sim", ttft=0.01, itl=0.002, **kw)).__enter__()  # type: ignore[arg-type]
        servers.append(s)
        return s

    yield make
    for s in servers:
        if s._thread.is_alive():  # a test may have stopped it already
            s.__exit__()


def _dog(url: str, restart: object, lines: list[str], tmp: Path | None = None, **kw: object) -> Watchdog:
    opts = Options(**{**FAST, "textfile_dir": tmp, **kw})  # type: ignore[arg-type]
    return Watchdog(opts, _endpoint(url), restart=restart, say=lines.append)  # type: ignore[arg-type]


def test_a_wedge_is_restarted_within_the_configured_time(restartable: object, tmp_path: Path) -> None:
    sim: Restartable = restartable([])  # type: ignore[operator]
    lines: list[str] = []
    dog = _dog(sim.base_url, sim.restart, lines, tmp_path)
    try:
        healthy = run_loop(dog, 2)
        assert [v.verdict for v in healthy] == ["ok", "ok"]
        sim.engine("wedge")  # /health 200, /metrics frozen, no token ever
        assert httpx.get(sim.base_url + "/health", timeout=5, trust_env=False).status_code == 200
        wedged_at = time.monotonic()
        verdicts: list[Verdict] = []
        while not sim.restarted_at and time.monotonic() - wedged_at < 20:
            verdicts += run_loop(dog, 1)
        assert sim.restarted_at, lines
        detection = sim.restarted_at[0] - wedged_at
        bound = dog.opts.detection_bound_s
        print(f"watchdog figure: wedge restarted after {detection:.2f} s (bound {bound:g} s)")
        assert detection <= dog.opts.detection_bound_s + 0.5  # + scheduling slack of a loaded 2-core machine
        assert [v.verdict for v in verdicts] == ["wedged"] * 3
        assert verdicts[-1].restarted and dog.restarts == 1
        restart_line = next(line for line in lines if line.startswith("restarting"))
        assert "3 consecutive wedge verdicts" in restart_line and "generation_tokens" in restart_line
        assert "no progress for" in restart_line
        after = run_loop(dog, 1)  # the fresh process answers
        assert after[-1].verdict == "ok", [v.reason for v in after]
        exported = textfile.read(tmp_path / TEXTFILE)
        assert exported["station_watchdog_restarts_total"] == 1
        assert exported['station_watchdog_verdict{verdict="ok"}'] == 1
        assert exported['station_watchdog_verdict{verdict="wedged"}'] == 0
    finally:
        dog.close()


def test_a_slow_but_progressing_long_prefill_is_never_restarted(insim: object) -> None:
    """A 4-second prefill holds the engine (serial mode): every probe times out behind it, the counters stand
    still as vLLM's do, only the KV-cache use moves. No restart; a watchdog that ignored the KV cache would
    have restarted (the counters alone did not move for ≥ 3 looks)."""
    sim: SimServer = insim(engine="serial", prefill_per_token=0.002)  # type: ignore[operator]
    lines: list[str] = []
    restarts: list[str] = []
    dog = _dog(sim.base_url, lambda: restarts.append("restart") or "restarted", lines)
    prompt = " ".join(["word"] * 2000)  # 2,000 tokens x 2 ms = 4 s of prefill
    done: list[float] = []

    def long_request() -> None:
        body = {"model": "sim", "prompt": prompt, "max_tokens": 4}
        httpx.post(
            sim.base_url + "/v1/completions", json=body, timeout=60, trust_env=False
        ).raise_for_status()
        done.append(time.monotonic())

    try:
        run_loop(dog, 1)  # a baseline
        t = threading.Thread(target=long_request)
        t.start()
        time.sleep(0.2)
        verdicts = run_loop(dog, 9)
        t.join(timeout=30)
        assert done, "the long request finished"
        names = [v.verdict for v in verdicts]
        assert restarts == [] and dog.restarts == 0, (names, lines)
        assert "wedged" not in names, lines
        assert names.count("busy") >= 3, (names, lines)
        # Looks where only the KV cache moved: without it in the signature each would read `wedged`;
        # a run of 3 of them would have restarted the unit.
        kv_only = [v.verdict == "busy" and v.reason.endswith("(kv_cache_usage_perc moved)") for v in verdicts]
        longest = max((len(run) for run in "".join("k" if k else "." for k in kv_only).split(".")), default=0)
        assert longest >= dog.opts.wedge_verdicts, ([v.reason for v in verdicts], lines)
    finally:
        dog.close()


def test_a_stopped_server_is_down_not_wedged(insim: object) -> None:
    sim: SimServer = insim()  # type: ignore[operator]
    lines: list[str] = []
    restarts: list[str] = []
    dog = _dog(sim.base_url, lambda: restarts.append("restart") or "restarted", lines, wedge_verdicts=1)
    try:
        assert run_loop(dog, 1)[0].verdict == "ok"
        sim.__exit__()
        verdicts = run_loop(dog, 2)
        assert [v.verdict for v in verdicts] == ["down"] * 2
        assert restarts == []
    finally:
        dog.close()


def test_without_a_unit_it_only_reports(insim: object) -> None:
    sim: SimServer = insim(engine="wedge")  # type: ignore[operator]
    lines: list[str] = []
    dog = _dog(sim.base_url, None, lines, wedge_verdicts=1)
    try:
        verdicts = run_loop(dog, 2)
        assert verdicts[-1].verdict == "wedged" and not verdicts[-1].restarted
        assert any(line.startswith("would restart the serving unit (no --unit given)") for line in lines)
    finally:
        dog.close()


# ---- the command ----------------------------------------------------------------------------------------


def _fake_systemctl(tmp_path: Path, show: str) -> Path:
    """A stand-in for systemctl (the real one is exercised in checks/test_system_monitoring.py): it answers
    `show` with `show` and records every call."""
    script = tmp_path / "systemctl"
    calls = tmp_path / "calls"
    script.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        f"case \"$1\" in show) printf '%s\\n' '{show}' | tr ';' '\\n' ;; esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


@pytest.fixture
def station(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """`station watchdog ARGS` in this process (cli.main: the exit code, stdout and stderr), without a key."""
    monkeypatch.delenv("STATION_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()
        code = cli.main(["watchdog", *args])
        out = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out.out, out.err)

    return run


def test_cli_restarts_the_unit_through_systemctl_and_exports(
    insim: object, tmp_path: Path, station: Callable[..., Any]
) -> None:
    sim: SimServer = insim(engine="wedge")  # type: ignore[operator]
    systemctl = _fake_systemctl(tmp_path, "ActiveState=active;SubState=running;Result=success;NRestarts=0")
    out = station(
        "--base-url", sim.base_url, "--unit", "vllm-station.service", "--systemctl", str(systemctl),
        "--interval", "0.5", "--probe-timeout", "0.4", "--wedge-verdicts", "2", "--cycles", "3", "--json",
        "--textfile-dir", str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    verdicts = [json.loads(line) for line in out.stdout.splitlines()]
    assert [v["verdict"] for v in verdicts] == ["no-baseline", "wedged", "wedged"]
    assert verdicts[-1]["restarted"] is True
    calls = (tmp_path / "calls").read_text().splitlines()
    assert "restart --no-block vllm-station.service" in calls
    assert sum(c.startswith("show") for c in calls) == 3
    assert "restarting vllm-station.service (systemctl restart --no-block vllm-station.service)" in out.stderr
    exported = textfile.read(tmp_path / TEXTFILE)
    assert exported["station_watchdog_unit_start_limit_hit"] == 0
    assert exported["station_watchdog_restarts_total"] == 1


def test_a_wedge_restart_kills_the_container_after_asking_systemd(
    insim: object, tmp_path: Path, station: Callable[..., Any]
) -> None:
    """The unit's stop waits up to vLLM's --shutdown-timeout for requests to finish; a wedged engine
    finishes none. With --runtime/--container the watchdog asks systemd for the restart, then kills the
    container, in that order (both programs stand-ins that record their calls in one file)."""
    sim: SimServer = insim(engine="wedge")  # type: ignore[operator]
    systemctl = _fake_systemctl(tmp_path, "ActiveState=active;SubState=running;Result=success;NRestarts=0")
    runtime = tmp_path / "docker"
    runtime.write_text(f'#!/bin/sh\necho "docker $@" >> {tmp_path / "calls"}\n')
    runtime.chmod(runtime.stat().st_mode | stat.S_IEXEC)
    out = station(
        "--base-url", sim.base_url, "--unit", "vllm-station.service", "--systemctl", str(systemctl),
        "--runtime", str(runtime), "--container", "vllm-station",
        "--interval", "0.5", "--probe-timeout", "0.4", "--wedge-verdicts", "2", "--cycles", "3",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    calls = [c for c in (tmp_path / "calls").read_text().splitlines() if not c.startswith("show")]
    assert calls == ["restart --no-block vllm-station.service", "docker kill vllm-station"], calls
    assert f"then {runtime} kill vllm-station (a wedged engine has nothing to drain)" in out.stderr


def test_a_refused_watchdog_restart_is_the_start_limit_whatever_the_result(
    insim: object, tmp_path: Path, station: Callable[..., Any]
) -> None:
    """The watchdog's restart refused by the start limit, its container killed: systemd 252 reports the
    kill's Result (exit-code) and no automatic restart (measured in checks/test_system_monitoring.py).
    The watchdog knows it asked for that restart: failed since then is its start limit."""
    sim: SimServer = insim(engine="wedge")  # type: ignore[operator]
    calls = tmp_path / "calls"
    script = tmp_path / "systemctl"
    script.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        'if [ "$1" = show ]; then\n'
        f'  if grep -q "^restart" {calls}; then\n'
        '    s="ActiveState=failed;SubState=failed;Result=exit-code;NRestarts=0"\n'
        '  else s="ActiveState=active;SubState=running;Result=success;NRestarts=0"; fi\n'
        "  printf '%s\\n' \"$s\" | tr ';' '\\n'\nfi\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    out = station(
        "--base-url", sim.base_url, "--unit", "vllm-station.service", "--systemctl", str(script),
        "--interval", "0.5", "--probe-timeout", "0.4", "--wedge-verdicts", "2", "--cycles", "5",
        "--textfile-dir", str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "failed by its start limit (the watchdog's restart refused, Result=exit-code)" in out.stderr
    assert textfile.read(tmp_path / TEXTFILE)["station_watchdog_unit_start_limit_hit"] == 1
    assert sum(c.startswith("restart") for c in calls.read_text().splitlines()) == 1


def test_runtime_without_container_is_a_usage_error(station: Callable[..., Any]) -> None:
    out = station(
        "--base-url", "http://127.0.0.1:1", "--unit", "u", "--runtime", "/bin/true", "--cycles", "1"
    )  # fmt: skip
    assert out.returncode == 2 and "--runtime and --container go together" in out.stderr


def test_cli_says_once_that_the_start_limit_refused_the_unit(
    insim: object, tmp_path: Path, station: Callable[..., Any]
) -> None:
    sim: SimServer = insim()  # type: ignore[operator]
    systemctl = _fake_systemctl(
        tmp_path, "ActiveState=failed;SubState=failed;Result=start-limit-hit;NRestarts=2"
    )
    out = station(
        "--base-url", sim.base_url, "--unit", "vllm-station.service", "--systemctl", str(systemctl),
        "--interval", "0.2", "--probe-timeout", "0.2", "--cycles", "3", "--textfile-dir", str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("failed by its start limit (start-limit-hit)") == 1, out.stderr
    assert "systemctl reset-failed vllm-station.service" in out.stderr
    assert textfile.read(tmp_path / TEXTFILE)["station_watchdog_unit_start_limit_hit"] == 1
    assert not any(c.startswith("restart") for c in (tmp_path / "calls").read_text().splitlines())


@pytest.mark.parametrize(
    ("show", "hit"),
    [
        # systemd 252 refusing its own restart after a crash loop keeps the crash's Result (measured by
        # checks/test_system_monitoring.py: failed / signal / NRestarts=3)
        ("ActiveState=failed;SubState=failed;Result=signal;NRestarts=3", True),
        ("ActiveState=failed;SubState=failed;Result=exit-code;NRestarts=1", True),
        ("ActiveState=failed;SubState=failed;Result=start-limit-hit;NRestarts=0", True),
        # failed without any restart: another failure, not the start limit
        ("ActiveState=failed;SubState=failed;Result=exit-code;NRestarts=0", False),
        # restarting, not given up
        ("ActiveState=activating;SubState=auto-restart;Result=signal;NRestarts=2", False),
    ],
)
def test_the_start_limit_as_systemd_252_reports_it(
    insim: object, tmp_path: Path, station: Callable[..., Any], show: str, hit: bool
) -> None:
    sim: SimServer = insim()  # type: ignore[operator]
    systemctl = _fake_systemctl(tmp_path, show)
    out = station(
        "--base-url", sim.base_url, "--unit", "vllm-station.service", "--systemctl", str(systemctl),
        "--interval", "0.2", "--probe-timeout", "0.2", "--cycles", "2", "--textfile-dir", str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    exported = textfile.read(tmp_path / TEXTFILE)
    assert exported["station_watchdog_unit_start_limit_hit"] == (1 if hit else 0), out.stderr
    assert ("failed by its start limit" in out.stderr) == hit, out.stderr
    if hit and "NRestarts=0" not in show:
        assert "automatic restarts, Result=" in out.stderr


def test_cli_bad_arguments_exit_2(station: Callable[..., Any]) -> None:
    out = station(
        "--base-url", "http://127.0.0.1:1", "--interval", "1", "--probe-timeout", "5", "--cycles", "1"
    )
    assert (
        out.returncode == 2 and "must not exceed --interval" in out.stderr and "Traceback" not in out.stderr
    )


# ---- real vLLM ------------------------------------------------------------------------------------------


def test_real_vllm_reads_ok_and_its_progress_metrics_exist(tools_server: VllmServer) -> None:
    lines: list[str] = []
    dog = _dog(tools_server.base_url, None, lines, interval_s=5.0, probe_timeout_s=5.0)
    try:
        verdicts = run_loop(dog, 2, sleep=lambda _s: None)
        assert [v.verdict for v in verdicts] == ["ok", "ok"], lines
        look = dog.look()
        assert look.signature is not None
        for name in ("vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:kv_cache_usage_perc"):
            assert name in look.signature, sorted(look.signature)
        assert {"generation_tokens", "kv_cache_usage", "running", "waiting"} <= set(look.shown)
    finally:
        dog.close()


def test_an_unreadable_unit_state_is_said_once_and_the_probe_still_judges(
    insim: object, tmp_path: Path, station: Callable[..., Any]
) -> None:
    sim: SimServer = insim()  # type: ignore[operator]
    systemctl = tmp_path / "systemctl"
    systemctl.write_text("#!/bin/sh\necho 'System has not been booted with systemd' >&2\nexit 1\n")
    systemctl.chmod(0o755)
    out = station(
        "--base-url", sim.base_url, "--unit", "vllm-station.service", "--systemctl", str(systemctl),
        "--interval", "0.2", "--probe-timeout", "0.2", "--cycles", "3", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["verdict"] for line in out.stdout.splitlines()] == ["ok"] * 3
    assert out.stderr.count("cannot read the unit's state") == 1, out.stderr


# ---- the station key's rotation ------------------------------------------------------------------------

KEY_A = "sk-station-key-a-0123456789abcdef"
KEY_B = "sk-station-key-b-0123456789abcdef"


def test_a_rotated_key_file_is_read_again_and_never_judged_a_wedge(tmp_path: Path) -> None:
    """The rotation docs/secrets.md describes: the key file is replaced, the serving unit restarted with
    the new key; the watchdog keeps running and sends the new key from its next look on. Before, it kept
    the key it read at its start: every probe of the restarted engine got 401."""
    expected = {"key": KEY_A}

    def answer(req: Request) -> Reply:
        if req.headers.get("authorization") != f"Bearer {expected['key']}":
            return Reply(status=401, json={"error": {"message": "Unauthorized"}})
        return Reply(json=ANSWER)

    srv = FaultServer({("POST", "/v1/completions"): answer, ("GET", "/metrics"): Reply(body=FROZEN_METRICS)})
    srv.start()
    key_file = tmp_path / "vllm-api-key"
    key_file.write_text(KEY_A + "\n")
    lines: list[str] = []
    restarts: list[str] = []
    endpoint = endpoint_from_args(
        argparse.Namespace(base_url=srv.url, api_key_file=str(key_file), ca_file=None)
    )
    dog = Watchdog(
        Options(**{**FAST, "model": "m"}),  # type: ignore[arg-type]
        endpoint,
        restart=lambda: restarts.append("restart") or "restarted",  # type: ignore[func-returns-value]
        say=lines.append,
        key_file=key_file,
    )
    try:
        assert [v.verdict for v in run_loop(dog, 2, sleep=lambda _s: None)] == ["ok", "ok"]
        # the rotation: a new file put in place by rename (as `install` does), the engine restarted
        new = tmp_path / "vllm-api-key.new"
        new.write_text(KEY_B + "\n")
        new.rename(key_file)
        expected["key"] = KEY_B
        assert [v.verdict for v in run_loop(dog, 3, sleep=lambda _s: None)] == ["ok"] * 3
        assert any(f"the API key file {key_file} changed" in line for line in lines), lines
        # a changed file that cannot be used: the last key stays, said once
        key_file.write_text("")
        assert [v.verdict for v in run_loop(dog, 2, sleep=lambda _s: None)] == ["ok", "ok"]
        assert sum("cannot be used; the probe keeps the last key" in line for line in lines) == 1
    finally:
        dog.close()
        srv.stop()
    assert restarts == []
    assert KEY_A not in "\n".join(lines) and KEY_B not in "\n".join(lines)


def test_without_rereading_the_rotated_key_is_refused(tmp_path: Path) -> None:
    """The same rotation to a watchdog that was given no key file to re-read (its key from the
    environment): its probes are refused — misconfigured, never a restart. This is what the test above
    would see if the key were not read again."""
    expected = {"key": KEY_A}

    def answer(req: Request) -> Reply:
        if req.headers.get("authorization") != f"Bearer {expected['key']}":
            return Reply(status=401, json={"error": {"message": "Unauthorized"}})
        return Reply(json=ANSWER)

    srv = FaultServer({("POST", "/v1/completions"): answer, ("GET", "/metrics"): Reply(body=FROZEN_METRICS)})
    srv.start()
    key_file = tmp_path / "vllm-api-key"
    key_file.write_text(KEY_A + "\n")
    endpoint = endpoint_from_args(
        argparse.Namespace(base_url=srv.url, api_key_file=str(key_file), ca_file=None)
    )
    restarts: list[str] = []
    dog = Watchdog(
        Options(**{**FAST, "model": "m", "wedge_verdicts": 1}),  # type: ignore[arg-type]
        endpoint,
        restart=lambda: restarts.append("restart") or "restarted",  # type: ignore[func-returns-value]
        say=lambda _line: None,
    )
    try:
        run_loop(dog, 2, sleep=lambda _s: None)
        key_file.write_text(KEY_B + "\n")
        expected["key"] = KEY_B
        assert [v.verdict for v in run_loop(dog, 2, sleep=lambda _s: None)] == ["misconfigured"] * 2
    finally:
        dog.close()
        srv.stop()
    assert restarts == []
