"""Tier `realvllm`: what vLLM 0.32 does on SIGTERM with `--shutdown-timeout` (the flag
services.vllm-station.serve renders from `shutdownTimeout`), measured on the real CPU build: the streams
running at the SIGTERM finish with every token, and the process exits after them, within the timeout and
the 30 s the unit leaves above it before the runtime's SIGKILL. New requests after the SIGTERM are not
served: they get an error (vLLM 0.32 answers 500, not a clean 503), which is why the serving unit drains
the gateway first (docs/serve.md, "The stop sequence"). Figures are printed as `shutdown figure:`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.realvllm

STREAMS = 3
TOKENS = 400
SHUTDOWN_TIMEOUT_S = 60


def figure(name: str, value: object) -> None:
    print(f"shutdown figure: {name} = {value}", file=sys.stderr)


def test_sigterm_lets_running_streams_finish_and_serves_nothing_new(vllm_server: Callable[..., Any]) -> None:
    srv = vllm_server("tools", extra_args=["--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S)])
    results: dict[int, dict[str, Any]] = {}
    started = [threading.Event() for _ in range(STREAMS)]

    def stream(i: int) -> None:
        body = {"model": srv.served_name, "prompt": "hello " * 8, "max_tokens": TOKENS, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
        got: dict[str, Any] = {"finish": None, "usage": None, "error": None}
        try:
            with httpx.stream("POST", srv.api_url + "/completions", json=body, timeout=180,
                              trust_env=False) as resp:  # fmt: skip
                got["status"] = resp.status_code
                for line in resp.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    chunk = json.loads(line[6:])
                    if chunk["choices"]:
                        started[i].set()
                        got["finish"] = chunk["choices"][0].get("finish_reason") or got["finish"]
                    if chunk.get("usage"):
                        got["usage"] = chunk["usage"]
        except httpx.HTTPError as exc:
            got["error"] = repr(exc)
        results[i] = got

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(STREAMS)]
    for t in threads:
        t.start()
    for ev in started:
        assert ev.wait(120), f"a stream never started\n{srv.log_tail()}"
    assert srv.proc is not None
    proc = srv.proc
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)  # what `docker stop` sends the container's main process
    time.sleep(0.5)
    try:
        late = httpx.post(srv.api_url + "/completions", json={"model": srv.served_name, "prompt": "x",
                          "max_tokens": 4}, timeout=30, trust_env=False)  # fmt: skip
        late_answer: object = late.status_code
    except httpx.HTTPError as exc:
        late_answer = type(exc).__name__
    for t in threads:
        t.join(timeout=180)
    finished_s = time.monotonic() - t0
    proc.wait(timeout=SHUTDOWN_TIMEOUT_S + 30)
    gone_s = time.monotonic() - t0
    figure("streams finished after the SIGTERM (s)", round(finished_s, 1))
    figure("process gone after the SIGTERM (s)", round(gone_s, 1))
    figure("a new request 0.5 s after the SIGTERM", late_answer)

    for i in range(STREAMS):
        r = results[i]
        assert r["error"] is None and r["status"] == 200, r
        assert r["finish"] == "length", f"stream {i} was cut: {r}"
        assert r["usage"]["completion_tokens"] == TOKENS, r
    assert late_answer != 200, "vLLM served a request that arrived after its SIGTERM"
    assert "mode=drain timeout=60s" in srv.log_path.read_text(errors="replace")
    # within the timeout, and inside the 30 s the unit leaves between it and the runtime's SIGKILL
    assert gone_s < SHUTDOWN_TIMEOUT_S + 30, gone_s
