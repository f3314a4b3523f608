"""The pair beacon: a read-only HTTP server on a station's rail address (aiohttp).

- `GET /ready` → 200 `{"role": "head"|"worker", "rank": 0|1, "address": ADDR}`: the peer's ordering
  probe (`station pair wait-worker`). The unit runs exactly while the local serving unit is active.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from vllm_station.errors import EXIT_INTERRUPTED, EXIT_OK, StationError, UsageError
from vllm_station.net import bare_host, url_host

ROLE_RANKS = {"head": 0, "worker": 1}
MAX_STAMP_BYTES = 1024 * 1024
MAX_LINE_BYTES = 4096  # request line
MAX_FIELD_BYTES = 4096  # one header field
KEEPALIVE_S = 5.0


@dataclass(frozen=True)
class BeaconConfig:
    bind: str  # bare: 192.168.100.2, ::1
    port: int
    role: str
    rank: int
    stamp: Path | None = None

    @classmethod
    def checked(cls, bind: str, port: int, role: str, rank: int, stamp: Path | None) -> BeaconConfig:
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
        return cls(bare_host(bind), port, role, rank, stamp)


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


def make_app(cfg: BeaconConfig) -> web.Application:
    ready = json.dumps({"role": cfg.role, "rank": cfg.rank, "address": cfg.bind}).encode() + b"\n"

    async def get_ready(_request: web.Request) -> web.Response:
        return web.Response(body=ready, content_type="application/json")

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
    runner = web.AppRunner(
        make_app(cfg),
        handle_signals=False,
        access_log=None,
        keepalive_timeout=KEEPALIVE_S,
        max_line_size=MAX_LINE_BYTES,
        max_field_size=MAX_FIELD_BYTES,
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, cfg.bind, cfg.port)
        try:
            await site.start()
        except OSError as err:
            raise _bind_error(cfg, err) from None
        stamp = f"/stamp from {cfg.stamp}" if cfg.stamp else "no /stamp (no --stamp)"
        announce(
            f"beacon of the {cfg.role} (rank {cfg.rank}) on http://{url_host(cfg.bind)}:{cfg.port}: "
            f"/ready, {stamp}"
        )
        await stop.wait()
    finally:
        await runner.cleanup()
    return EXIT_INTERRUPTED if received and received[0] == signal.SIGINT else EXIT_OK


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
