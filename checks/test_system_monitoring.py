"""Tier `system`: the watchdog NixOS renders for monitored-station, under a real systemd, restarts a wedged
engine through systemd — and systemd counts that restart toward the serving unit's start limit.

checks/monitoring/system-station.nix is checks/examples/monitored-station.nix with a faster watchdog (a
look every 3 s, 2 wedge verdicts); checks/system/render.nix renders it with its stated test-only
definitions (the `station simulate` image by digest, no GPU device), and the system tier's harness boots
it (checks/system/). The engine is wedged through the simulator's own switch (`POST /sim/engine`:
/health stays 200, /metrics freezes, no token ever).

The scenario, one machine: start (start 1 of the hour) → the probe's unit runs once → wedge → the watchdog restarts it (start 2) →
an operator's restart (start 3) → wedge → the watchdog's restart is start 4: systemd refuses it
(start-limit-hit), which it would not if the watchdog's first restart had not counted. node_exporter,
run inside with the rendered flags, shows the systemd collector's metrics and the watchdog's state.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from monitoring.rendered import node_exporter_args
from nixenv import CACHE, require_nix, require_tree
from system.common import API_KEY, FIGURES, free_port, glm_checkpoint, require_tools
from system.images import Registry, build_sim_image
from system.station import API_KEY_PATH, Station, render, station_venv

pytestmark = pytest.mark.system

SERVE = "vllm-station.service"
WATCHDOG = "vllm-station-watchdog.service"
PROBE = "vllm-station-probe.service"
PROBE_FILE = "/var/lib/vllm-station-metrics/station-probe.prom"
MODEL_DIR = "/var/lib/vllm-station-models/glm53-flash"  # the glm53-flash preset
FLASH_REPO = "nvidia/GLM-5.3-Flash-NVFP4"
FLASH_REVISION = "9c1e0d2f4a6b8c0e1f3a5b7c9d1e3f5a7b9c0d2e"  # checks/examples/flash-station.nix
REV_DIR = f"{MODEL_DIR}/revisions/{FLASH_REVISION}"  # the pinned revision's (contract.revisionDir)
BASE = "http://127.0.0.1:8888"
TEXTFILE = "/var/lib/vllm-station-metrics/station-watchdog.prom"
# system-station.nix: interval 3 s, probe deadline 2 s, 2 verdicts -> restarted within 2 x 3 + 2 s
DETECTION_BOUND_S = 8.0


def _wedge() -> None:
    req = urllib.request.Request(
        BASE + "/sim/engine", data=json.dumps({"mode": "wedge"}).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def _health() -> int:
    with urllib.request.urlopen(BASE + "/health", timeout=5) as resp:
        return int(resp.status)


@pytest.fixture(scope="module")
def station(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Station]:
    require_nix()
    tree = require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "the system tier (rendered units)")
    require_tools()
    registry = Registry(CACHE / "system" / "registry", free_port())
    registry.start()
    st = None
    try:
        image = build_sim_image(registry, tmp_path_factory.mktemp("image"))
        t = time.monotonic()
        rendered_units = render(str(tree), "../monitoring/system-station", image)
        FIGURES.record("render monitored station (s)", round(time.monotonic() - t, 1))
        assert {SERVE, WATCHDOG, "vllm-station-probe.service", "vllm-station-probe.timer"} <= set(
            rendered_units.units
        )
        st = Station(
            rendered_units, Path(tmp_path_factory.mktemp("monitored")), "monitored", station_venv(CACHE)
        )
        # verified in its revision's directory: the serving unit's start condition is that stamp
        glm_checkpoint(st.work / "var" / REV_DIR.removeprefix("/var/"), shards=3, layers=12)
        st.boot(runtime="docker")
        m = st.machine
        m.write(API_KEY_PATH, API_KEY + "\n", mode=0o600)
        m.run([str(st.station_bin / "station"), "verify", REV_DIR, "--repo", FLASH_REPO, "--revision", FLASH_REVISION],
              timeout=120)  # fmt: skip
        yield st
    finally:
        if st is not None:
            for unit in (WATCHDOG, SERVE):
                print(f"---- {unit} ----\n" + "\n".join(st.machine.journal(unit).splitlines()[-40:]))
            st.stop()
        registry.stop()


def _starts(st: Station) -> str:
    return st.state()["InvocationID"]


def _restarted_by_watchdog(st: Station, before: str, timeout: float) -> float:
    """Seconds from now until the serving unit leaves its invocation `before` (the watchdog's restart)."""
    t0 = time.monotonic()
    st.wait_for("the watchdog's restart", lambda: _starts(st) != before or st.state()["ActiveState"] != "active",
                timeout, interval=0.2)  # fmt: skip
    return time.monotonic() - t0


def _node_exporter(st: Station) -> str:
    """Debian's node_exporter inside the machine with the flags NixOS renders (its own port here)."""
    args = node_exporter_args()[1:]
    port = free_port()
    i = args.index("--web.listen-address")
    args = [*args[:i], "--web.listen-address", f"127.0.0.1:{port}", *args[i + 2 :]]
    st.machine.run(
        ["systemd-run", "--unit=station-test-node-exporter", "/usr/bin/prometheus-node-exporter", *args]
    )
    url = f"http://127.0.0.1:{port}/metrics"
    st.wait_for("node_exporter", lambda: _try_get(url), 30)
    return url


def _try_get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return str(resp.read().decode())
    except OSError:
        return None


def _watchdog_file(st: Station) -> dict[str, float]:
    return _textfile(st, TEXTFILE)


def _textfile(st: Station, path: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in st.machine.run(["cat", path]).stdout.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_the_watchdogs_restart_is_counted_by_systemds_start_limit(station: Station) -> None:
    st = station
    m = st.machine
    t = time.monotonic()
    m.systemctl("start", SERVE, timeout=300)  # start 1: returns when wait-ready passed
    FIGURES.record("monitored station: start to active (s)", round(time.monotonic() - t, 1))
    # the probe's unit as rendered (a dynamic user in the metrics group, the key as a credential)
    m.systemctl("start", PROBE, timeout=120)  # oneshot: returns when it ran
    probe = _textfile(st, PROBE_FILE)
    assert probe["station_probe_success"] == 1 and probe["station_probe_tool_call_success"] == 1, probe
    assert probe["station_probe_completion_tokens"] == 64
    m.systemctl("start", WATCHDOG)
    st.wait_for("the watchdog's first ok look", lambda: "ok" in _verdict(st), 30)

    # wedge 1: the watchdog restarts the unit (start 2)
    first = _starts(st)
    _wedge()
    assert _health() == 200, "a wedge keeps /health at 200"
    detection = _restarted_by_watchdog(st, first, 60)
    FIGURES.record("watchdog: wedge to restart (s)", round(detection, 1))
    assert detection <= DETECTION_BOUND_S + 3, detection  # + the serving unit's stop/queue latency
    st.wait_state("active", 300)
    journal = m.journal(WATCHDOG)
    # the restart asked of systemd first, then the container killed: a wedged engine has nothing to drain,
    # and the unit's graceful stop would wait out --shutdown-timeout for it
    assert "restarting vllm-station.service (systemctl restart --no-block vllm-station.service, then " in journal
    assert "/bin/docker kill vllm-station (a wedged engine has nothing to drain)" in journal
    assert "2 consecutive wedge verdicts" in journal and "no progress for" in journal
    st.wait_for("a fresh engine answers", lambda: "ok" in _verdict(st), 60)

    # start 3, an operator's
    m.systemctl("restart", SERVE, timeout=300)
    st.wait_for("ok after the operator's restart", lambda: "ok" in _verdict(st), 60)

    # wedge 2: the watchdog's restart is start 4 within the hour: refused
    third = _starts(st)
    _wedge()
    _restarted_by_watchdog(st, third, 60)
    s = st.wait_state("failed", 180)
    # The restart's start is refused; the container the watchdog killed after asking for it gives the
    # Result (exit-code, its 137) where a refused explicit start alone would read start-limit-hit.
    assert s["Result"] in ("exit-code", "start-limit-hit"), s
    FIGURES.record("4th start within the hour (the watchdog's 2nd)", f"refused (Result={s['Result']})")
    st.wait_for("the watchdog's start-limit message",
                lambda: "failed by its start limit (" in m.journal(WATCHDOG), 30)  # fmt: skip
    # the look that said it writes its textfile just after (read once, it could still be the last look's)
    st.wait_for("the watchdog's export of the start limit",
                lambda: _watchdog_file(st).get("station_watchdog_unit_start_limit_hit") == 1, 30)  # fmt: skip
    exported = _watchdog_file(st)
    assert exported["station_watchdog_restarts_total"] == 2
    assert exported["station_watchdog_unit_start_limit_hit"] == 1
    assert exported['station_watchdog_verdict{verdict="inactive"}'] == 1

    # what node_exporter (rendered flags) shows of it: the names the rules use exist with a real systemd
    metrics = _node_exporter(st)
    text = _try_get(metrics) or ""
    assert re.search(
        r'node_systemd_unit_state\{name="vllm-station.service",state="failed"[^}]*\} 1\n', text
    ), text[-3000:]
    assert 'node_systemd_service_restart_total{name="vllm-station.service"}' in text
    assert "station_watchdog_unit_start_limit_hit 1" in text
    names = {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")
    }
    assert {"node_systemd_unit_state", "node_systemd_service_restart_total",
            "station_watchdog_unit_start_limit_hit"} <= names  # fmt: skip


# The crash loop's restarts use this drop-in (RestartSec=60 otherwise: three restarts, three minutes).
FAST_RESTART = "[Service]\nRestartSec=2\n"


def _show_int(st: Station, prop: str) -> int:
    return int(st.machine.show(SERVE, prop)[prop] or 0)


def _metric(text: str, metric: str, **labels: str) -> float | None:
    """The value of the first sample of `metric` whose labels include `labels` (node_exporter's text)."""
    for line in text.splitlines():
        if not line.startswith(metric + "{"):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    return None


def test_a_crash_loop_under_systemd_252_is_what_the_crash_loop_alert_reads(station: Station) -> None:
    """Measures what a crash loop leaves (the alert's input; checks/monitoring/rules.test.yml replays it):
    three crashes within the hour, each restarted by systemd (Restart=always, StartLimitBurst=3), until
    the restart the 4th crash asks for is refused. systemd 252 keeps the last crash's Result ("signal"),
    not "start-limit-hit"; NRestarts counts every restart it scheduled, the refused one included (3), and
    keeps that while the unit is failed."""
    st = station
    m = st.machine
    m.systemctl("stop", WATCHDOG)  # systemd's restarts alone
    m.run(["rm", "-f", TEXTFILE])  # the previous test's export (start_limit_hit 1) must not count here
    m.write("/etc/systemd/system/vllm-station.service.d/restart-fast.conf", FAST_RESTART)
    m.systemctl("daemon-reload")
    m.run(["systemctl", "stop", SERVE], check=False, timeout=120)  # whatever the previous test left
    m.systemctl("reset-failed", SERVE)  # also forgets the previous test's starts
    m.systemctl("start", SERVE, timeout=300)  # start 1 (an explicit start: NRestarts back to 0)
    assert _show_int(st, "NRestarts") == 0
    for start in (2, 3):  # two crashes, each restarted by systemd
        before = _show_int(st, "NRestarts")
        m.systemctl("kill", "--signal=KILL", "--kill-whom=main", SERVE)
        st.wait_for(f"start {start}", lambda b=before: _show_int(st, "NRestarts") == b + 1, 120,
                    interval=0.3)  # fmt: skip
        st.wait_state("active", 300)
    m.systemctl("kill", "--signal=KILL", "--kill-whom=main", SERVE)  # the crash that asks for a 4th start
    st.wait_for("the refused restart", lambda: "Start request repeated too quickly" in m.journal(SERVE), 120)
    s = st.wait_state("failed", 60)
    n_restarts = _show_int(st, "NRestarts")
    FIGURES.record("crash loop under systemd 252: ActiveState / Result / NRestarts",
                   f"{s['ActiveState']} / {s['Result']} / {n_restarts}")  # fmt: skip
    assert s["Result"] != "start-limit-hit", (
        "systemd now reports the start limit itself: the rules may read Result again", s
    )
    assert s["Result"] in ("signal", "exit-code"), s
    assert n_restarts == 3, f"NRestarts {n_restarts}: two restarts made and the refused third"

    # What node_exporter (the rendered flags) exports of it: the series the rule reads.
    m.run(["systemctl", "stop", "station-test-node-exporter"], check=False)
    m.run(["systemctl", "reset-failed", "station-test-node-exporter"], check=False)
    text = _try_get(_node_exporter(st)) or ""
    failed = _metric(text, "node_systemd_unit_state", name=SERVE, state="failed")
    restarts = _metric(text, "node_systemd_service_restart_total", name=SERVE)
    FIGURES.record("node_exporter after the crash loop: state failed / restart_total", f"{failed} / {restarts}")
    assert failed == 1 and restarts == 3, (failed, restarts)

    # The watchdog reads the same state as a start limit hit (its exported gauge, one look).
    m.systemctl("start", WATCHDOG)
    def exported_hit() -> bool:
        text = m.run(["cat", TEXTFILE], check=False).stdout
        return "\nstation_watchdog_unit_start_limit_hit 1\n" in "\n" + text

    st.wait_for("the watchdog's look", exported_hit, 60)
    assert "failed by its start limit (after 3 automatic restarts, Result=signal)" in m.journal(WATCHDOG)
    m.systemctl("stop", WATCHDOG)
    m.run(["rm", "/etc/systemd/system/vllm-station.service.d/restart-fast.conf"])
    m.systemctl("daemon-reload")
    m.systemctl("reset-failed", SERVE)


def _verdict(st: Station) -> Any:
    lines = st.machine.run(["cat", TEXTFILE], check=False).stdout.splitlines()
    return {
        line.split('"')[1]
        for line in lines
        if line.startswith("station_watchdog_verdict{") and line.endswith(" 1")
    }
