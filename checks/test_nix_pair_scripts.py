"""Tier `nix_lib`: the pair's ordering scripts and the serving unit's stamp check, rendered by the modules
(checks/lib harness, nixpkgs lib only) and then run for real with the host's bash, curl and jq against
real listeners on 127.0.0.x.

- head's ExecStartPre (wait for the worker's beacon): fails, bounded, naming the worker's address while
  nothing answers; passes as soon as the beacon serves /ready.
- worker beacon's ExecStop (head stops first): waits while the head's master port accepts connections,
  gives up at its bound, returns at once when the port closes or when the worker already died.
- the serving unit's stamp check: refuses a missing stamp and a stamp of another revision.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nixenv import REPO, eval_json, require_nix, require_tree

HEAD = "127.0.0.1"
WORKER = "127.0.0.2"
REV = "0123456789abcdef0123456789abcdef01234567"
FAKE = "/nix/store/00000000000000000000000000000000-{name}/bin/{name}"

pytestmark = pytest.mark.nix_lib


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _render(tmp: Path, master_port: int, beacon_port: int) -> dict[str, str]:
    lib_tree = require_tree("NIXPKGS_LIB", "lib/default.nix", "pair script tests (rendered with checks/lib)")
    require_nix()
    model_dir = tmp / "model"
    expr = f"""
      let
        lib = import {lib_tree}/lib;
        h = import {REPO}/checks/lib/harness.nix {{ inherit lib; }};
        c = (h.eval [
        {{
          services.vllm-station.serve = {{ enable = true; image = h.image; model = "{model_dir}"; }};
          services.vllm-station.download = {{
            enable = true;
            models.m = {{ model = "org/m"; revision = "{REV}"; dir = "{model_dir}"; }};
          }};
          services.vllm-station.pair = {{
            enable = true; role = "head"; headAddress = "{HEAD}"; workerAddress = "{WORKER}";
            masterPort = {master_port}; beaconPort = {beacon_port};
            workerWaitSeconds = 3; headStopWaitSeconds = 3; pollSeconds = 1;
          }};
        }}
        ]).config;
      in
      {{
        waitForWorker = c.services.vllm-station.pair.scripts.waitForWorker.text;
        waitForHeadStop = c.services.vllm-station.pair.scripts.waitForHeadStop.text;
        requireStamp = c.services.vllm-station.download.requireStampScript.text;
      }}
    """
    scripts: dict[str, str] = eval_json(["-E", expr], timeout=120)
    host_tools = {FAKE.format(name=name): shutil.which(name) or name for name in ("curl", "jq")}
    for key, text in scripts.items():
        for fake, real in host_tools.items():
            text = text.replace(fake, real)
        scripts[key] = text
    return scripts


def _run(script: str, tmp: Path, *, env: dict[str, str] | None = None) -> tuple[int, str, float]:
    path = tmp / "script.sh"
    path.write_text(script)
    t0 = time.monotonic()
    proc = subprocess.run(
        ["bash", str(path)], capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    return proc.returncode, proc.stderr, time.monotonic() - t0


@pytest.fixture
def ports() -> tuple[int, int]:
    return _free_port(HEAD), _free_port(WORKER)


@pytest.fixture
def scripts(tmp_path: Path, ports: tuple[int, int]) -> dict[str, str]:
    if shutil.which("curl") is None:
        pytest.skip("curl not installed: the rendered scripts cannot run here; install curl to enable")
    return _render(tmp_path, *ports)


class _Beacon(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def beacon(tmp_path: Path, ports: tuple[int, int]) -> Iterator[None]:
    root = tmp_path / "beacon"
    root.mkdir()
    (root / "ready").write_text('{"role": "worker"}\n')
    handler = lambda *a: _Beacon(*a, directory=str(root))
    server = http.server.ThreadingHTTPServer((WORKER, ports[1]), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield
    server.shutdown()
    server.server_close()


def test_head_waits_then_names_the_worker(scripts: dict[str, str], tmp_path: Path) -> None:
    rc, err, took = _run(scripts["waitForWorker"], tmp_path)
    assert rc == 1, err
    assert f"the worker {WORKER} did not answer on http://{WORKER}:" in err, err
    assert "start the worker first" in err, err
    # the scripts count whole seconds (date +%s): a 3 s bound waits between 2 and 3 s
    assert 1.5 <= took < 15, f"bounded wait of 3 s took {took:.1f} s"


def test_head_starts_once_the_beacon_answers(scripts: dict[str, str], tmp_path: Path, beacon: None) -> None:
    rc, err, took = _run(scripts["waitForWorker"], tmp_path)
    assert rc == 0, err
    assert f"worker {WORKER} is up" in err, err
    assert took < 3, took


def _fake_systemctl(tmp: Path, state: str) -> dict[str, str]:
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "systemctl"
    exe.write_text(f"#!/bin/sh\necho {state}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bindir}:{os.environ['PATH']}"}


def test_worker_waits_for_the_head_to_stop(
    scripts: dict[str, str], tmp_path: Path, ports: tuple[int, int]
) -> None:
    env = _fake_systemctl(tmp_path, "active")
    with socket.create_server((HEAD, ports[0])) as listener:
        listener.settimeout(0.1)
        rc, err, took = _run(scripts["waitForHeadStop"], tmp_path, env=env)
    assert rc == 0, err
    assert f"waiting for the head {HEAD} to stop first" in err, err
    assert f"the head {HEAD} still listens on port {ports[0]} after 3 s; stopping the worker anyway" in err, (
        err
    )
    assert 1.5 <= took < 15, took  # whole-second deadline: between 2 and 3 s


def test_worker_stops_at_once_when_the_head_is_down(scripts: dict[str, str], tmp_path: Path) -> None:
    rc, err, took = _run(scripts["waitForHeadStop"], tmp_path, env=_fake_systemctl(tmp_path, "active"))
    assert rc == 0, err
    assert f"head {HEAD} is down" in err, err
    assert took < 2.5, took


def test_worker_that_already_died_does_not_wait(
    scripts: dict[str, str], tmp_path: Path, ports: tuple[int, int]
) -> None:
    with socket.create_server((HEAD, ports[0])):
        rc, err, took = _run(scripts["waitForHeadStop"], tmp_path, env=_fake_systemctl(tmp_path, "failed"))
    assert rc == 0 and err == "", err
    assert took < 2.5, took


def test_stamp_check(scripts: dict[str, str], tmp_path: Path) -> None:
    if shutil.which("jq") is None:
        pytest.skip("jq not installed: the revision comparison cannot run here; install jq to enable")
    model = tmp_path / "model"
    model.mkdir()
    rc, err, _ = _run(scripts["requireStamp"], tmp_path)
    assert rc == 1 and "is not verified" in err and "station verify" in err, err

    stamp = model / ".station-verified.json"
    stamp.write_text(json.dumps({"version": 1, "revision": "f" * 40}))
    rc, err, _ = _run(scripts["requireStamp"], tmp_path)
    assert rc == 1 and f"records revision {'f' * 40}, the configuration declares {REV}" in err, err

    stamp.write_text(json.dumps({"version": 1, "revision": REV}))
    rc, err, _ = _run(scripts["requireStamp"], tmp_path)
    assert rc == 0 and "verified" in err, err
