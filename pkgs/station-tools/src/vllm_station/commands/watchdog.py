"""`station watchdog` — restart a wedged engine through systemd.

vLLM's /health answers 200 while its engine core is dead or deadlocked (an open vLLM issue): the unit stays
*active*, every request hangs, and `num_requests_running` reads 0, so an alert on "running > 0 and no
tokens" misses it. Every `--interval` seconds the watchdog takes one look:

1. with `--unit`: the serving unit's state (`systemctl show`). Not active (starting, restarting, failed) is
   systemd's business: verdict `inactive`. A unit failed by its start limit is said once, loudly;
2. a deadline-bound 1-token completion (`--probe-timeout`);
3. vLLM's `/metrics`, after the probe: the progress signature — token and iteration counters, finished
   requests, preemptions and KV-cache use. vLLM counts prompt tokens only when a prefill ends, so during a
   long (1M-token) chunked prefill the counters stand still; its KV-cache use grows chunk by chunk.

Verdicts: `ok` (the probe answered) · `busy` (it did not, but the signature moved since the last look: a
long prefill, a full batch) · `wedged` (it failed at the transport — a timeout, a reset, a 5xx of the
engine other than 503 — and nothing moved, or `/metrics` did not answer either) · `misconfigured` (an HTTP
answer that no restart changes: 4xx other than 429 — a stale key, a wrong model or path — or a TLS/DNS
failure) · `overloaded` (429 or 503: a rate limit, a full queue, a draining server) · `down` (connection
refused: the process is gone and systemd restarts it) · `inactive` · `no-baseline` (the first look, or the
first after a restart: nothing to compare with). `classify` says which failure is which.

Only `wedged` restarts: on `--wedge-verdicts` consecutive `wedged` verdicts (any other verdict in between
starts the count anew) it runs `systemctl restart --no-block UNIT`: a start
like any other, so it counts toward the unit's start limit (3 an hour) and prestart runs first — a wedge
that comes back every time ends in a failed unit, not a loop. Each non-ok verdict and each restart is
logged with its figures (stderr: the journal; a `misconfigured` or `overloaded` stretch once, when it
begins); the state goes to node_exporter's textfile collector (`station-watchdog.prom`, see `families`),
where the alerts read the verdict.

Detection: the first `wedged` verdict ends the look that began after the wedge (≤ interval + probe
timeout), each further one an interval later, so a wedge is restarted within
`interval + (wedge_verdicts − 1) × interval + probe_timeout` seconds (one more interval when the wedge was
there before the watchdog's first look). `--probe-timeout` may not exceed `--interval`.

The pair's head (`--pair-worker URL`, the worker beacon's /ready): a restart of the head alone would leave
the worker's engine in the dead session (a headless vLLM worker joins one head's session, never another),
and the head's next start would be refused. So the head's watchdog first asks the worker's beacon what
caused the wedge — the worker (its beacon silent: down or rebooting; its engine `orphaned`, or `waiting`
outside this head's session) or the head (the worker's engine `joined`) — and restarts in the recipe's
order whatever the cause: it stops the head (`systemctl stop --no-block`, the container killed as below)
and waits until the unit is down; the worker's `vllm-station-pair-rejoin` unit, seeing the head's
rendezvous port closed and its session over, restarts the worker; the watchdog waits (at most
`--pair-wait` seconds) until the worker's beacon reports its engine `waiting` for a head, then starts
the head (`systemctl start --no-block`: counted by the start limit like a restart). Each module keeps to
its own units: this watchdog drives the head's serving unit, the worker's rejoin unit the worker's.

The API key (`--api-key-file`) is read again at the first look after its file changed (a rotation,
docs/secrets.md): the watchdog keeps running across the serving unit's restart and probes with the key the
restarted engine expects. A changed file that cannot be used keeps the last key (said once).

Exit: runs until stopped (SIGTERM; Ctrl-C 130) or for `--cycles` looks (0); 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import httpx

from vllm_station import argtypes, options, textfile
from vllm_station.api import ApiClient, ApiError, ApiKeyError, ApiUnreachable
from vllm_station.api.args import Endpoint, add_endpoint_args, endpoint_from_args
from vllm_station.api.beacon import ask_beacon
from vllm_station.api.client import load_api_key, tls_context
from vllm_station.api.errors import HttpStatusError
from vllm_station.api.prometheus import parse_prometheus
from vllm_station.api.transport import SyncHttp
from vllm_station.errors import EXIT_OK, StationError, UsageError
from vllm_station.host import systemd
from vllm_station.polling import check_seconds

VERDICTS = ("ok", "busy", "wedged", "misconfigured", "overloaded", "down", "inactive", "no-baseline")
# How a failed probe counts (`classify`): only a `transport` failure can make a wedge.
REFUSED, TRANSPORT, MISCONFIGURED, OVERLOADED = "refused", "transport", "misconfigured", "overloaded"
OVERLOAD_STATUSES = (429, 503)  # a rate limit (the gateway's, vLLM's), a full queue, a draining server
PROBE_PROMPT = "Hello"
TEXTFILE = "station-watchdog.prom"
WEDGED = "a wedged engine has nothing to drain"  # why the container is killed after a stop
BEACON_TIMEOUT_S = 3.0  # one GET of the worker beacon's /ready
PAIR_POLL_S = 2.0  # between looks at the head's unit and at the worker's beacon during a pair restart

# What moves when the engine works (summed over label sets). Gauges of queue length are left out: they
# change with arrivals and aborts, which the API server handles without the engine.
PROGRESS = (
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:iteration_tokens_total_count",
    "vllm:request_success_total",
    "vllm:num_preemptions_total",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",  # vLLM < 0.10's name of the KV-cache gauge
)
# Shown in the log next to a verdict (read from the same scrape).
SHOWN = {
    "generation_tokens": "vllm:generation_tokens_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "kv_cache_usage": "vllm:kv_cache_usage_perc",
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
}


@dataclass(frozen=True)
class Options:
    interval_s: float = 30.0
    probe_timeout_s: float = 20.0
    wedge_verdicts: int = 3
    model: str | None = None
    unit: str | None = None
    systemctl: str = "systemctl"
    textfile_dir: Path | None = None  # None: no export
    runtime: str | None = None  # the container runtime whose container a wedge restart kills
    container: str | None = None
    pair_worker: str | None = None  # the pair's head: the worker beacon's /ready (restart in pair order)
    pair_wait_s: float = 600.0  # how long a pair restart waits for the head's stop, then the worker

    def __post_init__(self) -> None:
        check_seconds("--interval", self.interval_s)
        check_seconds("--probe-timeout", self.probe_timeout_s)
        if self.probe_timeout_s > self.interval_s:
            raise UsageError(
                f"--probe-timeout ({self.probe_timeout_s:g} s) must not exceed --interval "
                f"({self.interval_s:g} s): one look must end before the next begins"
            )
        if self.wedge_verdicts < 1:
            raise UsageError(f"--wedge-verdicts must be 1 or more, got {self.wedge_verdicts}")

    @property
    def detection_bound_s(self) -> float:
        """The longest a wedge present at a look's start goes unrestarted (see the module docstring)."""
        return self.wedge_verdicts * self.interval_s + self.probe_timeout_s


@dataclass(frozen=True)
class UnitState:
    active: str  # ActiveState
    sub: str  # SubState
    result: str  # Result
    n_restarts: int

    @property
    def start_limit_hit(self) -> bool:
        """systemd gave up restarting the unit. `Result=start-limit-hit` when an explicit start (the
        watchdog's restart, an operator's) was refused; when systemd refuses its own automatic restart
        after a crash, systemd 252 keeps the crash's Result (`signal`, `exit-code`: measured by
        checks/test_system_monitoring.py), so a failed unit that systemd had restarted counts too: a
        Restart=always unit is left failed only once its restarts are refused."""
        if self.active != "failed":
            return False
        return self.result == "start-limit-hit" or self.n_restarts > 0


@dataclass
class Look:
    """One look's evidence."""

    at: float  # clock()
    probe_ok: bool
    probe_s: float
    probe_error: str | None
    failure: str | None  # classify(): None when the probe answered
    signature: dict[str, float] | None  # None: /metrics did not answer
    shown: dict[str, float]
    metrics_error: str | None = None
    unit: UnitState | None = None


@dataclass
class Verdict:
    verdict: str  # VERDICTS
    reason: str
    streak: int  # consecutive `wedged` verdicts, this one included
    probe_s: float
    figures: dict[str, float] = field(default_factory=dict)
    restarted: bool = False
    restart_message: str | None = None
    at_unix: float = 0.0


def judge(previous: Mapping[str, float] | None, look: Look) -> tuple[str, str]:
    """The verdict on one look, given the signature of the previous one (None: no baseline)."""
    if look.unit is not None and look.unit.active != "active":
        u = look.unit
        return "inactive", f"the unit is {u.active} ({u.sub}, result {u.result}): systemd's business"
    if look.probe_ok:
        return "ok", f"1-token probe answered in {look.probe_s:.2f} s"
    probe = f"1-token probe failed after {look.probe_s:.1f} s ({look.probe_error})"
    if look.failure == REFUSED:
        return "down", f"{probe}: nothing listens, systemd restarts a server that exited"
    if look.failure == MISCONFIGURED:
        return "misconfigured", f"{probe}: an answer no restart changes (fix the key, model or URL)"
    if look.failure == OVERLOADED:
        return "overloaded", f"{probe}: the server sheds load (a rate limit, a full queue, draining)"
    if look.signature is None:
        return "wedged", f"{probe}; /metrics did not answer either ({look.metrics_error})"
    if previous is None:
        return "no-baseline", f"{probe}; no earlier /metrics to compare with"
    moved = sorted(k for k in set(previous) | set(look.signature) if previous.get(k) != look.signature.get(k))
    if moved:
        return "busy", f"{probe}, but the engine progresses ({', '.join(_short(k) for k in moved)} moved)"
    return "wedged", f"{probe}; no progress in /metrics since the last look"


def classify(err: ApiError) -> str:
    """How a failed probe counts. `refused`: nothing listens (down). `misconfigured`: an answer no restart
    changes — HTTP 4xx other than 429 (401/403 a stale or missing key, 404 a wrong model or URL, 400), any
    other non-5xx status, or a TLS/DNS failure. `overloaded`: 429 or 503. `transport`: everything else —
    timeouts, resets, truncated answers, a 5xx of the engine other than 503 — which is a wedge when
    /metrics shows no progress either."""
    if isinstance(err, ApiUnreachable):
        if err.kind == "refused":
            return REFUSED
        return MISCONFIGURED if err.kind in ("tls", "dns") else TRANSPORT
    if isinstance(err, HttpStatusError):
        if err.status in OVERLOAD_STATUSES:
            return OVERLOADED
        return TRANSPORT if err.status >= 500 else MISCONFIGURED
    return TRANSPORT


def _short(name: str) -> str:
    return name.removeprefix("vllm:")


# ---- the parts that touch the world --------------------------------------------------------------------


class Systemd:
    """The serving unit through `systemctl` (root: the system manager)."""

    def __init__(self, systemctl: str, unit: str, runtime: str | None = None,
                 container: str | None = None) -> None:  # fmt: skip
        self.systemctl, self.unit = systemctl, unit
        self.runtime, self.container = runtime, container

    def _act(self, action: str) -> str:
        try:
            return systemd.act(action, self.unit, systemctl=self.systemctl)
        except systemd.SystemctlError as err:
            raise StationError(str(err)) from None

    def state(self) -> UnitState:
        try:
            props = systemd.show(self.unit, ["ActiveState", "SubState", "Result", "NRestarts"],
                                 systemctl=self.systemctl)  # fmt: skip
        except systemd.SystemctlError as err:
            raise StationError(str(err)) from None
        n = props.get("NRestarts", "0")
        return UnitState(
            props.get("ActiveState", "?"), props.get("SubState", "?"), props.get("Result", "?"),
            int(n) if n.isdigit() else 0,
        )  # fmt: skip

    def restart(self) -> str:
        return systemd.end_container_wait(self._act("restart"), self.runtime, self.container, WEDGED)

    def stop(self) -> str:
        return systemd.end_container_wait(self._act("stop"), self.runtime, self.container, WEDGED)

    def start(self) -> str:
        return self._act("start")


class PairRestart:
    """The pair head's restart in the recipe's order (the module docstring): stop the head, wait for the
    worker to come back waiting for a head (its own rejoin unit restarts it), start the head."""

    def __init__(
        self,
        systemd: Systemd,
        worker_url: str,
        wait_s: float,
        say: Callable[[str], None],
        *,
        poll_s: float = PAIR_POLL_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.systemd, self.worker_url, self.wait_s, self.say = systemd, worker_url, wait_s, say
        self.poll_s, self.clock, self.sleep = poll_s, clock, sleep
        self.http = SyncHttp()  # the worker's beacon is on the rail: no proxy, no TLS

    def close(self) -> None:
        self.http.close()

    def cause(self) -> tuple[str, str]:
        """("worker" | "head" | "unknown", what the worker's beacon said)."""
        answer = ask_beacon(self.http, self.worker_url, BEACON_TIMEOUT_S)
        if not answer.worker:
            return "worker", f"the worker's beacon {self.worker_url} does not answer as the worker " \
                f"({answer.what}): the worker is down, rebooting or stopped"  # fmt: skip
        engine = answer.engine
        if engine is None or engine.state == "unknown":
            return "unknown", f"the worker is up; its beacon reports no engine state ({answer.what})"
        if engine.state == "joined":
            return "head", f"the worker's engine is in the session ({engine.detail}): the head's own wedge"
        return "worker", f"the worker's engine is {engine.state}, not in the head's session ({engine.detail})"

    def _wait(self, done: Callable[[], str | None]) -> tuple[bool, str]:
        deadline = self.clock() + self.wait_s
        last = ""
        while True:
            seen = done()
            if seen is None:
                return True, last
            last = seen
            if self.clock() >= deadline:
                return False, last
            self.sleep(self.poll_s)

    def __call__(self) -> str:
        who, why = self.cause()
        cause = {"worker": "a wedge caused by the worker", "head": "the head's wedge"}.get(who, "a wedge")
        self.say(f"{cause}: {why}; restarting the pair in order: stop the head, the worker restarts, "
                 "then the head starts")  # fmt: skip
        steps = [self.systemd.stop()]

        def head_down() -> str | None:
            try:
                state = self.systemd.state()
            except StationError as err:
                return str(err)
            return None if state.active in ("inactive", "failed") else f"the head's unit is {state.active}"

        down, seen = self._wait(head_down)
        steps.append("the head is down" if down else f"the head is not down after {self.wait_s:g} s ({seen})")

        def worker_waiting() -> str | None:
            answer = ask_beacon(self.http, self.worker_url, BEACON_TIMEOUT_S)
            if answer.worker and (answer.engine is None or answer.engine.state in ("waiting", "unknown")):
                return None
            state = answer.engine.state if answer.worker and answer.engine else answer.what
            return f"the worker's engine: {state}"

        ready, seen = self._wait(worker_waiting)
        if ready:
            steps.append("the worker's engine waits for a head")
        else:
            steps.append(
                f"the worker did not come back waiting for a head within {self.wait_s:g} s ({seen}); "
                "starting the head anyway: its start names what the worker is doing"
            )
        steps.append(self.systemd.start())
        return f"{cause}; " + "; ".join(steps)


class Watchdog:
    """One serving endpoint, judged look by look. `restart` is called on a wedge (None: report only)."""

    def __init__(
        self,
        opts: Options,
        endpoint: Endpoint,
        *,
        restart: Callable[[], str] | None = None,
        unit_state: Callable[[], UnitState] | None = None,
        say: Callable[[str], None] = lambda line: print(
            f"station watchdog: {line}", file=sys.stderr, flush=True
        ),
        clock: Callable[[], float] = time.monotonic,
        key_file: Path | None = None,
    ) -> None:
        self.opts, self.endpoint = opts, endpoint
        # The key file the endpoint's key came from (None: a key from the environment, or none):
        # what it was when last read, to read it again when it changes.
        self.key_file = key_file
        self.key_seen = _file_signature(key_file)
        self.restart, self.unit_state, self.say, self.clock = restart, unit_state, say, clock
        self.api: ApiClient = endpoint.client(
            timeout=opts.probe_timeout_s, connect_timeout=min(5.0, opts.probe_timeout_s)
        )
        self.http = SyncHttp(verify=tls_context(endpoint.ca_file))
        self.model = opts.model
        self.previous: dict[str, float] | None = None
        self.streak = 0
        self.restarts = 0
        self.last_verdict = ""
        self.last_change_at: float | None = None  # clock() when the signature last moved
        self.limit_said = False
        self.unit_unreadable = False
        # A restart this watchdog asked for that has not yet brought the unit back to active. If the unit
        # is failed meanwhile, the restart was refused: with the container killed after the request,
        # systemd 252 reports the kill's Result (exit-code), not start-limit-hit.
        self.restart_pending = False

    def close(self) -> None:
        self.api.close()
        self.http.close()

    # ---- one look ----
    def _refresh_key(self) -> None:
        """A key file that changed since it was last read is read again; the probe sends the new key."""
        seen = _file_signature(self.key_file)
        if self.key_file is None or seen is None or seen == self.key_seen:
            return
        self.key_seen = seen
        try:
            key = load_api_key(self.key_file)
        except ApiKeyError as err:
            self.say(f"the API key file changed but cannot be used; the probe keeps the last key: {err}")
            return
        if key == self.endpoint.api_key:
            return
        self.api.close()
        self.endpoint = replace(self.endpoint, api_key=key)
        self.api = self.endpoint.client(
            timeout=self.opts.probe_timeout_s, connect_timeout=min(5.0, self.opts.probe_timeout_s)
        )
        self.say(f"the API key file {self.key_file} changed: the probe sends its new key from this look on")

    def _probe(self) -> tuple[bool, float, str | None, str | None]:
        t0 = time.perf_counter()
        try:
            if self.model is None:
                listed = self.api.models(timeout=self.opts.probe_timeout_s)
                if not listed:
                    return False, time.perf_counter() - t0, "GET /v1/models lists no model", MISCONFIGURED
                self.model = listed[0].id
            left = max(0.5, self.opts.probe_timeout_s - (time.perf_counter() - t0))
            self.api.completion(self.model, PROBE_PROMPT, max_tokens=1, timeout=left)
            return True, time.perf_counter() - t0, None, None
        except ApiError as err:
            return False, time.perf_counter() - t0, _first_line(err), classify(err)

    def _metrics(self) -> tuple[dict[str, float] | None, dict[str, float], str | None]:
        try:
            status, body = self.http.fetch(
                "GET", self.endpoint.root_url + "/metrics", timeout=self.opts.probe_timeout_s
            )
        except httpx.HTTPError as err:
            return None, {}, f"GET /metrics: {type(err).__name__}: {err}".rstrip(": ")
        if status != 200:
            return None, {}, f"GET /metrics: HTTP {status}"
        values = parse_prometheus(body.decode("utf-8", errors="replace"))
        signature = {k: values[k] for k in PROGRESS if k in values}
        shown = {k: values[v] for k, v in SHOWN.items() if v in values}
        if not signature:
            return None, shown, "GET /metrics: none of vLLM's progress metrics (is this vLLM?)"
        return signature, shown, None

    def look(self) -> Look:
        self._refresh_key()
        unit = None
        if self.unit_state is not None:
            try:
                unit = self.unit_state()
            except StationError as err:  # judged by the probe alone; said once per failing stretch
                if not self.unit_unreadable:
                    self.say(f"cannot read the unit's state, judging by the probe alone: {err}")
                self.unit_unreadable = True
            else:
                self.unit_unreadable = False
        at = self.clock()
        if unit is not None and unit.active != "active":
            return Look(at, False, 0.0, None, None, None, {}, None, unit)
        ok, seconds, error, failure = self._probe()
        signature, shown, metrics_error = self._metrics()
        return Look(at, ok, seconds, error, failure, signature, shown, metrics_error, unit)

    # ---- one cycle ----
    def limit_hit(self, unit: UnitState) -> bool:
        return unit.start_limit_hit or (unit.active == "failed" and self.restart_pending)

    def step(self) -> Verdict:
        look = self.look()
        if look.unit is not None and look.unit.active == "active":
            self.restart_pending = False
        verdict, reason = judge(self.previous, look)
        if look.signature is not None and look.signature != self.previous:
            self.last_change_at = look.at
        if verdict in ("inactive", "down"):
            self.previous = None  # a new process starts its counters anew
        elif look.signature is not None:
            self.previous = look.signature
        self.streak = self.streak + 1 if verdict == "wedged" else 0
        v = Verdict(
            verdict, reason, self.streak, round(look.probe_s, 3), dict(look.shown), at_unix=time.time()
        )
        self._tell(v, look)
        if verdict == "wedged" and self.streak >= self.opts.wedge_verdicts:
            self._restart(v, look)
        self.last_verdict = verdict
        self._export(v, look)
        return v

    def _tell(self, v: Verdict, look: Look) -> None:
        unit = look.unit
        if unit is not None and self.limit_hit(unit):
            if not self.limit_said:
                if unit.result == "start-limit-hit":
                    how = "start-limit-hit"
                elif unit.n_restarts > 0:
                    how = f"after {unit.n_restarts} automatic restarts, Result={unit.result}"
                else:
                    how = f"the watchdog's restart refused, Result={unit.result}"
                self.say(
                    f"{self.opts.unit} failed by its start limit ({how}): systemd refuses further "
                    "starts within the hour, the watchdog's included; fix the cause (journalctl -u "
                    f"{self.opts.unit}), then systemctl reset-failed {self.opts.unit}"
                )
                self.limit_said = True
            return
        self.limit_said = False
        if v.verdict == "ok":
            if self.last_verdict not in ("", "ok"):
                self.say(f"ok again: {v.reason}")
            return
        if v.verdict in ("inactive", "misconfigured", "overloaded") and v.verdict == self.last_verdict:
            return  # said when the stretch began; the exported verdict carries it on
        streak = f" ({v.streak}/{self.opts.wedge_verdicts})" if v.verdict == "wedged" else ""
        self.say(f"verdict {v.verdict}{streak}: {v.reason}; {_figures(v.figures, self._stale_s(look))}")

    def _stale_s(self, look: Look) -> float | None:
        return None if self.last_change_at is None else look.at - self.last_change_at

    def _restart(self, v: Verdict, look: Look) -> None:
        why = (
            f"{v.streak} consecutive wedge verdicts over {v.streak * self.opts.interval_s:.0f} s "
            f"(each: the 1-token probe failed and /metrics showed no progress); last: {v.reason}; "
            f"{_figures(v.figures, self._stale_s(look))}"
        )
        if self.restart is None:
            self.say(f"would restart the serving unit (no --unit given): {why}")
            return
        try:
            done = self.restart()
        except StationError as err:
            self.say(f"restart failed: {err}; {why}")
            v.restart_message = str(err)
            return
        self.restarts += 1
        self.restart_pending = True
        self.streak = 0
        self.previous = None
        v.restarted, v.restart_message = True, done
        self.say(f"restarting {self.opts.unit or 'the server'} ({done}): {why}")

    def _export(self, v: Verdict, look: Look) -> None:
        if self.opts.textfile_dir is None:
            return
        try:
            textfile.write(self.opts.textfile_dir, TEXTFILE, self.families(v, look))
        except StationError as err:
            self.say(f"metrics not exported: {err}")

    def families(self, v: Verdict, look: Look) -> list[textfile.Family]:
        F, S = textfile.Family, textfile.Sample
        stale = self._stale_s(look)
        fams = [
            F("station_watchdog_verdict", "The last verdict (1 for it, 0 for the others)", "gauge",
              tuple(S(1.0 if name == v.verdict else 0.0, {"verdict": name}) for name in VERDICTS)),
            F.one("station_watchdog_wedge_streak", "Consecutive wedge verdicts", v.streak),
            F.one("station_watchdog_wedge_verdicts", "Consecutive wedge verdicts that restart the unit",
                  self.opts.wedge_verdicts),
            F.one("station_watchdog_restarts_total", "Restarts of the serving unit by this watchdog",
                  self.restarts, "counter"),
            F.one("station_watchdog_probe_success", "1 when the last 1-token probe answered",
                  1.0 if look.probe_ok else 0.0),
            F.one("station_watchdog_probe_seconds", "Duration of the last 1-token probe",
                  look.probe_s if look.unit is None or look.unit.active == "active" else math.nan),
            F.one("station_watchdog_progress_age_seconds", "Seconds since vLLM's progress metrics last moved",
                  math.nan if stale is None else stale),
            F.one("station_watchdog_last_look_timestamp_seconds", "When the watchdog last looked (Unix time)",
                  v.at_unix),
        ]  # fmt: skip
        if look.unit is not None:
            fams.append(
                F.one("station_watchdog_unit_start_limit_hit",
                      "1 when the serving unit failed by its start limit "
                      "(start-limit-hit, or failed after restarts)",
                      1.0 if self.limit_hit(look.unit) else 0.0)
            )  # fmt: skip
        return fams


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _figures(shown: Mapping[str, float], stale_s: float | None) -> str:
    parts = [f"{k} {v:g}" for k, v in shown.items()]
    if stale_s is not None:
        parts.append(f"no progress for {stale_s:.0f} s")
    return "figures: " + (", ".join(parts) if parts else "none (/metrics unreadable)")


# ---- CLI -----------------------------------------------------------------------------------------------


def configure(parser: argparse.ArgumentParser) -> None:
    add_endpoint_args(parser)
    options.add_model(parser)
    parser.add_argument(
        "--unit",
        type=argtypes.unit_name,
        help="the serving unit to restart on a wedge (without it: report only)",
    )
    parser.add_argument("--systemctl", default="systemctl", help="the systemctl program (default: from PATH)")
    parser.add_argument(
        "--runtime",
        help="container runtime (docker, podman): after asking for a wedge restart, `RUNTIME kill "
        "CONTAINER`, so that the graceful stop does not wait out --shutdown-timeout for a wedged engine",
    )
    parser.add_argument("--container", help="the serving container's name (with --runtime)")
    parser.add_argument(
        "--pair-worker",
        type=argtypes.http_url,
        metavar="URL",
        help="the pair's head: the worker beacon's /ready; a wedge restarts the pair in the recipe's order "
        "(stop the head, the worker restarts, start the head), with --unit",
    )
    parser.add_argument(
        "--pair-wait",
        type=argtypes.seconds(hi=argtypes.DAY),
        default=600.0,
        metavar="SECONDS",
        help="with --pair-worker: how long to wait for the head's stop, then for the worker (600)",
    )
    parser.add_argument(
        "--interval", type=argtypes.seconds(hi=argtypes.DAY), default=30.0, help="seconds between looks (30)"
    )
    parser.add_argument(
        "--probe-timeout",
        type=argtypes.seconds(hi=argtypes.DAY),
        default=20.0,
        help="deadline of the 1-token probe (20)",
    )
    parser.add_argument(
        "--wedge-verdicts",
        type=argtypes.count(hi=1000),
        default=3,
        help="consecutive wedge verdicts that restart the unit (3)",
    )
    parser.add_argument(
        "--textfile-dir",
        type=Path,  # not checked when parsed: see PLAIN_OUTPUT_OPTIONS in test_architecture_output
        default=None,
        help=f"node_exporter textfile directory for {TEXTFILE} (default: none, no export)",
    )
    parser.add_argument(
        "--cycles",
        type=argtypes.count(hi=10**9),
        default=None,
        help="stop after this many looks (default: run on)",
    )
    options.add_json(parser, what="each verdict (one line each)")


def run(args: argparse.Namespace) -> int:
    opts = Options(
        interval_s=args.interval,
        probe_timeout_s=args.probe_timeout,
        wedge_verdicts=args.wedge_verdicts,
        model=args.model,
        unit=args.unit,
        systemctl=args.systemctl,
        textfile_dir=args.textfile_dir,
        runtime=args.runtime,
        container=args.container,
        pair_worker=args.pair_worker,
        pair_wait_s=args.pair_wait,
    )
    if (opts.runtime is None) != (opts.container is None):
        raise UsageError("--runtime and --container go together")
    if opts.pair_worker is not None and opts.unit is None:
        raise UsageError("--pair-worker restarts the pair's head: it needs --unit")
    endpoint = endpoint_from_args(args)
    systemd = Systemd(opts.systemctl, opts.unit, opts.runtime, opts.container) if opts.unit else None
    restart: Callable[[], str] | None = systemd.restart if systemd else None
    pair = None
    if systemd is not None and opts.pair_worker is not None:
        pair = PairRestart(systemd, opts.pair_worker, opts.pair_wait_s, _say)
        restart = pair
    dog = Watchdog(
        opts,
        endpoint,
        restart=restart,
        unit_state=systemd.state if systemd else None,
        key_file=Path(args.api_key_file) if args.api_key_file else None,
    )
    dog.say(
        f"watching {endpoint.root_url}{f' ({opts.unit})' if opts.unit else ' (report only: no --unit)'}: "
        f"a look every {opts.interval_s:g} s, probe deadline {opts.probe_timeout_s:g} s, restart after "
        f"{opts.wedge_verdicts} wedge verdicts (within {opts.detection_bound_s:g} s of a wedge)"
    )
    if pair is not None:
        dog.say(f"the pair's head: a wedge restarts the pair in order (worker beacon {opts.pair_worker})")
    try:
        run_loop(dog, args.cycles, json_out=args.json)
    finally:
        dog.close()
        if pair is not None:
            pair.close()
    return EXIT_OK


def _say(line: str) -> None:
    print(f"station watchdog: {line}", file=sys.stderr, flush=True)


def _file_signature(path: Path | None) -> tuple[int, int, int, int] | None:
    """What tells a replaced or rewritten file from the one read before (None: no file to read)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def run_loop(
    dog: Watchdog,
    cycles: int | None,
    *,
    json_out: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Verdict]:
    """Look every interval (a look's own time counts against it) for `cycles` looks (None: forever)."""
    verdicts: list[Verdict] = []
    n = 0
    next_at = dog.clock()
    while cycles is None or n < cycles:
        v = dog.step()
        n += 1
        if json_out:
            print(json.dumps(asdict(v)), flush=True)
        if cycles is not None:
            verdicts.append(v)
        next_at += dog.opts.interval_s
        if cycles is None or n < cycles:
            sleep(max(0.0, next_at - dog.clock()))
            next_at = max(next_at, dog.clock() - dog.opts.interval_s)
    return verdicts
