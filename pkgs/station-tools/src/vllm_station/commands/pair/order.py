"""Start and stop order of the pair: the worker starts first and stops last.

- `wait_worker`: the head's ExecStartPre. Polls the worker beacon's /ready until it answers with a
  JSON object whose role is "worker". Exit 0 when it does and the worker's engine waits for a head
  (or its beacon reports no engine state); 1 at once when the worker is up but its engine is
  `joined` or `orphaned` — in a session with an earlier head, which a new head's rendezvous would wait
  for until the start timeout; 3 when nothing ever answered; 1 when something answered, but never as
  the worker's beacon (it names what answered).
- `wait_head_stop`: the worker beacon's ExecStop (as root). When the worker's serving unit is active,
  waits while the head's rendezvous port accepts TCP connections, at most `timeout_s`; always exit 0
  (a stop is never refused, only delayed).

Every line goes to `say` (stderr, prefixed `vllm-station pair:`); the return value is the exit code.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from vllm_station.api.beacon import Answer, ask_beacon
from vllm_station.api.transport import SyncHttp
from vllm_station.errors import EXIT_FAIL, EXIT_OK, EXIT_UNREACHABLE, UsageError
from vllm_station.host import systemd
from vllm_station.net import bare_host, tcp_probe
from vllm_station.polling import Tick, poll

REQUEST_TIMEOUT_S = 3.0  # one GET /ready (the shell version's curl --max-time 3)
TCP_CONNECT_TIMEOUT_S = 2.0  # one connect to the head's rendezvous port

Say = Callable[[str], None]


# --- the head's start: wait for the worker's beacon ------------------------------------------------


def wait_worker(
    url: str,
    worker: str,
    timeout_s: float,
    interval_s: float,
    say: Say,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise UsageError(f"--url must be an http(s) URL of the worker's beacon, got {url!r}")
    worker = bare_host(worker)
    last = Answer(False, False, "no try yet")
    not_worker: str | None = None  # the last thing that answered, but not as the worker

    def probe(tick: Tick) -> Answer | None:
        nonlocal last, not_worker
        last = ask_beacon(client, url, max(0.5, min(REQUEST_TIMEOUT_S, tick.left_s)))
        if last.worker:
            return last
        if last.answered:
            not_worker = last.what
        return None

    def progress(tick: Tick) -> None:
        what = last.what if not last.answered else f"{url} answers, but not as the worker: {last.what}"
        say(
            f"still waiting for the worker {worker} after {tick.elapsed_s:.0f} s (try {tick.attempt}): {what}"
        )

    say(f"waiting up to {timeout_s:g} s for the worker {worker} ({url})")
    # No proxy from the environment: the beacon is on the rail, next to us.
    with SyncHttp() as client:
        polled = poll(
            probe, timeout_s=timeout_s, interval_s=interval_s, progress=progress, clock=clock, sleep=sleep
        )
    if polled.value is not None:
        return _judge_engine(polled.value, worker, say)
    if not_worker is None:
        say(
            f"the worker {worker} did not answer on {url} within {timeout_s:g} s ({last.what}); "
            f"start the worker first (on station {worker}: systemctl start vllm-station), then this unit"
        )
        return EXIT_UNREACHABLE
    say(
        f"the worker {worker} did not answer as a worker on {url} within {timeout_s:g} s; what answered: "
        f"{not_worker}. Check that pair.workerAddress ({worker}) and pair.beaconPort are the worker's and "
        f'that station {worker} runs role "worker", then start this unit again'
    )
    return EXIT_FAIL


def _judge_engine(answer: Answer, worker: str, say: Say) -> int:
    """The worker's beacon answered: its engine must be waiting for a head. This head's engine is not
    running yet (this is its start), so an engine in a session holds one with an earlier head."""
    engine = answer.engine
    if engine is None:
        say(f"worker {worker} is up ({answer.what})")
        return EXIT_OK
    if engine.state == "waiting":
        say(f"worker {worker} is up ({answer.what}), its engine waits for a head")
        return EXIT_OK
    if engine.state == "unknown":
        say(f"worker {worker} is up ({answer.what}); its engine's state is unknown ({engine.detail})")
        return EXIT_OK
    when = time.strftime("%H:%M:%S UTC", time.gmtime(engine.since)) if engine.since else "?"
    why = (
        "its session ended"
        if engine.state == "orphaned"
        else "it is in a session, but this head's engine is not running: the session is an earlier "
        "head's (a crash or a reboot of this station that the worker has not noticed)"
    )
    say(
        f"the worker {worker} is up, but its engine is not ready for a new head: engine {engine.state} "
        f"since {when}: {engine.detail}. {why[0].upper()}{why[1:]}; starting this head would hang until its "
        f"start timeout. Restart the worker first (on station {worker}: systemctl restart vllm-station; "
        "its vllm-station-pair-rejoin unit does so by itself once this head is down), then start this unit"
    )
    return EXIT_FAIL


# --- the worker's stop: let the head stop first ----------------------------------------------------


def unit_state(unit: str) -> tuple[str | None, str | None]:
    """(ActiveState, None), or (None, why systemd could not be asked)."""
    try:
        return systemd.show(unit, ["ActiveState"]).get("ActiveState", ""), None
    except systemd.SystemctlError as err:
        return None, str(err)


def wait_head_stop(
    head: str,
    port: int,
    timeout_s: float,
    interval_s: float,
    unit: str,
    say: Say,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    head = bare_host(head)
    # Only a deliberate stop of a running worker waits; after a crash there is nothing to protect.
    state, problem = unit_state(unit)
    if problem is not None:
        say(f"cannot tell whether {unit} is active ({problem}); waiting for the head {head} anyway")
    elif state != "active":
        say(f"{unit} is {state or 'in no state'}, not active: nothing to protect after a crash")
        return EXIT_OK

    def probe(_tick: Tick) -> str | None:
        listening, why = tcp_probe(head, port, TCP_CONNECT_TIMEOUT_S)
        return None if listening else why

    def progress(tick: Tick) -> None:
        say(
            f"waiting for the head {head} to stop first: port {port} still accepts connections after "
            f"{tick.elapsed_s:.0f} s (at most {timeout_s:g} s)"
        )

    polled = poll(
        probe, timeout_s=timeout_s, interval_s=interval_s, progress=progress, clock=clock, sleep=sleep
    )
    if polled.value is not None:
        say(f"head {head} is down; stopping the worker (port {port}: {polled.value})")
    else:
        say(
            f"the head {head} still listens on port {port} after {timeout_s:g} s; stopping the worker "
            f"anyway (stop the head first: systemctl stop vllm-station on {head})"
        )
    return EXIT_OK
