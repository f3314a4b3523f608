"""A client of the pair beacon's `/ready` (`station pair beacon`): who answered, and the engine's state.

One GET, bounded in time and size, through the HTTP layer. `ask_beacon` never raises for what a
network or a wrong peer can do: it returns an `Answer` that says what answered, for operators. The
head's start (`station pair wait-worker`) and the head's watchdog (`station watchdog --pair-worker`)
read the worker's beacon through it.

The engine's states (the worker's beacon, `vllm_station.commands.pair.beacon.EngineWatch`): `waiting` (ready
for a head), `joined` (in a session with a head), `orphaned` (its session ended; the worker must be
restarted before a head can use it), `unknown` (the beacon could not tell). An older beacon sends
no engine state (`engine is None`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from vllm_station import bounded
from vllm_station.api.transport import RedirectRefused, SyncHttp, TooLarge

MAX_ANSWER_BYTES = 64 * 1024  # a beacon's /ready is ~300 bytes; read no more than this of anything else
ENGINE_STATES = ("waiting", "joined", "orphaned", "unknown")


@dataclass(frozen=True)
class Engine:
    """The worker engine's state as its beacon reports it."""

    state: str  # ENGINE_STATES
    since: float  # Unix time the state began
    detail: str


@dataclass(frozen=True)
class Answer:
    """One GET of a beacon's /ready: is it the worker's beacon, and if not, who (if anyone) answered."""

    worker: bool
    answered: bool  # something answered at all (an HTTP answer, or at least accepted and then failed)
    what: str  # for operators: "rank 1", "connection refused", "HTTP 404 …", "a head's beacon …"
    engine: Engine | None = None  # the worker's engine, when its beacon reports it


def _engine(data: object) -> Engine | None:
    if not isinstance(data, dict) or data.get("state") not in ENGINE_STATES:
        return None
    since = data.get("since")
    detail = data.get("detail")
    return Engine(
        str(data["state"]),
        float(since) if isinstance(since, int | float) else 0.0,
        str(detail)[:500] if isinstance(detail, str) else "",
    )


def ask_beacon(client: SyncHttp, url: str, timeout: float) -> Answer:
    """GET `url` once, within `timeout` seconds in all, reading at most MAX_ANSWER_BYTES, and say what
    answered. A worker's beacon answers 200, or 503 while its engine is orphaned (with the same body)."""
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
    if status not in (200, 503):
        return Answer(False, True, f"HTTP {status} ({snippet!r}), not a beacon's /ready")
    try:
        data: Any = bounded.loads_json(body)
    except (ValueError, UnicodeDecodeError):
        return Answer(False, True, f"HTTP {status} but not JSON ({snippet!r}), not a beacon's /ready")
    if not isinstance(data, dict):
        return Answer(False, True, f"HTTP {status} with JSON that is not an object ({snippet!r})")
    role, rank, address = data.get("role"), data.get("rank"), data.get("address")
    engine = _engine(data.get("engine"))
    if role == "worker" and (status == 200 or engine is not None):
        return Answer(True, True, f"rank {rank}", engine)
    if status != 200:
        return Answer(False, True, f"HTTP {status} ({snippet!r}), not a beacon's /ready")
    return Answer(
        False, True, f"the beacon of role {role!r} (rank {rank}, address {address}), not of the worker"
    )


def _reason(err: Exception) -> str:
    text = str(err) or type(err).__name__
    return "connection refused" if "refused" in text.lower() else text
