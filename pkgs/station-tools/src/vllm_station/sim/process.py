"""`station simulate` in a subprocess of its own session (tests, scripts/bench-accuracy)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from typing import Any

from vllm_station import bounded
from vllm_station.api.transport import SyncHttp
from vllm_station.process import stop_session


class SimProcess:
    """`station simulate` in a subprocess of its own session (tests, scripts/bench-accuracy): real timing,
    no shared GIL. `with SimProcess(["--ttft", "0.05"]) as sim: sim.base_url, sim.stats()`; stopped by
    process group on exit."""

    def __init__(self, args: list[str], python: str | None = None, start_timeout: float = 20.0) -> None:
        self.args = args
        self.python = python or sys.executable
        self.start_timeout = start_timeout
        self.base_url = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: list[str] = []

    def __enter__(self) -> SimProcess:
        cmd = [self.python, "-m", "vllm_station", "simulate", "--port", "0", *self.args]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, start_new_session=True)
        assert self.proc.stderr is not None
        deadline = time.monotonic() + self.start_timeout
        line = b""
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            if b"listening on " in line:
                self.base_url = line.split(b"listening on ", 1)[1].split()[0].decode()
                # keep draining stderr so a chatty server can never block on a full pipe
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        self.__exit__()
        raise RuntimeError(f"station simulate did not start: {line.decode(errors='replace')}")

    def _drain(self) -> None:
        proc = self.proc
        if proc is not None and proc.stderr is not None:
            with contextlib.suppress(ValueError, OSError):
                for raw in proc.stderr:
                    self.log.append(raw.decode(errors="replace"))

    def stats(self) -> dict[str, Any]:
        with SyncHttp() as http:
            status, body = http.fetch("GET", self.base_url + "/sim/stats", timeout=10)
        if status != 200:
            raise RuntimeError(f"GET /sim/stats: HTTP {status}")
        data: dict[str, Any] = bounded.loads_json(body)
        return data

    def reset(self) -> None:
        with SyncHttp() as http:
            status, _ = http.fetch("POST", self.base_url + "/sim/reset", timeout=10)
        if status != 200:
            raise RuntimeError(f"POST /sim/reset: HTTP {status}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        stop_session(self.proc)
        self.proc = None
