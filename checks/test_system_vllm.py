"""Tier `system`, real vLLM: checks/examples/cpu-station.nix's unit under a booted systemd, its container a
real vLLM (the CPU build's venv, made into an image from this machine's files and pulled by digest) serving
the project's small tool-calling model. Proves the rendered `docker run … IMAGE MODEL --flags` is a command
line vLLM itself accepts, and that the unit's readiness and smoke pass against the real server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nixenv import CACHE, REPO, require_nix, require_tree
from system.common import FIGURES, free_port, require_realvllm, require_tools
from system.engine_log import EngineDeath, engine_death, machine_memory
from system.images import Registry, build_vllm_image
from system.machine import MachineError
from system.station import Station, render, station_venv

pytestmark = pytest.mark.system

VENV = Path(os.environ.get("STATION_VLLM_VENV", CACHE / "vllm-venv"))
MODEL = Path(os.environ.get("STATION_MODELS", CACHE / "models")) / "tiny-tools"
MODEL_DIR = "/var/lib/vllm-station-models/tiny-tools"  # checks/examples/cpu-station.nix
SERVE = "vllm-station.service"
CONTAINER = "vllm-station"  # serve.nix: the container is named after the unit


@pytest.fixture(scope="module")
def cpu_station(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Station]:
    require_nix()
    tree = require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "the system tier (rendered units)")
    require_tools()
    require_realvllm(VENV, MODEL)
    registry = Registry(CACHE / "system" / "registry", free_port())
    registry.start()
    station = None
    try:
        t = time.monotonic()
        image = build_vllm_image(registry, tmp_path_factory.mktemp("vllm-image"), VENV)
        FIGURES.record("vLLM CPU image build or reuse (s)", round(time.monotonic() - t, 1))
        rendered = render(str(tree), "cpu-station", image)
        bin_dir = station_venv(CACHE)
        station = Station(rendered, Path(tmp_path_factory.mktemp("cpu")), "cpu", bin_dir)
        shutil.copytree(MODEL, station.work / "var" / MODEL_DIR.removeprefix("/var/"))
        station.boot(runtime="docker")
        station.machine.run([str(bin_dir / "station"), "verify", MODEL_DIR], timeout=120)
        yield station
    finally:
        if station is not None:
            # the whole engine log stays with the run (the report keeps only a failure's own message)
            log = station.work / "vllm-station.journal"
            log.write_text(station.machine.journal(SERVE))
            print(f"the serving unit's whole journal: {log}")
            station.stop()
        registry.stop()


def _start(st: Station) -> EngineDeath | None:
    """`systemctl start` the serving unit: None when active; how the engine died when the start failed
    because the CPU engine died under it (anything else fails the test here, with the whole log)."""
    m = st.machine
    try:
        m.systemctl("start", SERVE, timeout=600)  # returns when wait-ready succeeded (ExecStartPost)
        return None
    except MachineError as err:
        journal = m.journal(SERVE)
        state = m.run(["docker", "inspect", "--format", "{{json .State}}", CONTAINER], check=False).stdout
        death = engine_death(journal, state)
        memory = machine_memory(m.name)
        if death is None:
            pytest.fail(f"{err}\n{memory}\nthe serving unit's whole journal:\n{journal}", pytrace=False)
        return EngineDeath(death.reason, death.signal, f"{death.log}\n{memory}")


def test_real_vllm_serves_the_rendered_command_line(cpu_station: Station) -> None:
    st = cpu_station
    m = st.machine
    t0 = time.monotonic()
    death = _start(st)
    if death is not None:
        # Environmental (the CPU engine's process died under it: a kill, a crash): once more, said so.
        print(f"environmental retry: the CPU engine died during its start ({death.reason}); starting it once more")
        m.systemctl("stop", SERVE, timeout=120, check=False)
        m.systemctl("reset-failed", SERVE, check=False)
        again = _start(st)
        assert again is None, (
            f"the CPU engine died during its start twice: {death.reason}; then {again.reason}\n"
            f"first start's whole journal:\n{death.log}\n\nsecond start's whole journal:\n{again.log}"
        )
    FIGURES.record("real vLLM: pull by digest + start to active (s)", round(time.monotonic() - t0, 1))
    assert st.state()["ActiveState"] == "active"
    journal = m.journal(SERVE)
    # vLLM itself parsed the rendered flags and loaded the model
    assert "Resolved architecture: Qwen2ForCausalLM" in journal, journal[-3000:]
    assert "'tool_call_parser': 'hermes'" in journal and "'max_model_len': 2048" in journal
    assert "ready after" in journal
    smoke = subprocess.run(
        [str(REPO / ".venv/bin/station"), "smoke", "--base-url", "http://127.0.0.1:8899", "--model", "tiny-tools"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-2000:]
    t0 = time.monotonic()
    m.systemctl("stop", SERVE, timeout=120)
    FIGURES.record("real vLLM: stop (s)", round(time.monotonic() - t0, 1))
    exit_code = m.run(["docker", "inspect", "--format", "{{.State.ExitCode}}", CONTAINER]).stdout.strip()
    assert exit_code == "0", "vLLM shut down on SIGTERM within docker stop's 60 s"
