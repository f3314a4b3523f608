"""Mutants of `vllm_station.commands.watchdog` (scripts/bench-mutation): the wedge count — reset by any other
verdict in between (an interrupted wedge), a restart exactly at `--wedge-verdicts` and not one look before,
the count anew after a restart — on scripted looks (the looks' evidence is what test_watchdog.py takes from
real servers; here the decision alone, look by look), and the detection bound's formula exactly."""

from __future__ import annotations

import argparse
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from vllm_station.api.args import endpoint_from_args
from vllm_station.commands.watchdog import Look, Options, PairRestart, Systemd, UnitState, Watchdog, _say
from vllm_station.errors import StationError, UsageError


def look(kind: str, n: int, tokens: float) -> Look:
    """One look's evidence: `wedged` (the probe timed out), `busy` (so did it, but the counters moved:
    `tokens` is higher than before), `ok`, `refused` (nothing listens)."""
    signature = {"vllm:generation_tokens_total": tokens}
    if kind == "ok":
        return Look(float(n), True, 0.01, None, None, signature, {})
    failure = "refused" if kind == "refused" else "transport"
    return Look(float(n), False, 0.4, "timed out", failure, signature, {})


class Scripted(Watchdog):
    """The watchdog's own decisions on looks given in order (no server; the restart is recorded)."""

    def __init__(self, kinds: list[str], wedge_verdicts: int) -> None:
        endpoint = endpoint_from_args(argparse.Namespace(base_url="http://127.0.0.1:9", api_key_file=None,
                                                         ca_file=None))  # fmt: skip
        self.restarted: list[int] = []
        self.lines: list[str] = []
        super().__init__(Options(interval_s=10.0, probe_timeout_s=5.0, wedge_verdicts=wedge_verdicts),
                         endpoint, restart=self._restart_unit, say=self.lines.append)  # type: ignore[arg-type]
        self.kinds: Iterator[tuple[int, str]] = enumerate(["wedged", *kinds])  # the first look: no baseline
        self.n = 0
        self.tokens = 5.0

    def _restart_unit(self) -> str:
        self.restarted.append(self.n)
        return "restarted"

    def look(self) -> Look:
        self.n, kind = next(self.kinds)
        if kind == "busy":
            self.tokens += 1
        return look(kind, self.n, self.tokens)


def verdicts(kinds: list[str], wedge_verdicts: int) -> tuple[list[tuple[str, int]], list[int]]:
    dog = Scripted(kinds, wedge_verdicts)
    try:
        seen = [(v.verdict, v.streak) for v in (dog.step() for _ in range(len(kinds) + 1))]
    finally:
        dog.close()
    return seen[1:], dog.restarted


def test_an_ok_look_between_wedged_looks_starts_the_count_anew() -> None:
    seen, restarted = verdicts(["wedged", "wedged", "ok", "wedged", "wedged", "wedged"], 3)
    assert seen == [("wedged", 1), ("wedged", 2), ("ok", 0), ("wedged", 1), ("wedged", 2), ("wedged", 3)]
    assert restarted == [6]  # the third wedged look in a row, not the fourth wedged look in all


def test_a_busy_look_between_wedged_looks_starts_the_count_anew() -> None:
    seen, restarted = verdicts(["wedged", "wedged", "busy", "wedged", "wedged"], 3)
    assert seen == [("wedged", 1), ("wedged", 2), ("busy", 0), ("wedged", 1), ("wedged", 2)]
    assert restarted == []


def test_a_down_look_between_wedged_looks_starts_the_count_anew() -> None:
    seen, restarted = verdicts(["wedged", "refused", "wedged", "wedged"], 2)
    assert seen == [("wedged", 1), ("down", 0), ("no-baseline", 0), ("wedged", 1)]
    assert restarted == []


@pytest.mark.parametrize("n", [1, 2, 4])
def test_the_restart_comes_exactly_at_n_wedged_looks(n: int) -> None:
    seen, restarted = verdicts(["wedged"] * (n + 1), n)
    assert [s for _, s in seen][:n] == list(range(1, n + 1))
    assert restarted == [n]  # at the n-th, never before
    assert seen[n] == ("no-baseline", 0)  # after the restart: a new process, a new baseline


def test_the_restart_is_said_with_the_count_and_the_time() -> None:
    dog = Scripted(["wedged", "wedged"], 2)
    try:
        for _ in range(3):
            dog.step()
    finally:
        dog.close()
    said = [line for line in dog.lines if line.startswith("restarting")]
    assert len(said) == 1
    assert said[0].startswith(
        "restarting the server (restarted): 2 consecutive wedge verdicts over 20 s (each: the 1-token probe "
        "failed and /metrics showed no progress); last: 1-token probe failed after 0.4 s (timed out); no "
        "progress in /metrics since the last look"
    )
    assert [line.split(":")[0] for line in dog.lines if line.startswith("verdict wedged")] == [
        "verdict wedged (1/2)",
        "verdict wedged (2/2)",
    ]


@pytest.mark.parametrize(
    ("interval", "timeout", "n", "bound"),
    [(30.0, 20.0, 3, 110.0), (10.0, 10.0, 1, 20.0), (5.0, 0.5, 4, 20.5)],
)
def test_detection_bound_exactly(interval: float, timeout: float, n: int, bound: float) -> None:
    opts = Options(interval_s=interval, probe_timeout_s=timeout, wedge_verdicts=n)
    assert opts.detection_bound_s == bound


def test_probe_timeout_exactly_the_interval_is_allowed_one_more_is_not() -> None:
    Options(interval_s=10.0, probe_timeout_s=10.0)
    with pytest.raises(UsageError) as err:
        Options(interval_s=10.0, probe_timeout_s=10.5)
    assert str(err.value) == (
        "--probe-timeout (10.5 s) must not exceed --interval (10 s): one look must end before the next begins"
    )
    Options(wedge_verdicts=1)
    with pytest.raises(UsageError) as err:
        Options(wedge_verdicts=0)
    assert str(err.value) == "--wedge-verdicts must be 1 or more, got 0"


# ---- the pair head's restart in order (PairRestart) and the unit's stop / start -------------------------
# A real HTTP beacon stand-in (the worker's /ready) and a systemctl stand-in that answers `show` with what
# a state file holds; the wait's sleep is scripted: it advances a clock and may change what either says.


class Beacon:
    """The worker beacon's /ready: answers `self.body` (None: HTTP 404), or nothing once stopped."""

    def __init__(self) -> None:
        self.body: dict[str, object] | None = None
        beacon = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                data = b"" if beacon.body is None else json.dumps(beacon.body).encode()
                self.send_response(404 if beacon.body is None else 200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/ready"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def engine(self, state: str, detail: str = "") -> None:
        self.body = {"role": "worker", "rank": 1, "address": "10.0.0.2",
                     "engine": {"state": state, "since": 1.0, "detail": detail}}  # fmt: skip

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def beacon() -> Iterator[Beacon]:
    b = Beacon()
    yield b
    b.close()


def systemctl(tmp_path: Path, active: str) -> tuple[Path, Path, Path]:
    """(the stand-in, its state file, its record of calls): `show` prints ActiveState from the state file."""
    script, state, calls = tmp_path / "systemctl", tmp_path / "active", tmp_path / "calls"
    state.write_text(active)
    script.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        f'case "$1" in show) echo "ActiveState=$(cat {state})"; echo SubState=x; echo Result=success;'
        " echo NRestarts=0 ;; esac\n"
    )
    script.chmod(0o755)
    return script, state, calls


class Pair:
    def __init__(self, tmp_path: Path, beacon: Beacon, url: str, wait_s: float, active: str = "active",
                 then: Callable[[int], None] | None = None) -> None:  # fmt: skip
        script, self.state, self.calls = systemctl(tmp_path, active)
        self.now, self.sleeps, self.said = 100.0, [], []  # type: ignore[var-annotated]
        self.then = then or (lambda n: None)
        unit = Systemd(str(script), "vllm-station.service")
        self.restart = PairRestart(unit, url, wait_s, self.said.append, poll_s=2.0, clock=lambda: self.now,
                                   sleep=self.sleep)  # fmt: skip

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s
        self.then(len(self.sleeps))

    def __call__(self) -> str:
        try:
            return self.restart()
        finally:
            self.restart.close()


def test_the_heads_own_wedge_restarts_the_pair_in_order(beacon: Beacon, tmp_path: Path) -> None:
    beacon.engine("joined", "session 7")
    pair: Pair

    def then(n: int) -> None:  # the head goes down after one poll, the worker comes back after two more
        if n == 1:
            pair.state.write_text("inactive")
        if n == 2:
            beacon.engine("orphaned", "head gone")
        if n == 3:
            beacon.engine("waiting", "")

    pair = Pair(tmp_path, beacon, beacon.url, 60.0, then=then)
    assert pair() == (
        "the head's wedge; systemctl stop --no-block vllm-station.service; the head is down; the worker's "
        "engine waits for a head; systemctl start --no-block vllm-station.service"
    )
    assert pair.said == [
        "the head's wedge: the worker's engine is in the session (session 7): the head's own wedge; "
        "restarting the pair in order: stop the head, the worker restarts, then the head starts"
    ]
    assert pair.sleeps == [2.0, 2.0, 2.0]
    assert pair.calls.read_text().splitlines() == [
        "stop --no-block vllm-station.service",
        "show --property=ActiveState,SubState,Result,NRestarts -- vllm-station.service",
        "show --property=ActiveState,SubState,Result,NRestarts -- vllm-station.service",
        "start --no-block vllm-station.service",
    ]


def test_a_failed_head_is_down_and_an_orphaned_worker_is_the_cause(beacon: Beacon, tmp_path: Path) -> None:
    beacon.engine("orphaned", "the head left")
    pair = Pair(tmp_path, beacon, beacon.url, 60.0, active="failed",
                then=lambda n: beacon.engine("waiting"))  # fmt: skip
    assert pair() == (
        "a wedge caused by the worker; systemctl stop --no-block vllm-station.service; the head is down; the "
        "worker's engine waits for a head; systemctl start --no-block vllm-station.service"
    )
    assert pair.said[0].startswith(
        "a wedge caused by the worker: the worker's engine is orphaned, not in the head's session (the head "
        "left); restarting the pair in order"
    )
    assert pair.sleeps == [2.0]


def test_an_engine_state_the_beacon_does_not_report_is_a_wedge_of_unknown_cause(
    beacon: Beacon, tmp_path: Path
) -> None:
    beacon.body = {"role": "worker", "rank": 1, "address": "10.0.0.2"}  # no engine: waiting counts as ready
    pair = Pair(tmp_path, beacon, beacon.url, 60.0, active="inactive")
    assert pair() == (
        "a wedge; systemctl stop --no-block vllm-station.service; the head is down; the worker's engine "
        "waits for a head; systemctl start --no-block vllm-station.service"
    )
    assert pair.said[0].startswith(
        "a wedge: the worker is up; its beacon reports no engine state (rank 1); restarting the pair in order"
    )
    assert pair.sleeps == []


def test_the_waits_end_at_their_deadline_and_the_head_starts_anyway(beacon: Beacon, tmp_path: Path) -> None:
    """Neither the head's stop nor the worker's return within --pair-wait (5 s, polled every 2 s: looks at
    0, 2, 4 and 6 s, the last past the deadline): each wait says what it saw last, the head starts anyway."""
    beacon.engine("joined", "s")
    pair = Pair(tmp_path, beacon, beacon.url, 5.0, active="deactivating")
    assert pair() == (
        "the head's wedge; systemctl stop --no-block vllm-station.service; the head is not down after 5 s "
        "(the head's unit is deactivating); the worker did not come back waiting for a head within 5 s (the "
        "worker's engine: joined); starting the head anyway: its start names what the worker is doing; "
        "systemctl start --no-block vllm-station.service"
    )
    assert pair.sleeps == [2.0] * 6


def test_a_silent_beacon_is_the_workers_cause(tmp_path: Path) -> None:
    silent = Beacon()
    url = silent.url
    silent.close()  # nothing listens on its port now
    pair = Pair(tmp_path, silent, url, 1.0, active="inactive")
    got = pair()
    assert got.startswith(
        "a wedge caused by the worker; systemctl stop --no-block vllm-station.service; the head is down; the "
        "worker did not come back waiting for a head within 1 s (the worker's engine: nothing answered"
    )
    assert pair.said[0].startswith(
        f"a wedge caused by the worker: the worker's beacon {url} does not answer as the worker (nothing "
        "answered"
    )
    assert "): the worker is down, rebooting or stopped; restarting the pair in order" in pair.said[0]
    assert pair.sleeps == [2.0]


def test_a_failing_stop_ends_the_pair_restart(beacon: Beacon, tmp_path: Path) -> None:
    beacon.engine("waiting")
    pair = Pair(tmp_path, beacon, beacon.url, 1.0)
    pair.restart.systemd.systemctl = str(tmp_path / "missing-systemctl")
    with pytest.raises(StationError) as err:  # the stop itself fails: nothing after it runs
        pair()
    missing = tmp_path / "missing-systemctl"
    assert str(err.value).startswith(f"{missing} stop --no-block vllm-station.service: ")
    assert pair.sleeps == []


def test_systemd_stop_and_start_with_a_container_to_kill(tmp_path: Path) -> None:
    script, _, calls = systemctl(tmp_path, "active")
    runtime = tmp_path / "docker"
    runtime.write_text(f'#!/bin/sh\necho "docker $@" >> {calls}\n')
    runtime.chmod(0o755)
    unit = Systemd(str(script), "vllm-station.service", str(runtime), "vllm-station")
    assert unit.stop() == (
        f"systemctl stop --no-block vllm-station.service, then {runtime} kill vllm-station (a wedged engine "
        "has nothing to drain)"
    )
    assert unit.start() == "systemctl start --no-block vllm-station.service"
    assert calls.read_text().splitlines() == [
        "stop --no-block vllm-station.service",
        "docker kill vllm-station",
        "start --no-block vllm-station.service",
    ]
    failing = Systemd(str(tmp_path / "false-systemctl"), "u.service")
    (tmp_path / "false-systemctl").write_text("#!/bin/sh\necho no such unit >&2\nexit 5\n")
    (tmp_path / "false-systemctl").chmod(0o755)
    with pytest.raises(StationError) as err:
        failing.start()
    false = tmp_path / "false-systemctl"
    assert str(err.value) == f"{false} start --no-block u.service exited 5: no such unit"


def test_say_writes_one_line_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    _say("a look")
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", "station watchdog: a look\n")


def test_a_container_kill_that_fails_is_said_and_the_restart_stands(tmp_path: Path) -> None:
    """The kill only ends the graceful stop's wait: a runtime that fails (its stderr cut at 200
    characters) or is missing is said after what systemd was asked, never raised."""
    script, _, calls = systemctl(tmp_path, "active")
    runtime = tmp_path / "docker"
    runtime.write_text("#!/bin/sh\nprintf '  %0250d  ' 0 >&2\nexit 3\n")
    runtime.chmod(0o755)
    got = Systemd(str(script), "u.service", str(runtime), "c1").restart()
    assert got == (
        f"systemctl restart --no-block u.service; {runtime} kill c1 exited 3: {'0' * 200} (the stop waits "
        "for the unit's own timeouts)"
    )
    missing = tmp_path / "no-docker"
    got = Systemd(str(script), "u.service", str(missing), "c1").stop()
    assert got == (
        f"systemctl stop --no-block u.service; {missing} kill c1: [Errno 2] No such file or directory: "
        f"'{missing}' (the stop waits for the unit's own timeouts)"
    )
    # a runtime without a container (or the reverse) kills nothing
    alone = Systemd(str(script), "u.service", str(runtime), None)
    assert alone.restart() == "systemctl restart --no-block u.service"
    assert Systemd(str(script), "u.service", None, "c1").stop() == "systemctl stop --no-block u.service"
    assert calls.read_text().splitlines() == [
        "restart --no-block u.service", "stop --no-block u.service", "restart --no-block u.service",
        "stop --no-block u.service",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("show", "state"),
    [
        ("ActiveState=failed\nSubState=failed\nResult=start-limit-hit\nno equals sign here\n",
         UnitState("failed", "failed", "start-limit-hit", 0)),
        ("ActiveState=active\nNRestarts=x\nResult=a=b\n", UnitState("active", "?", "a=b", 0)),
        ("SubState=running\nNRestarts=12\n", UnitState("?", "running", "?", 12)),
    ],
)  # fmt: skip
def test_the_units_state_from_systemctl_show(tmp_path: Path, show: str, state: UnitState) -> None:
    script, calls = tmp_path / "systemctl", tmp_path / "calls"
    (tmp_path / "out").write_text(show)
    script.write_text(f'#!/bin/sh\necho "$@" >> {calls}\ncat {tmp_path / "out"}\n')
    script.chmod(0o755)
    assert Systemd(str(script), "vllm-station.service").state() == state
    show = "show --property=ActiveState,SubState,Result,NRestarts -- vllm-station.service\n"
    assert calls.read_text() == show


def test_an_engine_state_unknown_is_a_wedge_of_unknown_cause_and_counts_as_waiting(
    beacon: Beacon, tmp_path: Path
) -> None:
    beacon.engine("unknown", "starting")
    pair = Pair(tmp_path, beacon, beacon.url, 60.0, active="inactive")
    assert pair() == (
        "a wedge; systemctl stop --no-block vllm-station.service; the head is down; the worker's engine "
        "waits for a head; systemctl start --no-block vllm-station.service"
    )
    assert pair.said[0].startswith("a wedge: the worker is up; its beacon reports no engine state (rank 1);")
    assert pair.sleeps == []


def test_the_wait_ends_at_a_look_exactly_on_its_deadline_and_names_a_state_it_cannot_read(
    beacon: Beacon, tmp_path: Path
) -> None:
    """--pair-wait 4 s polled every 2 s: looks at 0, 2 and 4 s, the last exactly on the deadline ends it.
    The head's state cannot be read (systemctl show fails): the wait says why."""
    beacon.engine("waiting")
    pair = Pair(tmp_path, beacon, beacon.url, 4.0)
    script = pair.restart.systemd.systemctl
    Path(script).write_text(
        f'#!/bin/sh\necho "$@" >> {pair.calls}\n[ "$1" = show ] && {{ echo gone >&2; exit 4; }}\nexit 0\n'
    )
    got = pair()
    assert pair.sleeps == [2.0, 2.0]
    assert got == (
        "a wedge caused by the worker; systemctl stop --no-block vllm-station.service; the head is not down "
        f"after 4 s (`{script} show --property=ActiveState,SubState,Result,NRestarts -- "
        "vllm-station.service` exited 4: gone); the worker's engine waits for a head; systemctl start "
        "--no-block vllm-station.service"
    )
