"""`station pair rejoin`: the worker's half of the pair's restart in the recipe's order.

A headless vLLM worker joins one head's session and never another: when the head's engine ends (a
crash, a reboot, the head's watchdog stopping a wedged head), the worker's serving unit stays active
with its engine stuck in the dead session, and the next head's start would wait for it until its start
timeout (the head's `wait-worker` now refuses it at once instead). This loop, run on the worker as
`vllm-station-pair-rejoin.service`, restarts the worker's own serving unit when, for `verdicts` looks
in a row:

- the local beacon reports the engine `orphaned` (its session ended), or `joined` while the head's
  rendezvous port accepts no connection (a session with a head that is gone: a reboot sends no FIN), and
- the head's rendezvous port accepts no connection: the head is down, so the worker goes second — the
  recipe's order, "stop the head, then the worker; start the worker, then the head". A head still
  listening is the head's watchdog's to stop first.

The restart is `systemctl restart --no-block UNIT`: a start like any other, counted by the worker's
start limit (3 an hour). With `--runtime/--container` the container is killed right after (an engine
stuck in a dead session finishes nothing, and its graceful stop would wait out the stop timeout).
Nothing answering on the beacon means the serving unit is not active (systemd restarts it). Each
restart and each change of what it sees is one line on stderr (the journal).

With `--textfile-dir` each look writes `station-pair-rejoin.prom` for node_exporter's textfile collector:
`station_pair_rejoin_restarts_total` (the restarts it asked for: systemd's own restart counter does not
count an explicit restart, and the restart alert adds this one), the engine's state and the look's time.

Exit: runs until stopped (SIGTERM) or for `cycles` looks: 0; 2 on bad arguments.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vllm_station import textfile
from vllm_station.api.beacon import ENGINE_STATES, Answer, ask_beacon
from vllm_station.api.transport import SyncHttp
from vllm_station.errors import EXIT_OK
from vllm_station.host import systemd
from vllm_station.net import bare_host, tcp_probe, url_host

REQUEST_TIMEOUT_S = 3.0
TCP_CONNECT_TIMEOUT_S = 2.0
TEXTFILE = "station-pair-rejoin.prom"

Say = Callable[[str], None]


@dataclass(frozen=True)
class RejoinOptions:
    beacon_url: str  # the local beacon's /ready
    head: str
    master_port: int
    unit: str
    systemctl: str
    interval_s: float
    verdicts: int
    runtime: str | None = None  # the container runtime whose container the restart kills
    container: str | None = None
    textfile_dir: Path | None = None  # None: no export


def stale_reason(answer: Answer, head_listening: bool, head_what: str, target: str) -> str | None:
    """Why the worker must be restarted now, or None."""
    engine = answer.engine
    if not answer.worker or engine is None or head_listening:
        return None
    if engine.state == "orphaned":
        return f"engine orphaned ({engine.detail}); the head's port {target}: {head_what}"
    if engine.state == "joined":
        return (
            f"engine joined, but the head's rendezvous port {target} accepts no connection ({head_what}): "
            "a session with a head that is gone (a reboot or a power loss sends no FIN)"
        )
    return None


def rejoin(
    opts: RejoinOptions,
    say: Say,
    *,
    cycles: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    target = f"{url_host(opts.head)}:{opts.master_port}"
    say(
        f"watching the engine on {opts.beacon_url}: {opts.unit} is restarted after {opts.verdicts} looks "
        f"({opts.interval_s:g} s apart) that find its session over while the head ({target}) is down"
    )
    streak, n, last_seen, restarts = 0, 0, "", 0
    with SyncHttp() as client:
        while cycles is None or n < cycles:
            n += 1
            answer = ask_beacon(client, opts.beacon_url, REQUEST_TIMEOUT_S)
            listening, head_what = tcp_probe(bare_host(opts.head), opts.master_port, TCP_CONNECT_TIMEOUT_S)
            reason = stale_reason(answer, listening, head_what, target)
            seen = reason or _calm(answer, listening, target)
            if seen != last_seen:
                say(seen)
                last_seen = seen
            streak = streak + 1 if reason else 0
            if reason and streak >= opts.verdicts:
                say(f"restarting {opts.unit} so that its engine can join the next head: {reason}")
                say(_restart(opts))
                restarts += 1
                streak = 0
            _export(opts, answer, restarts, say)
            if cycles is None or n < cycles:
                sleep(opts.interval_s)
    return EXIT_OK


def _export(opts: RejoinOptions, answer: Answer, restarts: int, say: Say) -> None:
    if opts.textfile_dir is None:
        return
    F, S = textfile.Family, textfile.Sample
    state = answer.engine.state if answer.worker and answer.engine is not None else "none"
    families = [
        F.one("station_pair_rejoin_restarts_total", "Restarts of the worker's unit by the rejoin loop",
              restarts, "counter"),
        F("station_pair_rejoin_engine_state", "The worker engine's state at the last look (1 for it)",
          "gauge", tuple(S(1.0 if name == state else 0.0, {"state": name})
                         for name in (*ENGINE_STATES, "none"))),
        F.one("station_pair_rejoin_last_look_timestamp_seconds", "When the rejoin loop last looked (Unix)",
              time.time()),
    ]  # fmt: skip
    try:
        textfile.write(opts.textfile_dir, TEXTFILE, families)
    except textfile.TextfileError as err:
        say(f"metrics not exported: {err}")


def _calm(answer: Answer, head_listening: bool, target: str) -> str:
    if not answer.worker:
        return f"the beacon does not answer as the worker ({answer.what}): the serving unit is not active"
    engine = answer.engine
    state = engine.state if engine is not None else "not reported"
    head = "listens" if head_listening else "is down"
    if engine is not None and engine.state in ("orphaned", "joined") and head_listening:
        return f"engine {state}; the head's port {target} still listens: the head stops first"
    return f"engine {state}; the head's port {target} {head}"


def _restart(opts: RejoinOptions) -> str:
    try:
        asked = systemd.act("restart", opts.unit, systemctl=opts.systemctl)
    except systemd.SystemctlError as err:
        return str(err)
    return systemd.end_container_wait(
        f"asked systemd: {asked.removeprefix('systemctl ')}", opts.runtime, opts.container,
        "an engine in a dead session has nothing to drain",
    )  # fmt: skip
