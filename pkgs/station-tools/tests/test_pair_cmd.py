"""`station pair wait-worker | wait-head-stop | beacon` against real listeners on 127.0.0.x and ::1.

The beacon runs as a real subprocess (`python -m vllm_station pair beacon …`, its own session, stopped
by process group); wait-worker polls it over HTTP; wait-head-stop probes real TCP listeners. The one
stand-in is `systemctl` (no systemd here): a shell script first on PATH printing the unit's state.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from vllm_station.cli import main
from vllm_station.errors import UsageError
from vllm_station.polling import Latest, Tick, poll, poll_latest, still_pending

pytestmark = pytest.mark.timeout(60)

STATION = [sys.executable, "-m", "vllm_station"]
HEAD = "127.0.0.1"
WORKER = "127.0.0.2"


def _has_ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


HOSTS = [HEAD, pytest.param("::1", marks=pytest.mark.skipif(not _has_ipv6(), reason="no IPv6 loopback"))]


def free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def url(host: str, port: int, path: str = "/ready") -> str:
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}{path}"


# --- the beacon as a subprocess -----------------------------------------------------------------


class Beacon:
    def __init__(
        self,
        tmp: Path,
        host: str,
        role: str = "worker",
        rank: int = 1,
        stamp: Path | None = None,
        port: int | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.host, self.port = host, port or free_port(host)
        self.log = tmp / f"beacon-{self.port}.log"
        argv = [*STATION, "pair", "beacon", "--bind", host, "--port", str(self.port), "--role", role]
        argv += ["--rank", str(rank), *(["--stamp", str(stamp)] if stamp else []), *extra]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def url(self, path: str = "/ready") -> str:
        return url(self.host, self.port, path)

    def wait_up(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"beacon exited {self.proc.returncode}: {self.log.read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url(), timeout=1.0).status_code in (200, 503):
                    return
            time.sleep(0.05)
        raise AssertionError(f"beacon not up within {timeout} s: {self.log.read_text()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        return self.proc.returncode


@pytest.fixture
def beacons(tmp_path: Path) -> Iterator[list[Beacon]]:
    started: list[Beacon] = []
    yield started
    for b in started:
        b.stop()


def start_beacon(
    beacons: list[Beacon], tmp: Path, host: str = WORKER, role: str = "worker", rank: int = 1,
    stamp: Path | None = None, port: int | None = None, extra: tuple[str, ...] = (),
) -> Beacon:  # fmt: skip
    b = Beacon(tmp, host, role, rank, stamp, port, extra)
    beacons.append(b)
    return b


@pytest.mark.parametrize("host", HOSTS)
def test_beacon_serves_ready_and_the_current_stamp(beacons: list[Beacon], tmp_path: Path, host: str) -> None:
    stamp = tmp_path / "stamp.json"
    stamp.write_text('{"version": 1, "revision": "a"}\n')
    b = start_beacon(beacons, tmp_path, host, stamp=stamp)
    b.wait_up()
    ready = httpx.get(b.url(), timeout=5)
    assert ready.status_code == 200 and ready.headers["content-type"].startswith("application/json")
    assert ready.json() == {"role": "worker", "rank": 1, "address": host}
    assert httpx.get(b.url("/ready?probe=1"), timeout=5).status_code == 200
    head = httpx.head(b.url(), timeout=5)
    assert head.status_code == 200 and head.content == b""

    got = httpx.get(b.url("/stamp"), timeout=5)
    assert got.status_code == 200 and got.headers["content-type"].startswith("application/json")
    assert got.content == b'{"version": 1, "revision": "a"}\n'
    stamp.write_text('{"version": 1, "revision": "b"}\n')  # read per request, not at start
    assert httpx.get(b.url("/stamp"), timeout=5).json()["revision"] == "b"
    stamp.unlink()
    gone = httpx.get(b.url("/stamp"), timeout=5)
    assert gone.status_code == 404 and "no verify stamp at" in gone.json()["error"]

    assert b.stop() == 0  # SIGTERM: exit 0
    out = b.log.read_text()
    assert "vllm-station pair: beacon of the worker (rank 1) on" in out
    assert "Traceback" not in out and len(out.splitlines()) == 1  # no line per request


def test_beacon_serves_nothing_else(beacons: list[Beacon], tmp_path: Path) -> None:
    big, secret = tmp_path / "big.json", tmp_path / "secret"
    secret.write_text("do not serve")
    b = start_beacon(beacons, tmp_path, WORKER, role="head", rank=0, stamp=big)
    b.wait_up()
    assert httpx.get(b.url(), timeout=5).json() == {"role": "head", "rank": 0, "address": WORKER}
    for path in ("/", "/secret", "/stamp/", "/ready/x", "/../secret", "/stamp.json", f"/{tmp_path}/secret"):
        r = httpx.get(b.url(path), timeout=5)
        assert r.status_code == 404 and "error" in r.json(), path
        assert b"do not serve" not in r.content
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        r = httpx.request(method, b.url("/ready"), timeout=5)
        assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD", method
    assert httpx.post(b.url("/nowhere"), timeout=5).status_code == 405

    # the stamp: over 1 MiB, a FIFO (must not hang), a directory
    big.write_bytes(b" " * (1024 * 1024 + 1))
    r = httpx.get(b.url("/stamp"), timeout=5)
    assert r.status_code == 404 and "over the 1 MiB limit" in r.json()["error"]
    big.unlink()
    os.mkfifo(big)
    r = httpx.get(b.url("/stamp"), timeout=5)
    assert r.status_code == 404 and "not a regular file" in r.json()["error"]
    big.unlink()
    big.mkdir()
    r = httpx.get(b.url("/stamp"), timeout=5)
    assert r.status_code == 404 and "not a regular file" in r.json()["error"]

    # an oversized request line is refused, and the beacon keeps serving
    with socket.create_connection((WORKER, b.port), timeout=5) as s:
        s.sendall(b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(64).split(b" ")[1] in (b"400", b"414")
    assert httpx.get(b.url(), timeout=5).status_code == 200
    assert b.stop() == 0


def test_beacon_without_stamp_says_so(beacons: list[Beacon], tmp_path: Path) -> None:
    b = start_beacon(beacons, tmp_path, WORKER)
    b.wait_up()
    r = httpx.get(b.url("/stamp"), timeout=5)
    assert r.status_code == 404 and "no --stamp" in r.json()["error"]


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--role", "head", "--rank", "1"], 2, "--role head runs rank 0, but --rank is 1"),
        (["--role", "worker", "--rank", "0"], 2, "--role worker runs rank 1, but --rank is 0"),
        (["--role", "both", "--rank", "0"], 2, "invalid choice"),
        (["--role", "head", "--rank", "0", "--bind", "192.0.2.7"], 2, "is not an address of this host"),
        (["--role", "head", "--rank", "0", "--port", "70000"], 2, "must be a port number from 1 to 65,535"),
    ],
)
def test_beacon_usage_errors(
    argv: list[str], code: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--bind", HEAD, "--port", str(free_port(HEAD))]
    assert main(["pair", "beacon", *base, *argv]) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_beacon_port_in_use_is_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server((HEAD, 0)) as taken:
        port = taken.getsockname()[1]
        assert (
            main(["pair", "beacon", "--bind", HEAD, "--port", str(port), "--role", "head", "--rank", "0"])
            == 1
        )
    err = capsys.readouterr().err
    assert f"cannot listen on {HEAD} port {port}: the port is in use" in err


# --- wait-worker ----------------------------------------------------------------------------------


def wait_worker(target: str, timeout: float, worker: str = WORKER) -> tuple[int, float]:
    t0 = time.monotonic()
    argv = ["pair", "wait-worker", "--url", target, "--timeout", str(timeout), "--interval", "0.2"]
    code = main([*argv, "--worker-address", worker])
    return code, time.monotonic() - t0


def test_wait_worker_passes_once_the_worker_comes_up(
    beacons: list[Beacon], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port(WORKER)
    late = threading.Timer(1.0, lambda: start_beacon(beacons, tmp_path, WORKER, port=port))
    late.start()
    try:
        code, took = wait_worker(url(WORKER, port), timeout=20)
    finally:
        late.join()
    err = capsys.readouterr().err
    assert code == 0, err
    assert took >= 1.0
    assert f"vllm-station pair: waiting up to 20 s for the worker {WORKER} ({url(WORKER, port)})" in err
    assert f"still waiting for the worker {WORKER} after" in err and "connection refused" in err
    assert err.rstrip().endswith(f"vllm-station pair: worker {WORKER} is up (rank 1)")


@pytest.mark.timing
def test_wait_worker_names_a_head_beacon_and_exits_1(
    beacons: list[Beacon], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b = start_beacon(beacons, tmp_path, WORKER, role="head", rank=0)
    b.wait_up()
    code, took = wait_worker(b.url(), timeout=1)
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"{b.url()} answers, but not as the worker: the beacon of role 'head' (rank 0" in err
    assert f"the worker {WORKER} did not answer as a worker on {b.url()} within 1 s" in err
    assert "what answered: the beacon of role 'head' (rank 0, address 127.0.0.2)" in err
    assert 0.9 <= took < 5


def test_wait_worker_names_a_non_beacon_answer(
    beacons: list[Beacon], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b = start_beacon(beacons, tmp_path, WORKER)
    b.wait_up()
    code, _ = wait_worker(b.url("/elsewhere"), timeout=0.5)
    err = capsys.readouterr().err
    assert code == 1 and "what answered: HTTP 404" in err, err


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.timing
def test_wait_worker_nothing_answers_is_exit_3(host: str, capsys: pytest.CaptureFixture[str]) -> None:
    target = url(host, free_port(host))
    code, took = wait_worker(target, timeout=1, worker=host)
    err = capsys.readouterr().err
    assert code == 3, err
    assert (
        f"vllm-station pair: the worker {host} did not answer on {target} within 1 s (nothing answered: "
        f"connection refused); start the worker first (on station {host}: systemctl start vllm-station), "
        "then this unit"
    ) in err
    assert 0.9 <= took < 5


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--url", "ftp://127.0.0.2/ready"], "--url: must be an http:// or https:// URL"),
        (["--timeout", "0"], "--timeout: must be a number of seconds from more than 0"),
        (["--timeout", "nan"], "--timeout: must be a number of seconds"),
        (["--interval", "-1"], "--interval: must be a number of seconds"),
    ],
)
def test_wait_worker_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = {
        "--url": "http://127.0.0.2:1/ready",
        "--timeout": "1",
        "--interval": "1",
        "--worker-address": WORKER,
    }
    base.update(zip(argv[::2], argv[1::2], strict=True))
    assert main(["pair", "wait-worker", *[x for kv in base.items() for x in kv]]) == 2
    assert message in capsys.readouterr().err


# --- wait-head-stop -------------------------------------------------------------------------------


class Listener:
    """A real TCP listener that accepts (and drops) connections until closed."""

    def __init__(self, host: str) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, 0), family=family)
        self.sock.settimeout(0.05)
        self.port = int(self.sock.getsockname()[1])
        self.open = True
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while self.open:
            with contextlib.suppress(OSError):
                conn, _ = self.sock.accept()
                conn.close()

    def close(self) -> None:
        self.open = False
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def fake_systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A `systemctl` first on PATH; it prints the content of `<bin>/state` ("fail": exit 1, a bus error)
    and logs its arguments to `<bin>/calls`. Yields `<bin>`."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "systemctl"
    exe.write_text(
        '#!/bin/sh\necho "$@" >> "$(dirname "$0")/calls"\n'
        'state=$(cat "$(dirname "$0")/state")\n'
        'if [ "$state" = fail ]; then\n'
        '  echo "Failed to connect to bus: No such file or directory" >&2; exit 1\n'
        "fi\n"
        'echo "ActiveState=$state"\n'
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    (bindir / "state").write_text("active")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    yield bindir


def wait_head_stop(host: str, port: int, timeout: float) -> tuple[int, float]:
    t0 = time.monotonic()
    code = main(
        ["pair", "wait-head-stop", "--head", host, "--port", str(port), "--timeout", str(timeout),
         "--interval", "0.2", "--unit", "vllm-station.service"]
    )  # fmt: skip
    return code, time.monotonic() - t0


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.timing
def test_worker_waits_until_the_head_stops(
    fake_systemctl: Path, host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    head = Listener(host)
    closer = threading.Timer(1.0, head.close)
    closer.start()
    try:
        code, took = wait_head_stop(host, head.port, timeout=10)
    finally:
        closer.join()
    err = capsys.readouterr().err
    assert code == 0, err
    assert 0.9 <= took < 5, took
    assert f"waiting for the head {host} to stop first: port {head.port} still accepts connections" in err
    assert (
        f"vllm-station pair: head {host} is down; stopping the worker (port {head.port}: connection refused)"
        in err
    )
    calls = (fake_systemctl / "calls").read_text().splitlines()
    assert calls == ["show --property=ActiveState -- vllm-station.service"]


@pytest.mark.timing
def test_worker_stops_anyway_at_the_bound(fake_systemctl: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head = Listener(HEAD)
    try:
        code, took = wait_head_stop(HEAD, head.port, timeout=1)
    finally:
        head.close()
    err = capsys.readouterr().err
    assert code == 0, err
    assert 0.9 <= took < 4, took
    assert (
        f"vllm-station pair: the head {HEAD} still listens on port {head.port} after 1 s; stopping the "
        f"worker anyway (stop the head first: systemctl stop vllm-station on {HEAD})"
    ) in err


@pytest.mark.timing
def test_a_timeout_of_zero_probes_once(fake_systemctl: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head = Listener(HEAD)
    try:
        code, took = wait_head_stop(HEAD, head.port, timeout=0)
    finally:
        head.close()
    assert code == 0 and took < 2
    err = capsys.readouterr().err
    assert "still listens" in err and "waiting for the head" not in err


@pytest.mark.parametrize("state", ["inactive", "failed", "deactivating", ""])
@pytest.mark.timing
def test_a_worker_that_is_not_active_does_not_wait(
    fake_systemctl: Path, state: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (fake_systemctl / "state").write_text(state)
    head = Listener(HEAD)
    try:
        code, took = wait_head_stop(HEAD, head.port, timeout=10)
    finally:
        head.close()
    assert code == 0 and took < 2
    err = capsys.readouterr().err
    assert (
        f"vllm-station.service is {state or 'in no state'}, not active: nothing to protect after a crash"
        in err
    )


def test_systemctl_failing_is_said_and_the_wait_still_runs(
    fake_systemctl: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (fake_systemctl / "state").write_text("fail")
    head = Listener(HEAD)
    try:
        code, _ = wait_head_stop(HEAD, head.port, timeout=0.6)
    finally:
        head.close()
    err = capsys.readouterr().err
    assert code == 0
    assert (
        f"cannot tell whether vllm-station.service is active (`{fake_systemctl / 'systemctl'} show "
        "--property=ActiveState -- vllm-station.service` exited 1: Failed to connect to bus: No such file or "
        f"directory); waiting for the head {HEAD} anyway"
    ) in err
    assert "still listens on port" in err  # it did wait, to the bound


def test_no_systemctl_is_said_and_the_wait_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    code, _ = wait_head_stop(HEAD, free_port(HEAD), timeout=5)
    err = capsys.readouterr().err
    assert code == 0
    assert "cannot tell whether vllm-station.service is active (systemctl not found on PATH)" in err
    assert f"head {HEAD} is down" in err


def test_wait_head_stop_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["pair", "wait-head-stop", "--head", HEAD, "--interval", "1", "--unit", "u"]
    assert main([*base, "--port", "0", "--timeout", "1"]) == 2
    assert main([*base, "--port", "29500", "--timeout", "-1"]) == 2
    assert "--timeout: must be a number of seconds from 0 to" in capsys.readouterr().err
    assert main(["pair"]) == 2


# --- the shared polling loop ----------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_poll_counts_probe_time_against_the_interval_and_stops_at_the_deadline() -> None:
    clock = FakeClock()
    ticks: list[Tick] = []
    progress: list[int] = []

    def probe(tick: Tick) -> str | None:
        ticks.append(tick)
        clock.now += 1.0  # each probe takes 1 s
        return None

    polled = poll(
        probe, timeout_s=10, interval_s=3, progress=lambda t: progress.append(t.attempt), clock=clock,
        sleep=clock.sleep,
    )  # fmt: skip
    assert polled.value is None and polled.attempts == 4 and polled.elapsed_s == 10
    assert [t.elapsed_s for t in ticks] == [0, 3, 6, 9] and [t.left_s for t in ticks] == [10, 7, 4, 1]
    assert clock.sleeps == [2, 2, 2]  # 3 s interval minus the 1 s probe; none after the last try
    assert progress == [1, 2, 3]


def test_poll_returns_the_first_value_and_zero_timeout_is_one_try() -> None:
    clock = FakeClock()
    answers = iter([None, None, "up"])
    polled = poll(lambda _t: next(answers), timeout_s=60, interval_s=5, clock=clock, sleep=clock.sleep)
    assert polled.value == "up" and polled.attempts == 3 and clock.sleeps == [5, 5]
    once = poll(lambda _t: None, timeout_s=0, interval_s=5, clock=clock, sleep=clock.sleep)
    assert once.attempts == 1 and once.value is None


def test_poll_latest_keeps_the_last_reading_final_or_not() -> None:
    """nccl-check's and weights-check's --wait: re-read until final; at the deadline the last reading,
    marked timed out; no wait: one reading, whatever it is."""
    clock = FakeClock()
    readings = iter(["a", "b", "done", "never"])
    latest = poll_latest(
        lambda: next(readings), final=lambda r: r == "done", wait_s=60, interval_s=5, clock=clock,
        sleep=clock.sleep,
    )  # fmt: skip
    assert (latest.value, latest.timed_out, latest.attempts, clock.sleeps) == ("done", False, 3, [5, 5])
    clock = FakeClock()

    def never(wait_s: float | None) -> Latest[str]:
        return poll_latest(
            lambda: "a", final=lambda _r: False, wait_s=wait_s, interval_s=5, clock=clock, sleep=clock.sleep
        )

    cut = never(12)
    assert (cut.value, cut.timed_out, cut.attempts, cut.wait_s, cut.elapsed_s) == ("a", True, 4, 12, 12)
    assert still_pending("no line yet", cut.wait_s) == "still pending after 12 s: no line yet"
    once = never(None)
    assert (once.value, once.timed_out, once.attempts) == ("a", False, 1)
    zero = never(0)
    assert (zero.timed_out, zero.attempts, zero.wait_s) == (True, 1, 0)


@pytest.mark.parametrize(
    ("timeout", "interval"), [(-1, 1), (math.nan, 1), (math.inf, 1), (1, 0), (1, math.nan)]
)
def test_poll_refuses_bad_bounds(timeout: float, interval: float) -> None:
    with pytest.raises(UsageError):
        poll(lambda _t: None, timeout_s=timeout, interval_s=interval)
