"""`station rollout` run for real, as a subprocess, against a lab of stand-in hosts.

What cannot run here is stood in for by small executables this file writes into the lab, each recording its
argv in one log, in order:

* `ssh [-o OPT]… HOST WORDS…`: runs WORDS through `sh -c` as sshd does, "on" HOST: the host's own drain
  directory (`station drain` writes its flag there), a `station` that is this package, and a `readlink`
  that answers the host's system profile (`/nix/var/nix/profiles/system`). An unknown host is exit 255,
  as ssh's "Could not resolve hostname".
* `nixos-rebuild switch --flake F#NAME --target-host HOST` / `switch --rollback --target-host HOST`: moves
  the host's profile to the next (previous) generation and restarts its station, a real `station simulate`
  on the host's port, with what that generation serves (`gens/N.json`: the simulator's `--gates` mode;
  `switch`: `ok`, `fail` before activating, `hang` after activating). It logs which hosts are drained at
  that moment.

* `systemctl stop|start --no-block vllm-station.service` "on" a host (a pair's halves): stop ends its
  simulator and marks the unit stopped (a switch then changes the profile only, as switch-to-configuration
  leaves a stopped unit stopped); start on a worker marks it started; start on a head serves only when its
  worker is started on the same generation (as the head's start waits for a worker in the same NCCL
  session), else it stays down and wait-ready fails.

The stations' checks are the real `station wait-ready` and `station golive` (smoke and the tool-call
battery: a serving fault of the new generation is a NO-GO of its `tools` gate), run through the stand-in
ssh against the simulators. nixos-rebuild cannot run here, which is why it is stood in for.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import free_port

from vllm_station.cli import main

SRC = Path(__file__).resolve().parents[1] / "src"

SSH = """#!/bin/sh
# stand-in ssh: ssh [-o OPTION]... HOST COMMAND... (COMMAND through the host's shell, as sshd runs it)
while [ "$1" = "-o" ]; do shift 2; done
host="$1"; shift
echo "ssh $host $*" >> "$LAB/log"
if [ ! -d "$LAB/hosts/$host" ]; then
  echo "ssh: Could not resolve hostname $host: Name or service not known" >&2; exit 255
fi
export HOSTDIR="$LAB/hosts/$host" STATION_DRAIN_DIR="$LAB/hosts/$host/drain"
export STATION_STOPPING_FLAG="$LAB/hosts/$host/run/stopping" PATH="$LAB/remote-bin:$PATH"
exec sh -c "$*"
"""
REMOTE_STATION = """#!/bin/sh
exec {python} -m vllm_station "$@"
"""
REMOTE_READLINK = """#!/bin/sh
if [ "$1" = /nix/var/nix/profiles/system ]; then exec cat "$HOSTDIR/profile"; fi
exec /usr/bin/readlink "$@"
"""
NIXOS_REBUILD = """#!/bin/sh
exec {python} "$LAB/standin.py" nixos-rebuild "$@"
"""
REMOTE_SYSTEMCTL = """#!/bin/sh
exec {python} "$LAB/standin.py" systemctl "$(basename "$HOSTDIR")" "$@"
"""
STANDIN = r'''
import json, os, signal, subprocess, sys, time

LAB = os.environ["LAB"]


def path(host, name):
    return os.path.join(LAB, "hosts", host, name)


def read(host, name):
    with open(path(host, name)) as f:
        return f.read().strip()


def write(host, name, text):
    with open(path(host, name), "w") as f:
        f.write(text)


def stop_sim(host):
    if not os.path.exists(path(host, "sim.pid")):
        return
    pid = int(read(host, "sim.pid"))
    try:
        os.killpg(pid, signal.SIGTERM)
        for _ in range(600):
            os.killpg(pid, 0)
            time.sleep(0.05)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.unlink(path(host, "sim.pid"))


def start_sim(host, gen):
    with open(path(host, f"gens/{gen}.json")) as f:
        gates = json.load(f)["gates"]
    log = open(path(host, f"sim-{gen}.log"), "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_station", "simulate", "--port", read(host, "port"), "--ttft", "0.002",
         "--itl", "0.0005", "--max-model-len", "30000", "--model", "glm-sim", "--gates", gates],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    write(host, "sim.pid", str(proc.pid))


def stopped(host):
    return os.path.exists(path(host, "unit-stopped"))


def activate(host, gen):
    write(host, "profile", f"system-{gen}-link")
    if stopped(host):  # switch-to-configuration leaves a stopped unit stopped
        return
    stop_sim(host)
    start_sim(host, gen)


def systemctl(host, argv):
    unit = argv[-1]
    assert unit == "vllm-station.service", argv
    if argv[0] == "stop":
        stop_sim(host)
        write(host, "unit-stopped", "")
        return 0
    assert argv[:2] == ["start", "--no-block"], argv
    if os.path.exists(path(host, "unit-stopped")):
        os.unlink(path(host, "unit-stopped"))
    if not os.path.exists(path(host, "port")):  # a pair's worker: headless, nothing to serve
        return 0
    gen = int(read(host, "profile").split("-")[1])
    if os.path.exists(path(host, "worker")):
        worker = read(host, "worker")
        if stopped(worker) or read(worker, "profile") != read(host, "profile"):
            return 0  # the head's start waits for a worker of its own generation: it never serves
    stop_sim(host)
    start_sim(host, gen)
    return 0


def nixos_rebuild(argv):
    hosts = sorted(os.listdir(os.path.join(LAB, "hosts")))
    drained = [h for h in hosts if os.path.exists(path(h, "drain/drained"))]
    with open(os.path.join(LAB, "log"), "a") as f:
        f.write("nixos-rebuild " + " ".join(argv) + " drained=" + ",".join(drained) + "\n")
    host = argv[argv.index("--target-host") + 1]
    write(host, "switch.pid", str(os.getpid()))
    current = int(read(host, "profile").split("-")[1])
    if "--rollback" in argv:
        activate(host, current - 1)
        return 0
    with open(path(host, f"gens/{current + 1}.json")) as f:
        how = json.load(f).get("switch", "ok")
    if how == "fail":
        print("error: builder for '/nix/store/…-nixos-system.drv' failed with exit code 1", file=sys.stderr)
        return 1
    activate(host, current + 1)
    if how == "hang":  # activation waits for a unit that never starts
        print("activating the configuration...", flush=True)
        time.sleep(3600)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "nixos-rebuild":
        sys.exit(nixos_rebuild(sys.argv[2:]))
    if sys.argv[1] == "start":
        start_sim(sys.argv[2], int(sys.argv[3]))
    if sys.argv[1] == "systemctl":
        sys.exit(systemctl(sys.argv[2], sys.argv[3:]))
'''

# what golive runs in these tests: smoke and the tool-call battery (a serving fault fails `tools`)
GOLIVE = "{remote} station golive --base-url {url} --json --quiet --skip agent,needle,bench --timeout 60"
WAIT = "{remote} station wait-ready --base-url {url} --timeout {timeout} --interval 0.2 --json"
FAULT = "zero_arg_dropped"  # a serving fault the tool-call battery catches (docs/gates.md)


@dataclass
class Lab:
    root: Path
    env: dict[str, str]

    def host(self, host: str) -> Path:
        return self.root / "hosts" / host

    def add(self, host: str, gates: str = "reference") -> str:
        """A host serving generation 1 (by default the gates' reference answers) on a port of its own; its
        URL."""
        d = self.host(host)
        (d / "gens").mkdir(parents=True)
        (d / "port").write_text(str(free_port()))
        (d / "profile").write_text("system-1-link")
        self.generation(host, 1, gates=gates)
        subprocess.run([sys.executable, str(self.root / "standin.py"), "start", host, "1"], env=self.env,
                       check=True, timeout=60)  # fmt: skip
        return f"http://127.0.0.1:{(d / 'port').read_text()}"

    def add_worker(self, head: str, worker: str) -> None:
        """`worker` (headless: no port) is `head`'s pair worker, on generation 1."""
        d = self.host(worker)
        (d / "gens").mkdir(parents=True)
        (d / "profile").write_text("system-1-link")
        self.generation(worker, 1)
        (self.host(head) / "worker").write_text(worker)

    def generation(self, host: str, n: int, gates: str = "reference", switch: str = "ok") -> None:
        (self.host(host) / "gens" / f"{n}.json").write_text(json.dumps({"gates": gates, "switch": switch}))

    def log(self) -> list[str]:
        path = self.root / "log"
        return path.read_text().splitlines() if path.exists() else []

    def profile(self, host: str) -> str:
        return (self.host(host) / "profile").read_text()

    def drained(self, host: str) -> bool:
        return (self.host(host) / "drain" / "drained").exists()

    def fleet(self, stations: dict[str, str], urls: dict[str, str]) -> Path:
        path = self.root / "fleet.json"
        path.write_text(json.dumps({"stations": [
            {"name": name, "host": host, "url": urls[host]} for name, host in stations.items()
        ]}))  # fmt: skip
        return path

    def rollout(self, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "vllm_station", "rollout", "--wait-command", WAIT,
             "--golive-command", GOLIVE, "--ready-timeout", "120", "--command-timeout", "120", *argv],
            env=self.env, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip


def _wait_listening(port: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port} after {timeout_s} s")


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    root = tmp_path / "lab"
    for d in ("bin", "remote-bin", "hosts"):
        (root / d).mkdir(parents=True)
    python = sys.executable
    for rel, text in (("bin/ssh", SSH), ("bin/nixos-rebuild", NIXOS_REBUILD.format(python=python)),
                      ("remote-bin/station", REMOTE_STATION.format(python=python)),
                      ("remote-bin/readlink", REMOTE_READLINK),
                      ("remote-bin/systemctl", REMOTE_SYSTEMCTL.format(python=python))):  # fmt: skip
        (root / rel).write_text(text)
        (root / rel).chmod(0o755)
    (root / "standin.py").write_text(STANDIN)
    env = {
        **os.environ,
        "LAB": str(root),
        "PATH": f"{root / 'bin'}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    for var in ("STATION_DRAIN_DIR", "STATION_STOPPING_FLAG", "STATION_BASE_URL"):
        env.pop(var, None)
    yield Lab(root, env)
    for pidfile in (root / "hosts").glob("*/*.pid"):
        with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
            os.killpg(int(pidfile.read_text()), signal.SIGKILL)


def three(lab: Lab) -> tuple[dict[str, str], Path]:
    """station-a..c on hosts ha..hc, each serving generation 1; the fleet file in that order."""
    stations = {"station-a": "ha", "station-b": "hb", "station-c": "hc"}
    urls = {host: lab.add(host) for host in stations.values()}
    for url in urls.values():
        _wait_listening(int(url.rsplit(":", 1)[1]))
    return stations, lab.fleet(stations, urls)


def _steps(station: dict[str, Any]) -> list[tuple[str, str | None, bool | None]]:
    return [(s["step"], s["generation"], s["ok"]) for s in station["steps"]]


# ---- the plan --------------------------------------------------------------------------------------


def test_dry_run_lists_every_step_and_runs_nothing(lab: Lab) -> None:
    out = lab.rollout("--station", "a=root@10.0.0.1", "--station", "b=10.0.0.2", "--station", "c=10.0.0.3",
                      "--flake", "/etc/fleet", "--dry-run", "--json", "--quiet")  # fmt: skip
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["schema"] == "station-rollout/1" and rep["dry_run"] is True and rep["result"] == "planned"
    assert [s["name"] for s in rep["stations"]] == ["a", "b", "c"]
    assert {s["state"] for s in rep["stations"]} == {"planned"}
    a = rep["stations"][0]
    ssh = ["ssh", "-o", "BatchMode=yes", "root@10.0.0.1"]
    wait = [*ssh, "station", "wait-ready", "--base-url", "http://127.0.0.1:8000", "--timeout", "120",
            "--interval", "0.2", "--json"]  # fmt: skip
    assert [(s["step"], s["generation"], s["argv"], s["when"]) for s in a["steps"][:7]] == [
        ("generation", None, [*ssh, "readlink", "/nix/var/nix/profiles/system"], None),
        ("wait-ready", "current", wait, None),
        ("drain", None, [*ssh, "station", "drain", "--reason", "rollout"], None),
        ("switch", "new", ["nixos-rebuild", "switch", "--flake", "/etc/fleet#a", "--target-host",
                           "root@10.0.0.1"], None),
        ("wait-ready", "new", wait, None),
        ("golive", "new", [*ssh, "station", "golive", "--base-url", "http://127.0.0.1:8000", "--json",
                           "--quiet", "--skip", "agent,needle,bench", "--timeout", "60"], None),
        ("undrain", None, [*ssh, "station", "undrain"], "on GO"),
    ]  # fmt: skip
    rollback = next(s for s in a["steps"] if s["step"] == "rollback")
    assert rollback["argv"] == ["nixos-rebuild", "switch", "--rollback", "--target-host", "root@10.0.0.1"]
    assert rollback["ok"] is None and rollback["exit_code"] is None
    assert lab.log() == [], "a dry run runs nothing"

    text = lab.rollout("--station", "a=h1", "--station", "b=h2", "--station", "c=h3", "--batch", "2",
                       "--dry-run")  # fmt: skip
    assert text.returncode == 0, text.stderr
    assert "wave 1: a, b" in text.stdout and "wave 2: c" in text.stdout
    assert "1 of 3 always serving" in text.stdout and "nothing was run" in text.stdout
    assert lab.log() == []


def test_dry_run_default_templates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rollout", "--station", "a=h1", "--station", "b=h2", "--dry-run", "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["stations"][1]["steps"]
    argv = {(s["step"], s["generation"]): s["argv"] for s in steps}
    assert argv[("switch", "new")] == ["nixos-rebuild", "switch", "--flake", ".#b", "--target-host", "h2"]
    assert argv[("wait-ready", "new")] == [
        "ssh", "-o", "BatchMode=yes", "h2", "station", "wait-ready", "--base-url", "http://127.0.0.1:8000",
        "--timeout", "900", "--json",
    ]  # fmt: skip
    assert argv[("golive", "new")] == [
        "ssh", "-o", "BatchMode=yes", "h2", "station", "golive", "--base-url", "http://127.0.0.1:8000",
        "--json", "--quiet",
    ]  # fmt: skip


# ---- usage -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--station", "a=h1", "--station", "b=h2", "--station", "c=h3", "--batch", "3"],
         "--batch 3: with 3 stations the fleet would have none serving; at most 2"),
        (["--station", "a=h1", "--station", "b=h2", "--batch", "5"], "at most 1"),
        (["--station", "a=h1"], "a rollout needs at least 2 stations"),
        (["--station", "a=h1", "--station", "b=h2", "--batch", "0"], "argument --batch"),
        (["--station", "a=h1", "--station", "a=h2"], "the station name 'a' is given twice"),
        (["--station", "a=h1", "--station", "b=h1"], "the station host 'h1' is given twice"),
        (["--station", "a=-oProxyCommand=x", "--station", "b=h2"], "not starting with -"),
        (["--station", "a", "--station", "b=h2"], "must be NAME=HOST"),
        (["--station", "a=h1", "--station", "b=h2", "--switch-command", "deploy {flake}#{nam}"],
         "--switch-command: unknown placeholder {nam}"),
        (["--station", "a=h1", "--station", "b=h2", "--switch-command", "deploy {remote} x"],
         "--switch-command: {remote} may only be the first word"),
        (["--station", "a=h1", "--station", "b=h2", "--golive-command", "station golive 'x"],
         "--golive-command"),
        (["--station", "a=h1", "--station", "b=h2", "--flake", "--x"], "--flake"),
        (["--fleet", "/nonexistent/fleet.json"], "--fleet /nonexistent/fleet.json: not found"),
        (["--station", "a=h1", "--station", "b=h2", "--golive-timeout", "nan"], "argument --golive-timeout"),
    ],
)
def test_usage_errors_run_nothing(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rollout", *argv]) == 2
    assert message in capsys.readouterr().err


def test_fleet_files_json_and_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toml = tmp_path / "fleet.toml"
    toml.write_text('[[stations]]\nname = "a"\nhost = "h1"\nurl = "http://127.0.0.1:8888"\n\n'
                    '[[stations]]\nname = "b"\nhost = "h2"\n')  # fmt: skip
    assert main(["rollout", "--fleet", str(toml), "--dry-run", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert [(s["name"], s["host"], s["url"]) for s in rep["stations"]] == [
        ("a", "h1", "http://127.0.0.1:8888"), ("b", "h2", "http://127.0.0.1:8000")
    ]  # fmt: skip
    bad = {
        "extra.json": ('{"stations": [{"name": "a", "host": "h1", "port": 1}]}',
                       "stations[0]: unknown key port"),
        "url.json": ('{"stations": [{"name": "a", "host": "h1", "url": "ftp://x"}, '
                     '{"name": "b", "host": "h2"}]}', "stations[0]: url must be an http:// or https:// URL"),
        "empty.json": ('{"stations": []}', "stations must be a non-empty list"),
        "broken.toml": ("[[stations]\n", "cannot read it as TOML"),
        "fleet.yaml": ("stations: []", "must end in .json or .toml"),
        "type.json": ('{"stations": [{"name": 1, "host": "h1"}]}',
                      "stations[0]: name must be a string, got a whole number"),
    }  # fmt: skip
    for name, (text, message) in bad.items():
        (tmp_path / name).write_text(text)
        assert main(["rollout", "--fleet", str(tmp_path / name), "--dry-run"]) == 2, name
        assert message in capsys.readouterr().err, name


# ---- real rollouts ---------------------------------------------------------------------------------


def test_three_stations_in_order_each_drained_before_its_switch(lab: Lab) -> None:
    stations, fleet = three(lab)
    for host in stations.values():
        lab.generation(host, 2, gates="reference")
    out = lab.rollout("--fleet", str(fleet), "--flake", "/srv/fleet", "--json")
    assert out.returncode == 0, out.stderr + out.stdout
    rep = json.loads(out.stdout)
    assert rep["result"] == "upgraded" and rep["exit_code"] == 0 and rep["failure"] is None
    assert [(s["name"], s["state"], s["routed"]) for s in rep["stations"]] == [
        ("station-a", "upgraded", True), ("station-b", "upgraded", True), ("station-c", "upgraded", True)
    ]  # fmt: skip
    for s in rep["stations"]:
        assert (s["generation_before"], s["generation_after"]) == ("system-1-link", "system-2-link")
        assert _steps(s) == [("generation", None, True), ("wait-ready", "current", True),
                             ("drain", None, True), ("switch", "new", True),
                             ("wait-ready", "new", True), ("golive", "new", True), ("undrain", None, True),
                             ("generation", "new", True)]  # fmt: skip
        golive = next(st for st in s["steps"] if st["step"] == "golive")
        assert golive["summary"] == "GO (2 gates held, 3 skipped)"
        assert [(g["name"], g["held"]) for g in golive["gates"]] == [
            ("smoke", True), ("tools", True), ("agent", None), ("needle", None), ("bench", None)
        ]  # fmt: skip
    # the order, station by station; each drained (and no other) when its switch ran
    want = []
    for name, host in stations.items():
        want += [
            f"ssh {host} readlink /nix/var/nix/profiles/system",
            f"ssh {host} station wait-ready",
            f"ssh {host} station drain --reason rollout",
            f"nixos-rebuild switch --flake /srv/fleet#{name} --target-host {host} drained={host}",
            f"ssh {host} station wait-ready",
            f"ssh {host} station golive",
            f"ssh {host} station undrain",
            f"ssh {host} readlink /nix/var/nix/profiles/system",
        ]
    log = lab.log()
    assert len(log) == len(want), log
    for line, expected in zip(log, want, strict=True):
        assert line.startswith(expected), (line, expected)
    for host in stations.values():
        assert lab.profile(host) == "system-2-link" and not lab.drained(host)


def test_a_no_go_on_the_first_station_rolls_it_back_and_touches_no_other(lab: Lab) -> None:
    _, fleet = three(lab)
    lab.generation("ha", 2, gates=FAULT)
    for host in ("hb", "hc"):
        lab.generation(host, 2, gates="reference")
    out = lab.rollout("--fleet", str(fleet), "--json")
    assert out.returncode == 1, out.stderr + out.stdout
    rep = json.loads(out.stdout)
    assert rep["result"] == "failed" and rep["exit_code"] == 1
    a, b, c = rep["stations"]
    assert (a["state"], a["routed"]) == ("rolled-back", True)
    assert (b["state"], c["state"]) == ("untouched", "untouched")
    assert _steps(a) == [
        ("generation", None, True), ("wait-ready", "current", True), ("drain", None, True),
        ("switch", "new", True), ("wait-ready", "new", True), ("golive", "new", False),
        ("generation", None, True), ("rollback", "old", True), ("generation", "old", True),
        ("wait-ready", "old", True), ("golive", "old", True), ("undrain", None, True),
    ]  # fmt: skip
    assert a["steps"][5]["summary"] == "NO-GO (not held: tools)"
    assert "station-a: golive NO-GO (not held: tools) on the new generation" in a["failure"]
    assert "rolled back to system-1-link: GO, undrained" in a["failure"]
    assert "not reached: station-b, station-c" in rep["failure"]
    assert b["steps"] == [] and c["steps"] == []
    # the schema of a step that ran
    assert set(a["steps"][5]) == {
        "step", "generation", "argv", "deadline_s", "when", "ok", "exit_code", "timed_out", "seconds",
        "summary", "stdout", "stderr", "output_cut", "gates", "on",
    }  # fmt: skip
    assert a["steps"][5]["on"] is None and a["worker"] is None  # not a pair
    assert set(rep) == {"schema", "started_at", "finished_at", "dry_run", "batch", "flake", "result",
                        "exit_code", "failure", "stations"}  # fmt: skip
    assert set(a) == {"name", "host", "url", "state", "routed", "generation_before", "generation_after",
                      "failure", "seconds", "steps", "worker"}  # fmt: skip
    assert "station rollout: failed: station-a: golive NO-GO (not held: tools)" in out.stderr
    assert lab.profile("ha") == "system-1-link" and not lab.drained("ha")
    assert lab.profile("hb") == lab.profile("hc") == "system-1-link"
    assert not any("hb" in line or "hc" in line for line in lab.log()), lab.log()
    assert [line for line in lab.log() if line.startswith("nixos-rebuild")] == [
        "nixos-rebuild switch --flake .#station-a --target-host ha drained=ha",
        "nixos-rebuild switch --rollback --target-host ha drained=ha",
    ]


def test_a_hung_switch_is_killed_at_its_deadline_and_rolled_back(lab: Lab) -> None:
    _, fleet = three(lab)
    lab.generation("ha", 2, switch="hang")
    out = lab.rollout("--fleet", str(fleet), "--switch-timeout", "20", "--json", "--quiet")
    assert out.returncode == 1, out.stderr + out.stdout
    rep = json.loads(out.stdout)
    a = rep["stations"][0]
    switch = a["steps"][3]
    assert (switch["step"], switch["ok"], switch["timed_out"]) == ("switch", False, True)
    assert switch["exit_code"] is None and switch["summary"] == "killed at its deadline (20 s)"
    assert "activating the configuration" in switch["stdout"]
    assert "station-a: switch failed: killed at its deadline (20 s)" in a["failure"]
    assert a["state"] == "rolled-back" and a["routed"] is True and [s["step"] for s in a["steps"]][4:] == [
        "generation", "rollback", "generation", "wait-ready", "golive", "undrain"
    ]  # fmt: skip
    pid = int((lab.host("ha") / "switch.pid").read_text())
    assert not Path(f"/proc/{pid}").exists(), "the killed switch was reaped"
    assert lab.profile("ha") == "system-1-link" and not lab.drained("ha")
    assert [s["state"] for s in rep["stations"][1:]] == ["untouched", "untouched"]


def test_a_switch_that_fails_before_activating_is_not_rolled_back(lab: Lab) -> None:
    """`--rollback` would take the station one generation further back than it was."""
    _, fleet = three(lab)
    lab.generation("ha", 2, switch="fail")
    out = lab.rollout("--fleet", str(fleet), "--json", "--quiet")
    assert out.returncode == 1, out.stderr + out.stdout
    a = json.loads(out.stdout)["stations"][0]
    assert [s["step"] for s in a["steps"]] == [
        "generation", "wait-ready", "drain", "switch", "generation", "wait-ready", "golive", "undrain"
    ]  # fmt: skip
    assert "builder for" in a["steps"][3]["summary"]
    assert "the switch did not change its generation: no rollback" in a["failure"]
    assert not any("--rollback" in line for line in lab.log())
    assert a["state"] == "rolled-back" and lab.profile("ha") == "system-1-link" and not lab.drained("ha")


def test_an_unreachable_host_is_exit_3_and_changes_nothing(lab: Lab) -> None:
    url = lab.add("hb")
    fleet = lab.fleet({"station-a": "nohost", "station-b": "hb"}, {"nohost": url, "hb": url})
    out = lab.rollout("--fleet", str(fleet), "--json", "--quiet")
    assert out.returncode == 3, out.stderr + out.stdout
    rep = json.loads(out.stdout)
    assert rep["result"] == "unreachable"
    assert [s["state"] for s in rep["stations"]] == ["unreachable", "untouched"]
    assert "Could not resolve hostname nohost" in rep["stations"][0]["failure"]
    assert lab.log() == ["ssh nohost readlink /nix/var/nix/profiles/system"]


def test_a_batch_of_two_upgrades_them_together_and_stops_after_its_wave(lab: Lab) -> None:
    """--batch 2 of 3: station-a and station-b at once (never station-c out too); station-b's NO-GO stops
    the rollout after that wave, station-a upgraded all the same, station-c untouched."""
    _, fleet = three(lab)
    lab.generation("ha", 2, gates="reference")
    lab.generation("hb", 2, gates=FAULT)
    lab.generation("hc", 2, gates="reference")
    out = lab.rollout("--fleet", str(fleet), "--batch", "2", "--json")
    assert out.returncode == 1, out.stderr + out.stdout
    rep = json.loads(out.stdout)
    assert rep["batch"] == 2
    assert [(s["name"], s["state"], s["routed"]) for s in rep["stations"]] == [
        ("station-a", "upgraded", True), ("station-b", "rolled-back", True), ("station-c", "untouched", None)
    ]  # fmt: skip
    assert rep["failure"].startswith("station-b: golive NO-GO (not held: tools) on the new generation")
    assert rep["failure"].endswith("not reached: station-c")
    switches = [line for line in lab.log() if line.startswith("nixos-rebuild")]
    assert sorted(line.split(" drained=")[0] for line in switches) == [
        "nixos-rebuild switch --flake .#station-a --target-host ha",
        "nixos-rebuild switch --flake .#station-b --target-host hb",
        "nixos-rebuild switch --rollback --target-host hb",
    ]
    for line in switches:  # at most the wave's two stations out of rotation, never the third
        assert set(line.split(" drained=")[1].split(",")) <= {"ha", "hb"}, line
    assert not any("hc" in line for line in lab.log())
    assert lab.profile("ha") == "system-2-link" and lab.profile("hb") == lab.profile("hc") == "system-1-link"
    assert not lab.drained("ha") and not lab.drained("hb")


@pytest.mark.parametrize(
    ("signum", "how"), [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")], ids=["ctrl-c", "sigterm"]
)
def test_ctrl_c_stops_the_running_command_and_reports_what_finished(lab: Lab, signum: int, how: str) -> None:
    """Ctrl-C (to the terminal's foreground group) or SIGTERM (to the rollout alone: `kill PID`, a CI
    runner's cancel) mid-switch: the switch — in a session of its own, which no signal to the rollout
    reaches — is stopped, the report says what finished; SIGTERM then ends the rollout by that signal."""
    _, fleet = three(lab)
    lab.generation("ha", 2, switch="hang")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_station", "rollout", "--fleet", str(fleet), "--json", "--quiet",
         "--wait-command", WAIT, "--golive-command", GOLIVE],
        env=lab.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        switch_pid = lab.host("ha") / "switch.pid"
        deadline = time.monotonic() + 300
        while not switch_pid.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert switch_pid.exists(), "the switch never started"
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as a terminal sends it to the foreground group
        else:
            os.kill(proc.pid, signal.SIGTERM)  # the rollout alone: its children never see it
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == (130 if signum == signal.SIGINT else -signal.SIGTERM), stderr
    assert "Traceback" not in stderr
    rep = json.loads(stdout)
    assert rep["result"] == "interrupted" and rep["exit_code"] == 130
    a, b, c = rep["stations"]
    assert a["state"] == "interrupted" and a["routed"] is False
    assert a["failure"].startswith(f"station-a: interrupted ({how}) at switch")
    assert a["steps"][-1]["step"] == "switch" and a["steps"][-1]["ok"] is False
    assert (b["state"], c["state"]) == ("untouched", "untouched")
    assert "WARNING: station-a (ha) is LEFT DRAINED" in stderr
    assert not Path(f"/proc/{int(switch_pid.read_text())}").exists(), "the switch outlived the Ctrl-C"
    assert not any("--rollback" in line for line in lab.log()), "after Ctrl-C nothing more runs"


def test_a_station_not_ready_before_the_drain_is_never_drained(lab: Lab) -> None:
    """The checks are tried on the current generation first: a wrong URL (or a missing key) stops the
    rollout before the station leaves the rotation, not after its rollback."""
    url = lab.add("hb")
    nobody = f"http://127.0.0.1:{free_port()}"
    fleet = lab.fleet({"station-a": "ha", "station-b": "hb"}, {"ha": nobody, "hb": url})
    lab.add("ha")
    out = lab.rollout("--fleet", str(fleet), "--ready-timeout", "2", "--json", "--quiet")
    assert out.returncode == 3, out.stderr + out.stdout
    rep = json.loads(out.stdout)
    a = rep["stations"][0]
    assert (a["state"], a["routed"], rep["stations"][1]["state"]) == ("unreachable", None, "untouched")
    assert [(s["step"], s["generation"], s["ok"]) for s in a["steps"]] == [
        ("generation", None, True), ("wait-ready", "current", False)
    ]  # fmt: skip
    assert "station-a: not ready on its current generation, before anything changed" in a["failure"]
    assert lab.log() == ["ssh ha readlink /nix/var/nix/profiles/system",
                         f"ssh ha station wait-ready --base-url {nobody} --timeout 2 --interval 0.2 --json"]
    assert not lab.drained("ha")


def test_an_old_generation_that_fails_too_leaves_the_station_drained_and_says_so(lab: Lab) -> None:
    """Undrain only on the old generation's GO: a station whose old generation fails golive as well stays
    out of rotation, loudly."""
    url_a = lab.add("ha", gates=FAULT)
    url_b = lab.add("hb")
    fleet = lab.fleet({"station-a": "ha", "station-b": "hb"}, {"ha": url_a, "hb": url_b})
    for url in (url_a, url_b):
        _wait_listening(int(url.rsplit(":", 1)[1]))
    lab.generation("ha", 2, gates=FAULT)
    out = lab.rollout("--fleet", str(fleet), "--json", "--quiet")
    assert out.returncode == 1, out.stderr + out.stdout
    rep = json.loads(out.stdout)
    a, b = rep["stations"]
    assert (a["state"], a["routed"], b["state"]) == ("left-drained", False, "untouched")
    assert [(s["step"], s["generation"], s["ok"]) for s in a["steps"]][-4:] == [
        ("rollback", "old", True), ("generation", "old", True), ("wait-ready", "old", True),
        ("golive", "old", False),
    ]
    assert ("rolled back to system-1-link, but the old generation is not serving well either (golive NO-GO "
            "(not held: tools)); it is LEFT DRAINED") in a["failure"]
    assert "station rollout: WARNING: station-a (ha) is LEFT DRAINED" in out.stderr
    assert lab.drained("ha") and lab.profile("ha") == "system-1-link"
    assert not any("undrain" in line for line in lab.log())


def test_a_password_in_a_station_url_is_masked_everywhere(lab: Lab) -> None:
    """The URL goes into the check commands' argv; the report and the plan show it masked."""
    fleet = lab.root / "fleet.toml"
    fleet.write_text('[[stations]]\nname = "a"\nhost = "h1"\nurl = "http://ops:Tr0ub4dor-and-3@127.0.0.1:9"\n\n'
                     '[[stations]]\nname = "b"\nhost = "h2"\n')  # fmt: skip
    for extra in (["--json"], []):
        out = lab.rollout("--fleet", str(fleet), "--dry-run", *extra)
        assert out.returncode == 0, out.stderr
        assert "Tr0ub4dor-and-3" not in out.stdout + out.stderr
        assert "http://ops:***@127.0.0.1:9" in out.stdout
    short = lab.root / "short.json"
    short.write_text('{"stations": [{"name": "a", "host": "h1", "url": "http://ops:pw@127.0.0.1:9"}, '
                     '{"name": "b", "host": "h2"}]}')  # fmt: skip
    out = lab.rollout("--fleet", str(short), "--dry-run")
    assert out.returncode == 2 and "the password in it is shorter than 8 characters" in out.stderr


# ---- a pair: one unit of upgrade, in its order ----------------------------------------------------------


def pair_and_one(lab: Lab) -> Path:
    """station-a (ha, serving) with its worker station-b (hb) as one pair, then station-c (hc)."""
    urls = {host: lab.add(host) for host in ("ha", "hc")}
    lab.add_worker("ha", "hb")
    for url in urls.values():
        _wait_listening(int(url.rsplit(":", 1)[1]))
    path = lab.root / "fleet.json"
    path.write_text(json.dumps({"stations": [
        {"name": "station-a", "host": "ha", "url": urls["ha"], "worker": {"name": "station-b", "host": "hb"}},
        {"name": "station-c", "host": "hc", "url": urls["hc"]},
    ]}))  # fmt: skip
    return path


# the pair's order: both units stopped (head first), both switched (worker first), both started (worker first)
PAIR_SWITCH = [
    "ssh ha systemctl stop vllm-station.service",
    "ssh hb systemctl stop vllm-station.service",
    "nixos-rebuild switch --flake .#station-b --target-host hb drained=ha",
    "nixos-rebuild switch --flake .#station-a --target-host ha drained=ha",
    "ssh hb systemctl start --no-block vllm-station.service",
    "ssh ha systemctl start --no-block vllm-station.service",
]


def test_a_pair_switches_together_in_its_order_then_the_next_station(lab: Lab) -> None:
    fleet = pair_and_one(lab)
    for host in ("ha", "hb", "hc"):
        lab.generation(host, 2)
    out = lab.rollout("--fleet", str(fleet), "--json", "--quiet")
    assert out.returncode == 0, out.stderr + out.stdout
    rep = json.loads(out.stdout)
    a, c = rep["stations"]
    assert (a["state"], a["routed"], c["state"]) == ("upgraded", True, "upgraded")
    assert a["worker"] == {"name": "station-b", "host": "hb", "generation_before": "system-1-link",
                           "generation_after": "system-2-link"}  # fmt: skip
    assert [(st["step"], st["on"]) for st in a["steps"] if st["step"] in ("stop", "switch", "start")] == [
        ("stop", None), ("stop", "worker"), ("switch", "worker"), ("switch", None), ("start", "worker"),
        ("start", None),
    ]  # fmt: skip
    pair = [ln for ln in lab.log() if "systemctl" in ln or ln.startswith("nixos-rebuild switch --flake")]
    assert pair[:6] == PAIR_SWITCH, lab.log()
    assert pair[6:] == ["nixos-rebuild switch --flake .#station-c --target-host hc drained=hc"], lab.log()
    assert [lab.profile(h) for h in ("ha", "hb", "hc")] == ["system-2-link"] * 3


def test_a_no_go_rolls_both_halves_back_in_order_and_touches_no_other(lab: Lab) -> None:
    fleet = pair_and_one(lab)
    lab.generation("ha", 2, gates=FAULT)
    lab.generation("hb", 2)
    lab.generation("hc", 2)
    out = lab.rollout("--fleet", str(fleet), "--json", "--quiet")
    assert out.returncode == 1, out.stderr + out.stdout
    rep = json.loads(out.stdout)
    a, c = rep["stations"]
    assert (a["state"], a["routed"], c["state"]) == ("rolled-back", True, "untouched")
    assert a["failure"] == ("station-a: golive NO-GO (not held: tools) on the new generation; rolled back to "
                            "system-1-link (head) and system-1-link (worker): GO, undrained")  # fmt: skip
    assert a["worker"]["generation_after"] == "system-1-link"
    cmds = [line for line in lab.log() if "systemctl" in line or line.startswith("nixos-rebuild")]
    assert cmds == [*PAIR_SWITCH,
                    "ssh ha systemctl stop vllm-station.service",
                    "ssh hb systemctl stop vllm-station.service",
                    "nixos-rebuild switch --rollback --target-host hb drained=ha",
                    "nixos-rebuild switch --rollback --target-host ha drained=ha",
                    "ssh hb systemctl start --no-block vllm-station.service",
                    "ssh ha systemctl start --no-block vllm-station.service"]  # fmt: skip
    assert [lab.profile(h) for h in ("ha", "hb", "hc")] == ["system-1-link"] * 3
    assert not any("hc" in line for line in lab.log() if "readlink" not in line), "station-c was touched"


def test_a_worker_switch_that_fails_before_activating_moves_neither_half(lab: Lab) -> None:
    """The worker's switch fails before activating: the order stops there, before the head's switch, so
    neither generation moved — no rollback (it would go one generation too far); both units are started
    again, the worker first, and the old generation's GO undrains the pair."""
    fleet = pair_and_one(lab)
    lab.generation("ha", 2)
    lab.generation("hb", 2, switch="fail")
    out = lab.rollout("--fleet", str(fleet), "--json", "--quiet")
    assert out.returncode == 1, out.stderr + out.stdout
    a, c = json.loads(out.stdout)["stations"]
    assert a["failure"].startswith("station-a: switch of the worker station-b's system failed: exit 1")
    assert "the switch changed neither generation: no rollback: GO, undrained" in a["failure"]
    assert (a["state"], a["routed"], c["state"]) == ("rolled-back", True, "untouched")
    assert not any("--rollback" in line for line in lab.log())
    assert [lab.profile(h) for h in ("ha", "hb")] == ["system-1-link"] * 2


def test_a_pair_in_the_plan_and_in_the_fleet_file(lab: Lab, tmp_path: Path) -> None:
    fleet = tmp_path / "f.json"
    fleet.write_text(json.dumps({"stations": [
        {"name": "a", "host": "h1", "worker": {"name": "b", "host": "h2"}}, {"name": "c", "host": "h3"},
    ]}))  # fmt: skip
    out = lab.rollout("--fleet", str(fleet), "--dry-run", "--json", "--quiet")
    assert out.returncode == 0, out.stderr
    a = json.loads(out.stdout)["stations"][0]
    first = [(s["step"], s["on"], s["when"]) for s in a["steps"][:12]]
    assert first == [
        ("generation", None, None), ("generation", "worker", None), ("wait-ready", None, None),
        ("drain", None, None), ("stop", None, None), ("stop", "worker", None), ("switch", "worker", None),
        ("switch", None, None), ("start", "worker", None), ("start", None, None), ("wait-ready", None, None),
        ("golive", None, None),
    ]  # fmt: skip
    worker_switch = a["steps"][6]["argv"]
    assert worker_switch == ["nixos-rebuild", "switch", "--flake", ".#b", "--target-host", "h2"]
    text = lab.rollout("--fleet", str(fleet), "--dry-run")
    assert "a (h1, checks at http://127.0.0.1:8000, with its worker b (h2) as one pair):" in text.stdout
    assert "switch (new) [worker]" in text.stdout
    for entry, message in (
        ({"name": "a", "host": "h1", "worker": {"name": "b"}}, "stations[0]: worker: host must be a string"),
        ({"name": "a", "host": "h1", "worker": {"name": "b", "host": "h2", "url": "x"}},
         "stations[0]: worker: unknown key url; the keys: name, host"),
        ({"name": "a", "host": "h1", "worker": "b"}, "stations[0]: worker: must be an object"),
        ({"name": "a", "host": "h1", "worker": {"name": "b", "host": "h3"}},
         "the station host 'h3' is given twice"),
    ):  # fmt: skip
        fleet.write_text(json.dumps({"stations": [entry, {"name": "c", "host": "h3"}]}))
        bad = lab.rollout("--fleet", str(fleet), "--dry-run")
        assert bad.returncode == 2 and message in bad.stderr, (entry, bad.stderr)
