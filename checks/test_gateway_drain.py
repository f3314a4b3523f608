"""Drain, for real: Debian's nginx runs the gateway NixOS renders (checks/examples/gateway-station.nix, one
station behind it: the `single` variant of checks/gateway/render.nix) in front of a `station simulate`
station, and the real `station drain` / `station undrain` write the flags the rendered configuration tests.

What is proved: while a stream is in flight, `station drain` turns every new request — the API and
`/health` — into the gateway's 503 (JSON, `Retry-After`), none of them reaches the station (the station's
own request count and the access log's empty upstream), and the stream in flight completes to `[DONE]`
with every token; `station undrain` routes again. The stopping flag (the serving unit's first stop step)
does the same and goes away with the unit's runtime directory (here: removed by the test, as systemd would).
The flags' paths are the rendered configuration's (modules/lib/contract.nix), mapped to test directories.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway.harness import (
    ERRORS,
    NGINX,
    Gateway,
    Ports,
    Upstreams,
    chat_body,
    finish_render,
    generate_tls,
    new_key,
    start_render,
)
from nixenv import require_nix, require_tree

pytestmark = pytest.mark.nix_nixos

DRAIN_DIR = "/var/lib/vllm-station-drain/"  # contract.drainDir
RUN_DIR = "/run/vllm-station/"  # the serving unit's RuntimeDirectory, where contract.stoppingFlag lies
DRAINING = json.loads(ERRORS.read_text())["503-draining"]


@dataclass
class Env:
    gw: Gateway
    ups: Upstreams
    key: str
    drain_dir: Path
    run_dir: Path

    def station(self, *args: str) -> dict[str, Any]:
        """The real `station drain|undrain … --json` on the flags the rendered nginx reads."""
        env = {**os.environ, "STATION_DRAIN_DIR": str(self.drain_dir),
               "STATION_STOPPING_FLAG": str(self.run_dir / "stopping")}  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "vllm_station", *args, "--json"], env=env,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        out: dict[str, Any] = json.loads(proc.stdout)
        return out

    def requests_seen(self) -> int:
        return int(self.ups.sims["local"].stats()["requests"])


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    require_nix()
    tree = require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "the gateway drain tests")
    if not Path(NGINX).exists():
        pytest.skip("nginx is not installed: apt-get install nginx (scripts/check installs it)")
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: apt-get install openssl (the test CA)")
    work = tmp_path_factory.mktemp("gateway-drain")
    ports = Ports.free()
    render = start_render(ports, str(tree), ("single",))
    try:
        tls = generate_tls(work / "pki", ["llm.example.com", "127.0.0.1"])
        names = ("alice", "bob", "batch", "limited", "bench", "ops")
        keys = {name: new_key(name) for name in names}
        upstream_key = new_key("station")
        (work / "station-key").write_text(upstream_key + "\n")
        # 50 ms between tokens: a 60-token stream lasts ~3 s, long enough to drain in its middle.
        args = {"local": ["--ttft", "0.02", "--itl", "0.05"]}
        with Upstreams(ports, args, work / "station-key") as ups:
            rendered = finish_render(render)["single"]
            # nginx's workers (not root: Debian's default user) test the flags: directories they can
            # reach, outside pytest's private (0700) temporary tree.
            flags = Path(tempfile.mkdtemp(prefix="station-drain-"))
            flags.chmod(0o755)
            drain_dir, run_dir = flags / "drain", flags / "run-vllm-station"
            drain_dir.mkdir(mode=0o755)
            run_dir.mkdir(mode=0o755)
            gw = Gateway(rendered, work / "gw", ports.gateway_rr, tls, keys, upstream_key)
            gw.extra_paths = {DRAIN_DIR: drain_dir, RUN_DIR: run_dir}
            try:
                with gw:
                    yield Env(gw, ups, keys["alice"], drain_dir, run_dir)
            finally:
                shutil.rmtree(flags, ignore_errors=True)
    finally:
        if render.poll() is None:
            render.kill()
            render.wait()


def drained_answer(resp: httpx.Response) -> None:
    assert resp.status_code == 503, resp.text
    assert resp.headers["content-type"] == "application/json"
    assert resp.headers["retry-after"] == "10"
    assert resp.json() == {"error": {**DRAINING, "param": None}}


def test_the_rendered_configuration_tests_both_flags(env: Env) -> None:
    conf = env.gw.rendered["nginxConf"]
    assert conf.count("if (-f /var/lib/vllm-station-drain/drained)") >= 2  # the API paths and /health
    assert conf.count("if (-f /run/vllm-station/stopping)") >= 2


def test_a_drained_station_gets_no_new_requests_while_its_stream_completes(env: Env) -> None:
    with env.gw.client(env.key) as c:
        assert c.get("/health").status_code == 200
        assert c.post("/v1/chat/completions", json=chat_body()).status_code == 200
    before = env.requests_seen()

    # A stream in flight: 60 tokens, 50 ms apart (its exceptions come back through the future).
    tokens: list[str] = []
    done = threading.Event()
    first_token = threading.Event()

    def stream() -> None:
        with env.gw.client(env.key, timeout=60) as c, c.stream(
            "POST", "/v1/chat/completions", json=chat_body(max_tokens=60, stream=True)
        ) as resp:
            assert resp.status_code == 200
            for line in resp.iter_lines():
                if line.startswith("data: {"):
                    delta = json.loads(line[6:])["choices"]
                    if delta and delta[0]["delta"].get("content"):
                        tokens.append(delta[0]["delta"]["content"])
                        first_token.set()
                elif line == "data: [DONE]":
                    done.set()

    pool = ThreadPoolExecutor(1)
    streaming = pool.submit(stream)
    assert first_token.wait(30), "the stream never started"

    status = env.station("drain", "--reason", "test: planned work")
    assert status["routed"] is False and status["drained"]["present"] and status["changed"]
    assert status["drained"]["reason"] == "test: planned work"
    t_drained = time.monotonic()

    # New requests while the stream runs: all refused by the gateway, none reaches the station.
    with env.gw.client(env.key) as c:
        for _ in range(5):
            drained_answer(c.post("/v1/chat/completions", json=chat_body()))
        drained_answer(c.get("/health"))
        drained_answer(c.get("/v1/models"))
    refused_while_streaming = not done.is_set()

    streaming.result(timeout=60)
    pool.shutdown()
    assert done.is_set(), "the stream in flight did not complete"
    assert len(tokens) == 60, f"the stream lost tokens: {len(tokens)} of 60"
    assert refused_while_streaming, "the stream ended before the new requests were refused: nothing proved"
    print(f"gateway figure: stream finished {time.monotonic() - t_drained:.2f} s after the drain",
          file=sys.stderr)  # fmt: skip
    assert env.requests_seen() == before + 1, "a request reached the drained station"
    log = [e for e in env.gw.access_log() if e["status"] == "503"]
    assert len(log) >= 7 and all(e["upstream"] == "" for e in log), log

    # Draining twice keeps the first reason; undrain routes again.
    assert env.station("drain", "--reason", "again")["drained"]["reason"] == "test: planned work"
    status = env.station("undrain")
    assert status["routed"] is True and status["changed"] is True
    with env.gw.client(env.key) as c:
        assert c.get("/health").status_code == 200
        assert c.post("/v1/chat/completions", json=chat_body()).status_code == 200
    assert env.requests_seen() == before + 2
    assert env.station("undrain")["changed"] is False


def test_the_stopping_flag_drains_until_the_unit_is_gone(env: Env) -> None:
    status = env.station("drain", "--stopping")
    assert status["stopping"]["present"] and status["routed"] is False
    assert status["drained"]["present"] is False
    with env.gw.client(env.key) as c:
        drained_answer(c.post("/v1/chat/completions", json=chat_body()))
        drained_answer(c.get("/health"))
    # undrain is the operator's flag only: the stopping flag stays until systemd removes the runtime dir
    assert env.station("undrain")["stopping"]["present"] is True
    (env.run_dir / "stopping").unlink()  # what systemd does with RuntimeDirectory= when the stop is over
    assert env.station("drain", "--status")["routed"] is True
    with env.gw.client(env.key) as c:
        assert c.get("/health").status_code == 200
