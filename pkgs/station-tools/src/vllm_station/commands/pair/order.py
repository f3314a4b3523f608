"""Start and stop order of the pair: the worker starts first and stops last.

- `wait_worker`: the head's ExecStartPre. Polls the worker beacon's /ready until it answers 200 with a
  JSON object whose role is "worker". Exit 0 when it does; 3 when nothing ever answered; 1 when
  something answered, but never as the worker's beacon (it names what answered).
- `wait_head_stop`: the worker beacon's ExecStop (as root). When the worker's serving unit is active,
  waits while the head's rendezvous port accepts TCP connections, at most `timeout_s`; always exit 0
  (a stop is never refused, only delayed).

Every line goes to `say` (stderr, prefixed `vllm-station pair:`); the return value is the exit code.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from vllm_station import bounded
from vllm_station.api.transport import RedirectRefused, SyncHttp, TooLarge
from vllm_station.errors import EXIT_FAIL, EXIT_OK, EXIT_UNREACHABLE, UsageError
from vllm_station.net import bare_host, tcp_probe
from vllm_station.polling import Tick, poll

REQUEST_TIMEOUT_S = 3.0  # one GET /ready (the shell version's curl --max-time 3)
MAX_ANSWER_BYTES = 64 * 1024  # a beacon's /ready is ~60 bytes; read no more than this of anything else
TCP_CONNECT_TIMEOUT_S = 2.0  # one connect to the head's rendezvous port
SYSTEMCTL_TIMEOUT_S = 10.0

Say = Callable[[str], None]


# --- the head's start: wait for the worker's beacon ------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One GET of the worker's /ready: is it the worker's beacon, and if not, who (if anyone) answered."""

    worker: bool
    answered: bool  # something answered at all (an HTTP answer, or at least accepted and then failed)
    what: str  # for operators: "rank 1", "connection refused", "HTTP 404 …", "a head's beacon …"


def ask_beacon(client: SyncHttp, url: str, timeout: float) -> Answer:
    """GET `url` once, within `timeout` seconds in all, reading at most MAX_ANSWER_BYTES, and say what
    answered."""
    status = 0
    try:
        with client.stream("GET", url, timeout=timeout) as response:
            status = response.status_code
            body = response.read(MAX_ANSWER_BYTES)
    except RedirectRefused as err:
        return Answer(False, True, str(err))
    except TooLarge:
        return Answer(False, True, f"HTTP {status} with an answer over 64 KiB")
    except (httpx.ConnectError, httpx.ConnectTimeout) as err:
        return Answer(False, False, f"nothing answered: {_reason(err)}")
    except httpx.TimeoutException:
        return Answer(
            False, True, f"something accepted the connection but sent no complete answer within {timeout:g} s"
        )
    except httpx.HTTPError as err:
        return Answer(False, True, f"something answered, not in HTTP ({_reason(err)})")
    snippet = body[:80].decode("utf-8", errors="replace").strip()
    if status != 200:
        return Answer(False, True, f"HTTP {status} ({snippet!r}), not a beacon's /ready")
    try:
        data: Any = bounded.loads_json(body)
    except (ValueError, UnicodeDecodeError):
        return Answer(False, True, f"HTTP 200 but not JSON ({snippet!r}), not a beacon's /ready")
    if not isinstance(data, dict):
        return Answer(False, True, f"HTTP 200 with JSON that is not an object ({snippet!r})")
    role, rank, address = data.get("role"), data.get("rank"), data.get("address")
    if role == "worker":
        return Answer(True, True, f"rank {rank}")
    return Answer(
        False, True, f"the beacon of role {role!r} (rank {rank}, address {address}), not of the worker"
    )


def _reason(err: Exception) -> str:
    text = str(err) or type(err).__name__
    return "connection refused" if "refused" in text.lower() else text


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
        say(f"worker {worker} is up ({polled.value.what})")
        return EXIT_OK
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


# --- the worker's stop: let the head stop first ----------------------------------------------------


def unit_state(unit: str) -> tuple[str | None, str | None]:
    """(ActiveState, None), or (None, why systemd could not be asked)."""
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        return None, "systemctl not found on PATH"
    argv = [systemctl, "show", "--property=ActiveState", "--value", unit]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return None, f"`{' '.join(argv)}` did not answer within {SYSTEMCTL_TIMEOUT_S:g} s"
    except OSError as err:
        return None, f"cannot run {systemctl}: {err.strerror or err}"
    if proc.returncode != 0:
        message = (proc.stderr.strip().splitlines() or ["no message"])[0][:200]
        return None, f"`systemctl show` exited {proc.returncode}: {message}"
    return proc.stdout.strip(), None


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
