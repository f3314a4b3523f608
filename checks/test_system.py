"""Tier `system`: the units NixOS renders for flash-station, run by a real systemd with a real runtime.

The example is evaluated as a full NixOS system (checks/system/render.nix; the only differences are
named there: no CDI GPU device, the test image by digest, memlock at this sandbox's hard limit, the
local hub's address). Its store paths are mapped one by one (checks/system/store.py), a systemd 252
boots in a systemd-nspawn machine (checks/system/machine.py) with Debian's dockerd as the station's
runtime, and the test image (`station simulate` behind `vllm serve`'s arguments) is pulled by digest
from a local docker-registry. Everything below is read from systemd's own state and from files.

The scenarios run in order on one machine (each builds on the state the previous one left):
stamp gate → first start while the download runs, the download starting the serving unit → first start
→ restarts → crash loop → stop. Figures go to the test report
(`-rA` shows them; scripts/check prints the tier line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nixenv import CACHE, REPO, require_nix, require_tree
from system.common import (
    API_KEY,
    FIGURES,
    TESTS,
    free_port,
    glm_checkpoint,
    require_tools,
)
from system.images import Registry, build_sim_image
from system.station import API_KEY_PATH, DROP_CACHES, Station, render, station_venv

pytestmark = pytest.mark.system

FLASH_REVISION = (
    "9c1e0d2f4a6b8c0e1f3a5b7c9d1e3f5a7b9c0d2e"  # checks/examples/flash-station.nix
)
FLASH_REPO = "nvidia/GLM-5.3-Flash-NVFP4"
MODEL_DIR = "/var/lib/vllm-station-models/glm53-flash"  # the download entry's dir
REV_DIR = f"{MODEL_DIR}/revisions/{FLASH_REVISION}"  # the pinned revision's (contract.revisionDir)
STAMP = f"{REV_DIR}/.station-verified.json"
SERVE = "vllm-station.service"
DOWNLOAD = "vllm-station-download-glm53-flash.service"
# RestartSec is the real 60 s for the first restart; later restarts use this drop-in (stated here).
FAST_RESTART = "[Service]\nRestartSec=2\n"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    sys.path.insert(0, str(TESTS))
    from hubserver import FakeHub, HubState, repo_from_dir

    ckpt = tmp_path_factory.mktemp("ckpt")
    glm_checkpoint(ckpt, shards=3, layers=12)  # GLM-5.3-Flash: 12 MLA layers
    state = HubState(
        repo=FLASH_REPO, files=repo_from_dir(FLASH_REPO, ckpt), commit=FLASH_REVISION
    )
    state.branches = {"main": FLASH_REVISION}
    with FakeHub(state) as fake:
        yield fake


@pytest.fixture(scope="module")
def flash(hub: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Station]:
    require_nix()
    tree = require_tree(
        "NIXOS_TREE", "nixos/lib/eval-config.nix", "the system tier (rendered units)"
    )
    require_tools()
    registry = Registry(CACHE / "system" / "registry", free_port())
    registry.start()
    station = None
    try:
        t = time.monotonic()
        image = build_sim_image(registry, tmp_path_factory.mktemp("image"))
        FIGURES.record("image build or reuse (s)", round(time.monotonic() - t, 1))
        t = time.monotonic()
        rendered = render(str(tree), "flash-station", image, hub=hub.url)
        FIGURES.record("render flash-station (s)", round(time.monotonic() - t, 1))
        t = time.monotonic()
        bin_dir = station_venv(CACHE)
        FIGURES.record("station venv (s)", round(time.monotonic() - t, 1))
        station = Station(
            rendered, Path(tmp_path_factory.mktemp("flash")), "flash", bin_dir
        )
        station.boot(runtime="docker")
        FIGURES.record("machine boot (s)", round(station.machine.boot_seconds, 1))
        m = station.machine
        m.write(API_KEY_PATH, API_KEY + "\n", mode=0o600)
        # what the revision scenario re-renders with (a switch to another pinned revision)
        station.render_again = lambda revision: render(  # type: ignore[attr-defined]
            str(tree), "flash-station", image, hub=hub.url, revision=revision
        )
        yield station
    finally:
        if station is not None:
            _dump(station)
            station.stop()
        registry.stop()


def _dump(station: Station) -> None:
    """On the way out: the serving unit's journal, for a failing run's report."""
    try:
        for unit in (DOWNLOAD, SERVE):
            text = station.machine.journal(unit)
            print(
                f"---- journal of {unit} (last 40 lines) ----\n"
                + "\n".join(text.splitlines()[-40:]),
                file=sys.stderr,
            )
    except (
        AssertionError,
        OSError,
        subprocess.SubprocessError,
    ) as err:  # the machine may be gone
        print(f"no journal: {err}", file=sys.stderr)


def _mono(station: Station, prop: str, unit: str = SERVE) -> int:
    value = station.machine.show(unit, prop)[prop]
    return int(value or 0)


def _reset(station: Station) -> None:
    m = station.machine
    m.systemctl("stop", SERVE, check=False, timeout=120)
    m.systemctl("reset-failed", SERVE, check=False)


# ---------------------------------------------------------------------------------------------- scenarios


def test_store_holds_only_what_each_path_holds(flash: Station) -> None:
    """The unit's PATH is coreutils, findutils, grep, sed, systemd — and no container runtime."""
    st = flash
    unit = st.unit()
    path_line = next(
        line for line in unit.splitlines() if line.startswith('Environment="PATH=')
    )
    dirs = path_line.removeprefix('Environment="PATH=').rstrip('"').split(":")
    out = st.machine.run(
        ["sh", "-c", "ls -1 " + " ".join(d for d in dirs) + " 2>/dev/null"], check=False
    ).stdout
    names = set(out.split())
    assert {"cat", "sync", "grep", "sed", "find", "systemctl"} <= names
    assert not names & {"docker", "podman", "station", "python3", "jq"}, (
        "a station's unit PATH lacks these"
    )
    made = st.store.made
    assert [p for p, v in made.items() if v == "text"] == [], (
        "units run `station <verb>`, never a shell program written by Nix"
    )
    assert any(v.startswith("docker:") for v in made.values())


def test_unverified_model_skips_the_serving_unit_and_the_gate_refuses_another_revision(
    flash: Station, hub: Any
) -> None:
    """No verified checkpoint for the pin: starting the serving unit returns at once, skipped by its
    condition (the stamp of the pinned revision), and pulls in the download unit (Wants=, not After=),
    which fails here (the hub lost the revision); nothing of the start sequence ran."""
    st = flash
    m = st.machine
    state = hub.state
    state.commit, state.branches = (
        "f" * 40,
        {},
    )  # the hub no longer has the pinned revision
    try:
        t0 = time.monotonic()
        proc = m.run(["systemctl", "start", SERVE], check=False, timeout=120)
        FIGURES.record(
            "start without a checkpoint: systemctl start returned (s)",
            round(time.monotonic() - t0, 1),
        )
        assert proc.returncode == 0, f"a skipped start is no failure: {proc.stderr}"
        s = m.show(SERVE, "ActiveState", "ConditionResult")
        assert s == {"ActiveState": "inactive", "ConditionResult": "no"}, s
        st.wait_for(
            "the download unit ran and failed",
            lambda: st.state(DOWNLOAD)["Result"] == "exit-code",
            120,
        )
    finally:
        state.commit, state.branches = FLASH_REVISION, {"main": FLASH_REVISION}
        m.systemctl("stop", DOWNLOAD, check=False)
        m.systemctl("reset-failed", DOWNLOAD, check=False)
    journal = m.journal(SERVE)
    assert "station prestart" not in journal and "refusing" not in journal, (
        "no step of the start ran"
    )
    _reset(st)
    # a real checkpoint in the pinned revision's directory, verified as another revision: the download
    # is skipped (its condition), the serving unit's condition holds, and the gate refuses, naming both
    other = "0" * 40
    glm_checkpoint(st.work / "var" / REV_DIR.removeprefix("/var/"), shards=3, layers=12)
    try:
        m.run([str(st.station_bin / "station"), "verify", REV_DIR, "--repo", FLASH_REPO, "--revision", other],
              timeout=120)  # fmt: skip
        assert (
            m.run(["systemctl", "start", SERVE], check=False, timeout=120).returncode
            != 0
        )
        journal = m.journal(SERVE)
        assert (
            f"the checkpoint in {REV_DIR} is revision {other}, expected {FLASH_REVISION}"
            in journal
        )
        assert "start vllm-station-download-glm53-flash.service" in journal, (
            "the message names the fix"
        )
    finally:
        _reset(st)
        m.run(["rm", "-rf", f"{MODEL_DIR}/revisions"])


def test_first_start_returns_while_the_download_runs_bound_to_node_0_then_it_starts_serving(
    flash: Station, hub: Any
) -> None:
    """What a first switch does on a new station: the serving unit's start returns while the download
    (held mid-file here) runs bound to node 0; when it has verified and stamped the pinned revision, the
    download unit starts the serving unit (its last step), which comes up."""
    st = flash
    m = st.machine
    state = hub.state
    shard = next(name for name in state.files if name.endswith(".safetensors"))
    state.stall_after = {
        shard: 16
    }  # hold the download mid-file, to look at the live process
    t0 = time.monotonic()
    proc = m.run(["systemctl", "start", SERVE], check=False, timeout=120)
    FIGURES.record(
        "first start (download pending): systemctl start returned (s)",
        round(time.monotonic() - t0, 1),
    )
    assert proc.returncode == 0, proc.stderr
    assert m.show(SERVE, "ConditionResult")["ConditionResult"] == "no"
    state.stalled.wait(timeout=60)
    assert state.stalled.is_set(), (
        f"the download never reached the hub: {m.journal(DOWNLOAD)[-2000:]}"
    )
    assert st.state(DOWNLOAD)["ActiveState"] == "activating", (
        "pulled in by the serving unit, still running"
    )
    pid = _mono(st, "MainPID", DOWNLOAD)
    assert pid > 0
    maps = m.run(["cat", f"/proc/{pid}/numa_maps"]).stdout.splitlines()
    policies = {line.split()[1] for line in maps if len(line.split()) > 1}
    FIGURES.record("download numa_maps policies", ",".join(sorted(policies)))
    assert policies == {"bind:0"}, (
        f"every mapping of the download process must be bound to node 0: {policies}"
    )
    user = m.run(["ps", "-o", "user=", "-p", str(pid)]).stdout.strip()
    assert user == "vllm-station"
    state.stall_after = {}
    t1 = time.monotonic()
    state.release.set()  # the stalled connection closes; the download resumes it
    s = st.wait_for(
        "the download unit done and inactive (not RemainAfterExit)",
        lambda: (
            d
            if (d := st.state(DOWNLOAD))["ActiveState"] == "inactive"
            and d["Result"] == "success"
            else None
        ),
        180,
    )
    stamp = json.loads(m.run(["cat", STAMP]).stdout)
    assert stamp["revision"] == FLASH_REVISION
    # after the stamp: `station revisions prune` kept the pinned revision (the only one)
    assert f"keep    {FLASH_REVISION}  (pinned)" in m.journal(DOWNLOAD)
    # the download unit's last step started the serving unit; nobody else did
    s = st.wait_state("active", 240)
    FIGURES.record(
        "download done to serving active, started by the download unit (s)",
        round(time.monotonic() - t1, 1),
    )
    assert s["SubState"] == "running"
    assert f"checkpoint {REV_DIR} verified" in m.journal(SERVE)
    _reset(st)  # the next scenario starts it itself


def test_a_missing_key_fails_the_start_naming_the_option_not_243(flash: Station) -> None:
    """The key file gone (a key put in /run by hand, after a reboot): the serving unit's secrets check
    fails first, naming serve.apiKeyFile and the file; the unit itself never runs a command, so it
    never fails with 243/CREDENTIALS. With the key back, the same start passes the check, which stays
    inactive (it runs again at every start). The checkpoint is verified by now: nothing else refuses."""
    st = flash
    m = st.machine
    check = "vllm-station-secrets@vllm-station.service"
    before = st.state()["InvocationID"]
    m.run(["mv", API_KEY_PATH, f"{API_KEY_PATH}.away"])
    try:
        proc = m.run(["systemctl", "start", SERVE], check=False, timeout=120)
        assert proc.returncode != 0
        assert "dependency" in proc.stderr.lower(), proc.stderr
        c = st.state(check)
        assert (c["ActiveState"], c["Result"], c["ExecMainStatus"]) == ("failed", "exit-code", "1"), c
        said = m.journal(check)
        assert f"services.vllm-station.serve.apiKeyFile: {API_KEY_PATH} does not exist." in said, said
        assert "vllm-station loads it at each start" in said
        s = st.state()
        assert s["ActiveState"] != "active" and s["ExecMainStatus"] != "243", s
        assert "243/CREDENTIALS" not in m.journal(SERVE)
        assert s["InvocationID"] == before, "the unit was started: its commands ran"
    finally:
        m.run(["mv", f"{API_KEY_PATH}.away", API_KEY_PATH])
        m.systemctl("reset-failed", check, check=False)
        _reset(st)
    m.systemctl("start", check)  # with the key back: passes
    c = st.state(check)
    assert (c["ActiveState"], c["Result"]) == ("inactive", "success"), c


def test_first_start_runs_the_sequence_then_is_active_only_when_serving(
    flash: Station,
) -> None:
    st = flash
    m = st.machine
    t0 = time.monotonic()
    m.run(["systemctl", "start", "--no-block", SERVE])
    # activating until wait-ready succeeds (ExecStartPost)
    seen_activating = st.wait_for(
        "activating",
        lambda: st.state()["ActiveState"] == "activating",
        30,
        interval=0.1,
    )
    assert seen_activating
    s = st.wait_state("active", 180)
    FIGURES.record("start to active (s)", round(time.monotonic() - t0, 1))
    assert s["SubState"] == "running"
    journal = m.journal(SERVE)
    order = [
        f"checkpoint {REV_DIR} verified",  # stamp gate
        "station prestart:",  # prestart
        "vllm-serve-args",  # the container's first line: the engine started
    ]
    positions = [journal.find(marker) for marker in order]
    assert all(p >= 0 for p in positions), (
        f"missing step: {dict(zip(order, positions, strict=True))}\n{journal[-3000:]}"
    )
    assert positions == sorted(positions), (
        f"ExecStartPre order: {dict(zip(order, positions, strict=True))}"
    )
    assert m.run(["cat", DROP_CACHES]).stdout.strip() == "1", (
        "prestart wrote drop_caches"
    )
    # the container got exactly the rendered vLLM arguments, and the key by environment only
    args_line = next(
        line for line in journal.splitlines() if line.startswith("vllm-serve-args ")
    )
    got = json.loads(args_line.removeprefix("vllm-serve-args "))
    start = next(
        line for line in st.unit().splitlines() if line.startswith("ExecStart=")
    )
    assert f'"{got[0]}"' in start and got[0] == REV_DIR
    assert API_KEY not in st.unit()
    # smoke passes through it, with the key
    key_file = Path(st.work) / "api-key"
    key_file.write_text(API_KEY)
    smoke = subprocess.run(
        [
            str(REPO / ".venv/bin/station"),
            "smoke",
            "--base-url",
            "http://127.0.0.1:8888",
            "--model",
            "glm-5.3-flash",
            "--api-key-file",
            str(key_file),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert smoke.returncode == 0, smoke.stdout[-2000:] + smoke.stderr[-2000:]
    unauthorized = subprocess.run(
        [
            str(REPO / ".venv/bin/station"),
            "smoke",
            "--base-url",
            "http://127.0.0.1:8888",
            "--model",
            "glm-5.3-flash",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "STATION_API_KEY": ""},
    )
    assert unauthorized.returncode == 1, "without the key the API refuses"


def test_engine_exit_0_restarts_after_restart_sec_and_logs_are_kept(
    flash: Station,
) -> None:
    st = flash
    m = st.machine
    before = _mono(st, "NRestarts")
    logs_before = len(st.logs_dir())
    m.run(["docker", "kill", "--signal", "TERM", "vllm-station"])  # the engine exits 0
    st.wait_for(
        "main process exit",
        lambda: (
            _mono(st, "ExecMainExitTimestampMonotonic") > 0
            and st.state()["ActiveState"] != "active"
        ),
        30,
        interval=0.2,
    )
    exited = _mono(st, "ExecMainExitTimestampMonotonic")
    status = st.state()["ExecMainStatus"]
    # systemd 252 passes through "inactive" twice: at the exit (dead, then auto-restart) and when
    # RestartSec's timer fires (the restart job stops the unit: dead, "Stopped", then its start, which
    # waits for the secrets check unit it requires). The timer's moment is that second entry into
    # inactive; the start's own InactiveExit comes after the secrets check, so it is not read here.
    st.wait_for(
        "the restart",
        lambda: (
            _mono(st, "NRestarts") == before + 1
            and st.state()["SubState"] != "auto-restart"
        ),
        90,
        interval=0.5,
    )
    restarted = _mono(st, "InactiveEnterTimestampMonotonic")
    delay = (restarted - exited) / 1e6
    FIGURES.record("restart delay after exit 0 (s, RestartSec=60)", round(delay, 2))
    assert status == "0", "the engine's exit 0 is still a restart (Restart=always)"
    assert 59.5 <= delay <= 63, f"restart {delay:.2f} s after the exit, RestartSec=60"
    st.wait_state("active", 120)
    assert len(st.logs_dir()) == logs_before + 1, (
        "the previous container's log was saved"
    )


def test_kill_9_restarts_and_the_old_container_is_replaced(flash: Station) -> None:
    st = flash
    m = st.machine
    m.write(
        "/etc/systemd/system/vllm-station.service.d/restart-fast.conf", FAST_RESTART
    )
    m.systemctl("daemon-reload")
    before = _mono(st, "NRestarts")
    logs_before = len(st.logs_dir())
    m.systemctl("kill", "--signal=KILL", "--kill-whom=main", SERVE)
    st.wait_for(
        "the restart", lambda: _mono(st, "NRestarts") == before + 1, 60, interval=0.3
    )
    st.wait_state("active", 120)
    assert len(st.logs_dir()) == logs_before + 1
    saved = m.run(
        [
            "sh",
            "-c",
            "cat /var/log/vllm-station/$(ls -1 /var/log/vllm-station | grep '.log$' | tail -1)",
        ]
    ).stdout
    assert "vllm-serve-args" in saved, "the killed try's container log is kept"
    assert st.containers("docker") == ["vllm-station"], (
        "one container: the old one was removed before the new run"
    )


def test_fourth_start_within_the_hour_is_refused_then_reset_failed_recovers(
    flash: Station,
) -> None:
    """StartLimitBurst=3 per hour. The drop-in's daemon-reload (previous test) restarted systemd's count
    (found here: a reload resets the start rate limit), and that test's restart was start 1."""
    st = flash
    m = st.machine
    for start in (2, 3):  # two more crashes: each restarted
        before = _mono(st, "NRestarts")
        m.systemctl("kill", "--signal=KILL", "--kill-whom=main", SERVE)
        st.wait_for(
            f"start {start}",
            lambda b=before: _mono(st, "NRestarts") == b + 1,
            60,
            interval=0.3,
        )
        st.wait_state("active", 120)
    m.systemctl(
        "kill", "--signal=KILL", "--kill-whom=main", SERVE
    )  # the crash that asks for a 4th start
    # systemd 252 keeps the crash's Result ("signal") and logs the refusal of the restart
    st.wait_for(
        "the refused restart",
        lambda: "Start request repeated too quickly" in m.journal(SERVE),
        60,
    )
    s = st.wait_state("failed", 30)
    assert s["Result"] in ("signal", "start-limit-hit"), s
    time.sleep(3)  # longer than the drop-in's RestartSec: systemd must not try again
    assert st.state()["ActiveState"] == "failed"
    assert (
        m.run(["systemctl", "start", SERVE], check=False, timeout=60).returncode != 0
    ), "a manual start too"
    assert m.journal(SERVE).count("Start request repeated too quickly") >= 2
    FIGURES.record("4th start within the hour", "refused (start-limit-hit)")
    m.systemctl("reset-failed", SERVE)
    t0 = time.monotonic()
    m.systemctl("start", SERVE, timeout=180)
    FIGURES.record(
        "reset-failed + start to active (s)", round(time.monotonic() - t0, 1)
    )
    assert st.state()["ActiveState"] == "active"


def test_stop_uses_the_runtime_stop_path_and_leaves_no_running_container(
    flash: Station,
) -> None:
    st = flash
    m = st.machine
    t0 = time.monotonic()
    m.systemctl("stop", SERVE, timeout=120)
    FIGURES.record("stop (s)", round(time.monotonic() - t0, 2))
    s = st.state()
    assert s["ActiveState"] == "inactive"
    running = m.run(["docker", "ps", "--format", "{{.Names}}"]).stdout.split()
    assert running == [], "docker stop ended the container"
    # stopped, not removed: the next start's prestart saves its log, then removes it
    assert st.containers("docker") == ["vllm-station"]
    exit_code = m.run(
        ["docker", "inspect", "--format", "{{.State.ExitCode}}", "vllm-station"]
    ).stdout.strip()
    assert exit_code == "0", (
        "the engine got SIGTERM and exited by itself (137 would be the timeout's SIGKILL)"
    )
    assert '"stop" "-t" "620" "vllm-station"' in st.unit()  # shutdownTimeout 590 + 30
    # the first stop step drained the station (the gateway's 503) before the SIGTERM; systemd removed
    # the flag with the unit's runtime directory when the stop was over
    assert "routed: no (new requests get 503; requests in flight finish)" in m.journal(SERVE)
    assert m.run(["test", "-e", "/run/vllm-station/stopping"], check=False).returncode != 0


def _switch(st: Station, rendered: Any) -> float:
    """What `nixos-rebuild switch` does to the serving unit when its text changed: the new unit files,
    daemon-reload, stop the old unit, start the new one (X-StopIfChanged). Returns the start's seconds."""
    m = st.machine
    st.store.materialize_texts(
        [*rendered.units.values(), *rendered.etc.values(), *rendered.tmpfiles]
    )
    st.rendered = rendered
    st.install()
    m.systemctl("stop", SERVE, timeout=180)
    m.systemctl("reset-failed", SERVE, check=False)
    t0 = time.monotonic()
    proc = m.run(["systemctl", "start", SERVE], check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return time.monotonic() - t0


def test_revision_upgrade_then_rollback(flash: Station, hub: Any) -> None:
    """R1 → R2 → R1 under real systemd. The upgrade: the switch's start returns at once (R2 not verified:
    skipped), R2 is fetched beside R1 bound to node 0, the download unit starts the engine on R2, and
    prune keeps both (keepRevisions 2). The rollback: R1's stamp is still there, the engine starts on R1
    at once and nothing is downloaded (the download unit is skipped, the hub sees no request)."""
    st = flash
    m = st.machine
    state = hub.state
    r2 = "b" * 40
    r2_dir = f"{MODEL_DIR}/revisions/{r2}"
    original = st.rendered
    upgraded = st.render_again(r2)  # type: ignore[attr-defined]
    assert r2_dir in upgraded.units[SERVE] and REV_DIR not in upgraded.units[SERVE]
    state.commit, state.branches = r2, {"main": r2}
    last_download = m.show(DOWNLOAD, "InvocationID")["InvocationID"]
    try:
        returned = _switch(st, upgraded)
        FIGURES.record(
            "upgrade: switch's start of the serving unit returned (s)",
            round(returned, 1),
        )
        assert m.show(SERVE, "ConditionResult")["ConditionResult"] == "no"
        t0 = time.monotonic()
        st.wait_for(
            "R2 downloaded, verified and the download unit done",
            lambda: (
                (d := m.show(DOWNLOAD, "ActiveState", "Result", "InvocationID"))[
                    "InvocationID"
                ]
                != last_download
                and d["ActiveState"] == "inactive"
                and d["Result"] == "success"
            ),
            240,
        )
        s = st.wait_state("active", 240)
        FIGURES.record(
            "upgrade: R2 fetched and serving (s)", round(time.monotonic() - t0, 1)
        )
        assert s["SubState"] == "running"
        assert f"checkpoint {r2_dir} verified (revision {r2[:12]}" in m.journal(SERVE)
        assert (
            json.loads(m.run(["cat", f"{r2_dir}/.station-verified.json"]).stdout)[
                "revision"
            ]
            == r2
        )
        listed = m.run(["ls", "-1", f"{MODEL_DIR}/revisions"]).stdout.split()
        assert sorted(listed) == sorted([FLASH_REVISION, r2]), (
            "R1 stays beside R2 for a rollback"
        )
        download_log = m.journal(DOWNLOAD)
        assert f"keep    {r2}  (pinned)" in download_log
        assert (
            f"keep    {FLASH_REVISION}  (one of the 2 newest verified)" in download_log
        )
    finally:
        state.commit, state.branches = FLASH_REVISION, {"main": FLASH_REVISION}
    # rollback: the old pin again
    requests_before = len(state.requests)
    returned = _switch(st, original)
    FIGURES.record(
        "rollback: switch's start of the serving unit until active (s)",
        round(returned, 1),
    )
    s = st.state()
    assert s["ActiveState"] == "active", (
        s
    )  # the start included wait-ready: serving R1 again
    assert m.show(DOWNLOAD, "ConditionResult")["ConditionResult"] == "no", (
        "the download unit was skipped"
    )
    assert len(state.requests) == requests_before, "nothing was downloaded"
    journal = m.journal(SERVE)
    assert journal.rfind(f"checkpoint {REV_DIR} verified") > journal.rfind(
        f"checkpoint {r2_dir} verified"
    )
    _reset(st)
