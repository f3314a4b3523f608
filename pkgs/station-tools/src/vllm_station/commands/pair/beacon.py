"""The pair beacon: a read-only HTTP server on a station's rail address (aiohttp).

- `GET /ready` → 200 `{"role": "head"|"worker", "rank": 0|1, "address": ADDR}`: the peer's ordering
  probe (`station pair wait-worker`). The unit runs exactly while the local serving unit is active.
  With `--head ADDR --master-port PORT` (the worker's beacon) the answer also carries the engine's
  state, `"engine": {"state", "since", "detail"}` (`EngineWatch`), and is 503 while it is `orphaned`:
  - `waiting`  the engine holds no connection to the head's rendezvous port: ready for a head;
  - `joined`   it holds one (ESTABLISHED): in a session with a head;
  - `orphaned` the head closed its end (CLOSE_WAIT), or the connection this beacon saw is gone: the
    session ended, and a headless vLLM worker never joins another head: it must be restarted;
  - `unknown`  the connection table could not be read (said in `detail`).
  The beacon samples the kernel's connection table once a second (and at each /ready), so a session
  of a second or more is seen; it starts and stops with the serving unit, so its memory of a session
  is the engine's lifetime.
- `GET /stamp` → the verify stamp file (`--stamp FILE`), read at each request, as application/json;
  404 with a JSON error when there is none, it is not a regular file, cannot be read or is over 1 MiB.
- Anything else: 404; any method but GET/HEAD: 405. Errors are JSON `{"error": "…"}`.

Nothing else is served (no other file, no listing). Request lines and header fields are bounded
(aiohttp's parser limits below), idle keep-alive connections close after a few seconds. It logs one
line when it is up and none per request. SIGTERM ends it with exit 0 (SIGINT with 130).
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from vllm_station.errors import EXIT_INTERRUPTED, EXIT_OK, StationError, UsageError
from vllm_station.host.tcp import connections_to
from vllm_station.net import bare_host, url_host

ROLE_RANKS = {"head": 0, "worker": 1}
MAX_STAMP_BYTES = 1024 * 1024
MAX_LINE_BYTES = 4096  # request line
MAX_FIELD_BYTES = 4096  # one header field
KEEPALIVE_S = 5.0
WATCH_INTERVAL_S = 1.0  # how often the engine watch reads the connection table
# The head's end closed (the engine has not closed its own yet): the session is over.
CLOSED_BY_HEAD = ("CLOSE_WAIT", "LAST_ACK")


@dataclass(frozen=True)
class BeaconConfig:
    bind: str  # bare: 192.168.100.2, ::1
    port: int
    role: str
    rank: int
    stamp: Path | None = None
    head: str | None = None  # the worker's beacon: the head's rail address and rendezvous port,
    master_port: int | None = None  # whose connection tells the engine's state (EngineWatch)

    @classmethod
    def checked(
        cls, bind: str, port: int, role: str, rank: int, stamp: Path | None,
        head: str | None = None, master_port: int | None = None,
    ) -> BeaconConfig:  # fmt: skip
        if role not in ROLE_RANKS:
            raise UsageError(f"--role must be head or worker, got {role!r}")
        if rank != ROLE_RANKS[role]:
            raise UsageError(
                f"--role {role} runs rank {ROLE_RANKS[role]}, but --rank is {rank} (head = 0, worker = 1)"
            )
        if not 0 < port < 65536:
            raise UsageError(f"--port must be 1-65535, got {port}")
        if not bare_host(bind):
            raise UsageError("--bind must be this station's rail address, got ''")
        if (head is None) != (master_port is None):
            raise UsageError("--head and --master-port go together (the head's rendezvous address)")
        if head is not None and role != "worker":
            raise UsageError("--head/--master-port watch a worker's engine: only with --role worker")
        return cls(bare_host(bind), port, role, rank, stamp, bare_host(head) if head else None, master_port)


def _when(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))


@dataclass
class EngineWatch:
    """The worker engine's state, from its TCP connection to the head's rendezvous port.

    A headless vLLM worker dials the head's `--master-addr:--master-port` (torch.distributed's TCP
    store) until the head listens, and keeps that connection for the life of the session."""

    head: str
    port: int
    read: Callable[[str, int], list[str]] = connections_to
    clock: Callable[[], float] = time.time
    on_change: Callable[[str], None] | None = None  # told "STATE: DETAIL" at each change of state
    state: str = "waiting"
    since: float = field(default=0.0)
    joined_at: float | None = None
    detail: str = ""

    def __post_init__(self) -> None:
        self.since = self.clock()
        self.detail = self._waiting()

    @property
    def target(self) -> str:
        return f"{url_host(self.head)}:{self.port}"

    def _waiting(self) -> str:
        return f"no connection to the head's rendezvous port {self.target}: ready for a head"

    def sample(self) -> None:
        now = self.clock()
        try:
            states = self.read(self.head, self.port)
        except StationError as err:
            self._set("unknown", now, str(err))
            return
        if "ESTABLISHED" in states:
            if self.state != "joined":
                self.joined_at = now
            self._set("joined", now, f"in a session with the head: connected to {self.target} since "
                      f"{_when(self.joined_at or now)}")  # fmt: skip
            return
        closed = [s for s in states if s in CLOSED_BY_HEAD]
        if closed or self.joined_at is not None:
            if self.state == "orphaned":
                return
            how = (
                f"the head closed its end of the rendezvous connection {self.target} ({closed[0]})"
                if closed
                else f"the connection to {self.target} is gone"
            )
            joined = f", joined {_when(self.joined_at)}" if self.joined_at is not None else ""
            self._set("orphaned", now, f"its session with the head ended at {_when(now)}: {how}{joined}; "
                      "a headless vLLM worker never joins another head: restart it")  # fmt: skip
            return
        self._set("waiting", now, self._waiting())

    def _set(self, state: str, now: float, detail: str) -> None:
        changed = state != self.state
        if changed:
            self.since = now
        self.state, self.detail = state, detail
        if changed and self.on_change is not None:
            self.on_change(f"engine {state}: {detail}")

    def report(self) -> dict[str, object]:
        return {"state": self.state, "since": round(self.since, 3), "detail": self.detail}


def _json(status: int, payload: object, **headers: str) -> web.Response:
    body = json.dumps(payload).encode() + b"\n"
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


def read_stamp(path: Path | None) -> tuple[int, bytes]:
    """(200, the file's bytes) or (404, a JSON error). Never blocks on a FIFO, never reads over 1 MiB."""
    if path is None:
        return 404, _error_body("this beacon serves no verify stamp (no --stamp)")
    try:
        # O_NONBLOCK: a FIFO put there must not hang the request; regular files ignore the flag.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return 404, _error_body(f"no verify stamp at {path} (the checkpoint was not verified here)")
    except OSError as err:
        return 404, _error_body(f"cannot read the verify stamp {path}: {err.strerror or err}")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return 404, _error_body(f"{path} is not a regular file")
        if info.st_size > MAX_STAMP_BYTES:
            return 404, _error_body(f"{path} is {info.st_size} bytes, over the 1 MiB limit of a stamp")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_STAMP_BYTES + 1)
    except OSError as err:
        return 404, _error_body(f"cannot read the verify stamp {path}: {err.strerror or err}")
    finally:
        os.close(fd)
    if len(data) > MAX_STAMP_BYTES:
        return 404, _error_body(f"{path} grew over the 1 MiB limit of a stamp while being read")
    return 200, data


def _error_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode() + b"\n"


def make_app(cfg: BeaconConfig, watch: EngineWatch | None = None) -> web.Application:
    who = {"role": cfg.role, "rank": cfg.rank, "address": cfg.bind}
    ready = json.dumps(who).encode() + b"\n"

    async def get_ready(_request: web.Request) -> web.Response:
        if watch is None:
            return web.Response(body=ready, content_type="application/json")
        watch.sample()
        body = json.dumps({**who, "engine": watch.report()}).encode() + b"\n"
        status = 503 if watch.state == "orphaned" else 200
        return web.Response(status=status, body=body, content_type="application/json")

    async def get_stamp(_request: web.Request) -> web.Response:
        # A local file of a few KiB: read inline, the event loop waits a fraction of a millisecond.
        status, body = read_stamp(cfg.stamp)
        return web.Response(status=status, body=body, content_type="application/json")

    async def anything_else(request: web.Request) -> web.Response:
        if request.method not in ("GET", "HEAD"):
            return _json(
                405, {"error": f"method {request.method} not allowed: GET or HEAD"}, Allow="GET, HEAD"
            )
        return _json(404, {"error": f"not found: {request.path} (this beacon serves /ready and /stamp)"})

    app = web.Application()
    app.router.add_get("/ready", get_ready)
    app.router.add_get("/stamp", get_stamp)
    # Registered last: it also takes other methods on /ready and /stamp, so those answer 405.
    app.router.add_route("*", "/{tail:.*}", anything_else)
    return app


async def _serve(cfg: BeaconConfig, announce: Callable[[str], None]) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[int] = []

    def on_signal(signum: int) -> None:
        received.append(signum)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    watch = None
    if cfg.head is not None and cfg.master_port is not None:
        watch = EngineWatch(cfg.head, cfg.master_port, on_change=announce)
        watch.sample()
    runner = web.AppRunner(
        make_app(cfg, watch),
        handle_signals=False,
        access_log=None,
        keepalive_timeout=KEEPALIVE_S,
        max_line_size=MAX_LINE_BYTES,
        max_field_size=MAX_FIELD_BYTES,
    )
    await runner.setup()
    watching: asyncio.Task[None] | None = None
    try:
        site = web.TCPSite(runner, cfg.bind, cfg.port)
        try:
            await site.start()
        except OSError as err:
            raise _bind_error(cfg, err) from None
        stamp = f"/stamp from {cfg.stamp}" if cfg.stamp else "no /stamp (no --stamp)"
        engine = f", the engine's state from its connection to {watch.target}" if watch else ""
        announce(
            f"beacon of the {cfg.role} (rank {cfg.rank}) on http://{url_host(cfg.bind)}:{cfg.port}: "
            f"/ready{engine}, {stamp}"
        )
        watching = asyncio.create_task(_watch(watch)) if watch else None
        await stop.wait()
    finally:
        if watching is not None:
            watching.cancel()
        await runner.cleanup()
    return EXIT_INTERRUPTED if received and received[0] == signal.SIGINT else EXIT_OK


async def _watch(watch: EngineWatch) -> None:
    """Sample once a second (each change of state is said once: one journal line)."""
    while True:
        await asyncio.sleep(WATCH_INTERVAL_S)
        watch.sample()


def _bind_error(cfg: BeaconConfig, err: OSError) -> StationError:
    where = f"{cfg.bind} port {cfg.port}"
    if isinstance(err, socket.gaierror):
        return UsageError(f"--bind {cfg.bind!r} is not an address: {err.strerror or err}")
    if err.errno == errno.EADDRINUSE:
        return StationError(
            f"cannot listen on {where}: the port is in use (another beacon? `ss -ltnp 'sport = :{cfg.port}'`)"
        )
    if err.errno == errno.EADDRNOTAVAIL:
        return UsageError(
            f"cannot listen on {where}: {cfg.bind} is not an address of this host; --bind must be this "
            "station's rail address, configured on the rail interface"
        )
    if err.errno == errno.EACCES:
        return UsageError(f"cannot listen on {where}: permission denied (ports below 1024 need privileges)")
    return StationError(f"cannot listen on {where}: {err.strerror or err}")


def serve(cfg: BeaconConfig, announce: Callable[[str], None]) -> int:
    """Serve until SIGTERM (exit 0) or SIGINT (130)."""
    return asyncio.run(_serve(cfg, announce))
