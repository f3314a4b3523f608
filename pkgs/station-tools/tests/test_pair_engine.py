"""The worker engine's state on its beacon, and the head's start refusing a worker in an old session.

Real TCP connections on 127.0.0.x and ::1 stand for the engine's connection to the head's rendezvous
port (torch.distributed's TCP store that a headless vLLM worker dials and keeps for its session): the
kernel's own connection table (`/proc/self/net/tcp*`) is what the beacon reads. The beacon runs as a
real subprocess; `station pair wait-worker` asks it over HTTP.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from simserver import SimServer
from test_pair_cmd import HEAD, HOSTS, STATION, WORKER, Beacon, beacons, free_port, start_beacon, wait_worker

from vllm_station import textfile
from vllm_station.cli import main
from vllm_station.commands.pair.beacon import EngineWatch
from vllm_station.host.tcp import connections_to, parse_table
from vllm_station.sim.config import SimConfig

pytestmark = pytest.mark.timeout(60)
__all__ = ["beacons"]  # the fixture, used by name


class Session:
    """The head's rendezvous port (a listener on `head`) and the worker engine's connection to it."""

    def __init__(self, head: str, worker: str) -> None:
        self.head, self.worker = head, worker
        family = socket.AF_INET6 if ":" in head else socket.AF_INET
        self.server = socket.create_server((head, 0), family=family)
        self.port = int(self.server.getsockname()[1])
        self.engine: socket.socket | None = None
        self.accepted: socket.socket | None = None

    def join(self) -> None:
        self.engine = socket.create_connection(
            (self.head, self.port), timeout=5, source_address=(self.worker, 0)
        )
        self.accepted, _ = self.server.accept()

    def head_dies(self) -> None:
        """The head's process ends: the kernel closes its sockets (a FIN to a worker that does not read)."""
        assert self.accepted is not None
        self.accepted.close()
        self.server.close()

    def close(self) -> None:
        for s in (self.engine, self.accepted, self.server):
            if s is not None:
                s.close()


@pytest.fixture
def session(request: pytest.FixtureRequest) -> Iterator[Session]:
    head = getattr(request, "param", HEAD)
    s = Session(head, WORKER if head == HEAD else head)
    yield s
    s.close()


def _settle(watch: EngineWatch, state: str, timeout: float = 10.0) -> None:
    """The kernel moves a socket to CLOSE_WAIT when the peer's FIN arrives: at once on loopback, but read
    again until it shows (a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        watch.sample()
        if watch.state == state or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert watch.state == state, watch.report()


@pytest.mark.parametrize("session", HOSTS, indirect=True)
def test_the_watch_follows_a_real_session(session: Session) -> None:
    watch = EngineWatch(session.head, session.port)
    watch.sample()
    assert watch.state == "waiting" and "ready for a head" in watch.detail
    session.join()
    assert connections_to(session.head, session.port) == ["ESTABLISHED"]
    watch.sample()
    assert watch.state == "joined" and "in a session with the head" in watch.detail
    joined_since = watch.since
    session.head_dies()
    _settle(watch, "orphaned")
    assert "CLOSE_WAIT" in watch.detail and "never joins another head" in watch.detail
    assert watch.since >= joined_since
    # a beacon that starts now (no memory of the session) still sees the head's closed end
    late = EngineWatch(session.head, session.port)
    _settle(late, "orphaned")
    # the engine closes its end too: the connection is gone, the watch remembers the session
    assert session.engine is not None
    session.engine.close()
    session.engine = None
    watch.sample()
    assert watch.state == "orphaned", watch.report()
    fresh = EngineWatch(session.head, session.port)
    fresh.sample()
    assert fresh.state == "waiting", "a new engine (a restarted worker) waits for a head again"


def test_the_table_parser_reads_mapped_and_native_addresses(tmp_path: Path) -> None:
    """Lines as the kernel prints them on a little-endian host: 127.0.0.2:40000 → 127.0.0.1:29500, and
    the same over an IPv4-mapped IPv6 socket; a malformed line is skipped."""
    (tmp_path / "tcp").write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue\n"
        "   0: 0200007F:9C40 0100007F:733C 01 00000000:00000000\n"
        "   1: garbage\n"
    )
    (tmp_path / "tcp6").write_text(
        "  sl  local_address                         remote_address                        st\n"
        "   0: 0000000000000000FFFF00000200007F:9C41 0000000000000000FFFF00000100007F:733C 08\n"
    )
    rows = parse_table((tmp_path / "tcp").read_text())
    assert [(str(r[0]), r[1], str(r[2]), r[3], r[4]) for r in rows] == [
        ("127.0.0.2", 40000, "127.0.0.1", 29500, "ESTABLISHED")
    ]
    assert connections_to("127.0.0.1", 29500, proc=tmp_path) == ["ESTABLISHED", "CLOSE_WAIT"]
    assert connections_to("127.0.0.1", 29501, proc=tmp_path) == []


def test_an_unreadable_table_is_unknown_not_waiting(tmp_path: Path) -> None:
    watch = EngineWatch(HEAD, 29500, read=lambda a, p: connections_to(a, p, proc=tmp_path / "none"))
    watch.sample()
    assert watch.state == "unknown" and "cannot read this host's TCP connections" in watch.detail


def _ready(b: Beacon) -> httpx.Response:
    return httpx.get(b.url(), timeout=5)


def test_the_worker_beacon_reports_its_engine_and_the_heads_start_refuses_an_old_session(
    beacons: list[Beacon], session: Session, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b = start_beacon(beacons, tmp_path, WORKER, extra=("--head", HEAD, "--master-port", str(session.port)))
    b.wait_up()
    r = _ready(b)
    assert r.status_code == 200 and r.json()["engine"]["state"] == "waiting", r.text
    assert {"role": "worker", "rank": 1, "address": WORKER}.items() <= r.json().items()
    code, _ = wait_worker(b.url(), timeout=30)
    err = capsys.readouterr().err
    assert code == 0 and f"worker {WORKER} is up (rank 1), its engine waits for a head" in err, err

    # in a session, while this head's engine is not running: an earlier head's
    session.join()
    r = _ready(b)
    assert r.status_code == 200 and r.json()["engine"]["state"] == "joined", r.text
    code, took = wait_worker(b.url(), timeout=30)
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"the worker {WORKER} is up, but its engine is not ready for a new head: engine joined" in err
    assert "the session is an earlier head's" in err
    assert took < 20, "refused at the first answer, not at the deadline"

    # the head dies: the worker's engine holds a dead session
    session.head_dies()
    deadline = time.monotonic() + 10
    while (r := _ready(b)).status_code != 503 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert r.status_code == 503 and r.json()["engine"]["state"] == "orphaned", r.text
    code, took = wait_worker(b.url(), timeout=30)
    err = capsys.readouterr().err
    assert code == 1, err
    assert "engine orphaned since" in err and "Its session ended" in err
    assert f"Restart the worker first (on station {WORKER}: systemctl restart vllm-station" in err
    assert took < 20
    assert b.stop() == 0
    log = b.log.read_text()
    assert f"the engine's state from its connection to {HEAD}:{session.port}" in log
    assert "engine joined:" in log and "engine orphaned:" in log, log
    assert "Traceback" not in log


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--role", "worker", "--rank", "1", "--head", HEAD], "--head and --master-port go together"),
        (["--role", "worker", "--rank", "1", "--master-port", "1"], "--head and --master-port go together"),
        (["--role", "head", "--rank", "0", "--head", HEAD, "--master-port", "1"], "only with --role worker"),
    ],
)
def test_engine_watch_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pair", "beacon", "--bind", WORKER, "--port", str(free_port(WORKER)), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


# --- the restart in the recipe's order: the head's watchdog and the worker's rejoin ----------------


def _systemctl(tmp: Path, side: str, calls: Path) -> Path:
    """A stand-in for one station's systemctl: records `SIDE ARGS` in the shared `calls` file; `show`
    answers the state in `<dir>/state`, which `stop` and `start` set (the unit's own work is the test's)."""
    d = tmp / side
    d.mkdir()
    (d / "state").write_text("active")
    exe = d / "systemctl"
    exe.write_text(
        f'#!/bin/sh\necho "{side} $*" >> {calls}\n'
        'case "$1" in\n'
        "  show) printf 'ActiveState=%s\\nSubState=x\\nResult=success\\nNRestarts=0\\n' "
        f"\"$(cat {d}/state)\" ;;\n"
        f"  stop) echo inactive > {d}/state ;;\n"
        f"  start|restart) echo active > {d}/state ;;\n"
        "esac\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


class Pair:
    """The head's engine (a wedged simulator), its rendezvous port with the worker's engine joined, the
    worker's real beacon and (optionally) its real rejoin loop. A thread plays what systemd and the
    engines do when the stand-in systemctls are called: the head's stop closes the head's session; the
    worker's restart replaces its engine (a fresh beacon, no connection)."""

    def __init__(self, tmp: Path, beacons: list[Beacon]) -> None:
        self.tmp, self.beacons = tmp, beacons
        self.calls = tmp / "calls"
        self.calls.touch()
        self.head_ctl = _systemctl(tmp, "A", self.calls)
        self.worker_ctl = _systemctl(tmp, "B", self.calls)
        self.session = Session(HEAD, WORKER)
        self.session.join()
        self.beacon_port = free_port(WORKER)
        self.beacon = self._beacon()
        self.events: list[str] = []
        self.errors: list[str] = []  # what went wrong in the thread that plays systemd (shown by `outcome`)
        self.rejoin: subprocess.Popen[bytes] | None = None
        self.worker_back_after_head_stop = False  # the worker rebooting: back once the head is down
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play, daemon=True)
        self._thread.start()

    def _beacon(self) -> Beacon:
        b = start_beacon(self.beacons, self.tmp, WORKER, port=self.beacon_port,
                         extra=("--head", HEAD, "--master-port", str(self.session.port)))  # fmt: skip
        b.wait_up()
        return b

    def worker_dies(self) -> None:
        """Station B goes away (a crash of the machine): nothing answers on its beacon."""
        self.beacon.stop()
        if self.session.engine is not None:
            self.session.engine.close()
            self.session.engine = None
        self.worker_back_after_head_stop = True

    def start_rejoin(self) -> None:
        (self.tmp / "metrics").mkdir()
        argv = [*STATION, "pair", "rejoin", "--beacon", self.beacon.url(), "--head", HEAD,
                "--master-port", str(self.session.port), "--unit", "vllm-station.service",
                "--systemctl", str(self.worker_ctl), "--interval", "0.3", "--verdicts", "2",
                "--textfile-dir", str(self.tmp / "metrics")]  # fmt: skip
        with (self.tmp / "rejoin.log").open("wb") as log:
            self.rejoin = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _play(self) -> None:
        try:
            self._play_calls()
        except Exception as e:  # a stand-in's failure: reported by `outcome`
            self.errors.append(f"the thread playing systemd failed: {e!r}")

    def _play_calls(self) -> None:
        seen = 0
        while not self._stop.is_set():
            lines = [c for c in self.calls.read_text().splitlines() if " show " not in f"{c} "]
            for call in lines[seen:]:
                if call.startswith("A stop"):
                    self.session.head_dies()
                    self.events.append("head down")
                    if self.worker_back_after_head_stop:
                        # the event first: the watchdog may see the new beacon (and finish) before
                        # `_beacon()` returns here
                        self.events.append("worker back")
                        self.beacon = self._beacon()
                elif call.startswith("B restart"):
                    self.beacon.stop()
                    if self.session.engine is not None:
                        self.session.engine.close()
                        self.session.engine = None
                    self.events.append("worker restarted")  # before the new beacon can be seen (above)
                    self.beacon = self._beacon()
            seen = len(lines)
            time.sleep(0.05)

    def outcome(self, err: str) -> str:
        """What a failed assertion shows: the calls, the events, the thread's errors and the log."""
        return "\n".join([f"calls: {self.order()}", f"events: {self.events}", *self.errors, err])

    def order(self) -> list[str]:
        return [c for c in self.calls.read_text().splitlines() if c.split()[1] != "show"]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self.rejoin is not None and self.rejoin.poll() is None:
            os.killpg(self.rejoin.pid, signal.SIGTERM)
            self.rejoin.wait(timeout=10)
        self.session.close()


@pytest.fixture
def pair(tmp_path: Path, beacons: list[Beacon]) -> Iterator[Pair]:
    p = Pair(tmp_path, beacons)
    yield p
    p.close()


def _head_watchdog(pair: Pair, base_url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(
        ["watchdog", "--base-url", base_url, "--unit", "vllm-station.service", "--systemctl",
         str(pair.head_ctl), "--interval", "0.5", "--probe-timeout", "0.4", "--wedge-verdicts", "2",
         "--cycles", "3", "--pair-worker", pair.beacon.url(), "--pair-wait", "120"]
    )  # fmt: skip
    return code, capsys.readouterr().err


@pytest.mark.timeout(240)
def test_a_wedged_head_restarts_the_pair_in_the_recipes_order(
    pair: Pair, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head wedges with the worker in its session: the head's watchdog stops the head; the worker's
    rejoin, seeing its session over and the head's port closed, restarts the worker; only when the
    worker's fresh engine waits for a head does the watchdog start the head."""
    monkeypatch.delenv("STATION_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    pair.start_rejoin()
    with SimServer(SimConfig(model="sim", ttft=0.01, itl=0.002, engine="wedge")) as sim:
        code, err = _head_watchdog(pair, sim.base_url, capsys)
    assert code == 0, pair.outcome(err)
    assert pair.order() == [
        "A stop --no-block vllm-station.service",
        "B restart --no-block vllm-station.service",
        "A start --no-block vllm-station.service",
    ], (pair.order(), err, (pair.tmp / "rejoin.log").read_text())
    assert pair.events == ["head down", "worker restarted"]
    assert "the head's wedge: the worker's engine is in the session" in err
    assert "the head is down; the worker's engine waits for a head; systemctl start --no-block" in err
    rejoin = (pair.tmp / "rejoin.log").read_text()
    assert "the head stops first" in rejoin, "the worker held while the head listened"
    assert "restarting vllm-station.service so that its engine can join the next head: engine orphaned" in (
        rejoin
    )
    exported = textfile.read(pair.tmp / "metrics" / "station-pair-rejoin.prom")
    assert exported["station_pair_rejoin_restarts_total"] == 1, exported


@pytest.mark.timeout(240)
def test_a_wedge_caused_by_a_dead_worker_is_named_and_the_head_starts_after_the_worker(
    pair: Pair, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Station B goes away mid-session; the head's engine hangs (a wedge). The watchdog names the worker
    as the cause, stops the head, and starts it only once the worker's beacon is back, waiting."""
    monkeypatch.delenv("STATION_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    pair.worker_dies()
    with SimServer(SimConfig(model="sim", ttft=0.01, itl=0.002, engine="wedge")) as sim:
        code, err = _head_watchdog(pair, sim.base_url, capsys)
    assert code == 0, pair.outcome(err)
    assert pair.order() == [
        "A stop --no-block vllm-station.service",
        "A start --no-block vllm-station.service",
    ], pair.outcome(err)
    assert pair.events == ["head down", "worker back"]
    assert "a wedge caused by the worker: the worker's beacon" in err
    assert "does not answer as the worker (nothing answered: connection refused)" in err
    assert "the worker's engine waits for a head; systemctl start --no-block vllm-station.service" in err


def test_pair_worker_needs_a_unit(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["watchdog", "--base-url", "http://127.0.0.1:9", "--pair-worker", "http://127.0.0.2:9/ready"])
    assert code == 2 and "--pair-worker restarts the pair's head: it needs --unit" in capsys.readouterr().err
