"""One example station, rendered by NixOS and run by a real systemd in a booted machine.

`render()` evaluates checks/system/render.nix; `Station` maps the store paths its units name, boots a
machine (machine.py), gives it the container runtime a station has (dockerd, which NixOS's docker
module would run, stood in by Debian's; podman needs no daemon), and installs exactly what NixOS
renders: units, /etc files, accounts (systemd-sysusers) and directories (systemd-tmpfiles).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nixenv import run_nix

from .machine import Machine
from .store import StoreMap, show_derivations

HERE = Path(__file__).resolve().parent
CHECKS = HERE.parent

SERVE_UNIT = "vllm-station.service"
API_KEY_PATH = "/var/lib/vllm-station-secrets/vllm-api-key"
# The machine's drop_caches is this file: prestart's write is read back, the host's page cache stays.
DROP_CACHES = "/run/station-test/drop_caches"

# dockerd as a station runs it, minus what this sandbox cannot give (iptables, ip_forward, a bridge):
# the containers use the host's network (`--network=host`, as rendered).
DOCKER_UNIT = """[Unit]
Description=Docker daemon (stands in for NixOS's docker.service: Debian's dockerd)
[Service]
Type=notify
ExecStartPre=/bin/sh -c 'for c in /sys/fs/cgroup/*/; do mount -o remount,bind,rw "$c" 2>/dev/null; done; true'
ExecStart=/usr/sbin/dockerd -H unix:///run/docker.sock --exec-opt native.cgroupdriver=cgroupfs \
  --cgroup-parent=/{parent} --iptables=false --ip-masq=false --ip-forward=false --bridge=none
Delegate=yes
KillMode=process
TimeoutStopSec=30
LimitNOFILE=1048576
"""

# Host units that would get in the way in a machine sharing the host's network.
MASKED = [
    "systemd-networkd.service",
    "systemd-networkd.socket",
    "systemd-networkd-wait-online.service",
    "docker.socket",
    "docker-registry.service",
    "nftables.service",
    "containerd.service",
]


@dataclass
class Rendered:
    example: str
    units: dict[str, str]
    etc: dict[str, str]
    users: list[dict[str, Any]]
    groups: list[str]
    tmpfiles: list[str]
    drvs: list[str]
    links: dict[str, str]  # /etc path -> the store file NixOS links there (nginx.conf with the gateway)


def memlock_limit() -> str:
    """This sandbox's hard memlock limit in bytes ("" when unlimited: then nothing is rewritten)."""
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    return "" if hard == resource.RLIM_INFINITY else str(hard)


def render(
    nixos_tree: str,
    example: str,
    image: str,
    hub: str = "",
    revision: str = "",
    gateway: bool = False,
    prefetch: str = "",
) -> Rendered:
    """What NixOS renders for `example` (render.nix); `gateway`: nginx and the gateway's keys unit too;
    `revision` / `prefetch`: every download entry pinned to / prefetching that revision."""
    args = [
        "nix-instantiate",
        "--eval",
        "--read-write-mode",
        "--strict",
        "--json",
        str(HERE / "render.nix"),
        "--argstr",
        "nixosTree",
        nixos_tree,
        "--argstr",
        "example",
        example,
        "--argstr",
        "image",
        image,
        "--argstr",
        "hubEndpoint",
        hub,
        "--argstr",
        "memlock",
        memlock_limit(),
        "--argstr",
        "revision",
        revision,
        "--argstr",
        "prefetch",
        prefetch,
        "--arg",
        "gateway",
        "true" if gateway else "false",
    ]
    proc = run_nix(args, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"rendering {example} failed:\n{proc.stderr[-4000:]}")
    data = json.loads(proc.stdout)
    return Rendered(example=example, **data)


def _nix_stdout(args: list[str]) -> str:
    proc = run_nix(args, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    return proc.stdout


def _source_digest(pkg: Path) -> str:
    """What the installed package was built from: every file under src/ and pyproject.toml."""
    h = hashlib.sha256()
    for f in sorted([pkg / "pyproject.toml", *(pkg / "src").rglob("*")]):
        if f.is_file() and "__pycache__" not in f.parts and ".egg-info" not in str(f):
            h.update(str(f.relative_to(pkg)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def station_venv(cache: Path) -> Path:
    """The `station` programs a station's store path would hold: the package installed (not editable) into
    a venv of Debian's /usr/bin/python3.11, so units see no file under /root or the repo (ProtectHome).
    Dependencies are cached by pyproject.toml's hash and the checkout's path. One venv per checkout: two
    checkouts running this tier at once (worktrees) would otherwise reinstall each other's package under a
    running machine, whose units then run the other checkout's tools (seen: a restart refused by the other
    tools' preflight reading this one's config). Within one checkout the system, monitoring and day-two
    tiers run at once in different xdist workers: the package is reinstalled under a lock and only when
    its sources changed (seen: one tier's reinstall removed `bin/station` under another tier's machine,
    which then exited 127)."""
    pkg = CHECKS.parent / "pkgs" / "station-tools"
    digest = hashlib.sha256(
        (pkg / "pyproject.toml").read_bytes() + str(pkg.resolve()).encode()
    ).hexdigest()[:16]
    venv = cache / "system" / f"station-venv-{digest}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    pip = [
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
    ]
    with (venv.parent / f"station-venv-{digest}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        source = _source_digest(pkg)
        stamp = venv / ".source-installed"
        if stamp.exists() and stamp.read_text() == source and (venv / "bin" / "station").exists():
            return venv / "bin"
        with (
            tempfile.TemporaryDirectory() as build
        ):  # a copy: setuptools writes build/ next to its source
            src = Path(build) / "src"
            shutil.copytree(
                pkg,
                src,
                ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
            )
            if not (venv / ".deps-installed").exists():
                shutil.rmtree(venv, ignore_errors=True)
                run_checked(["/usr/bin/python3.11", "-m", "venv", str(venv)])
                run_checked([*pip, str(src)], timeout=900)
                (venv / ".deps-installed").touch()
            stamp.unlink(missing_ok=True)
            run_checked([*pip, "--no-deps", "--force-reinstall", str(src)], timeout=300)
            stamp.write_text(source)
    return venv / "bin"


def exec_lines(unit_text: str, key: str) -> list[str]:
    return [
        line.split("=", 1)[1]
        for line in unit_text.splitlines()
        if line.startswith(key + "=")
    ]


class Station:
    def __init__(
        self,
        rendered: Rendered,
        work: Path,
        name: str,
        station_bin: Path,
        netns: str | None = None,
    ) -> None:
        self.rendered = rendered
        self.netns = netns
        self.station_bin = station_bin  # the station venv's bin/ (what the units' store path holds)
        self.work = work
        self.name = name
        shutil.rmtree(work, ignore_errors=True)
        (work / "var").mkdir(parents=True)
        self.store = StoreMap(
            work / "store", show_derivations(_nix_stdout, rendered.drvs), station_bin
        )
        # tmpfiles: the `L+` link to the `station` package that the serving unit and golive run
        self.store.materialize_texts(
            [*rendered.units.values(), *rendered.etc.values(), *rendered.tmpfiles, *rendered.links.values()]
        )
        self.machine = Machine(
            name=name,
            work=work / "machine",
            binds_ro=[
                (work / "store", "/nix/store"),
                (
                    station_bin.parent,
                    str(station_bin.parent),
                ),  # the station venv (Debian's python)
            ],
            # /var on disk, not the volatile tmpfs: preflight's disk check wants a station's free space
            binds=[(work / "var", "/var")],
            # dockerd needs CAP_NET_ADMIN even with --network=host containers
            options=[
                "--capability=CAP_NET_ADMIN",
                *([f"--network-namespace-path=/run/netns/{netns}"] if netns else []),
            ],
            kernel_args=[f"systemd.mask={u}" for u in MASKED],
            cgroups=[f"station-{name}"],
        )

    # ---- lifecycle ----
    def boot(self, runtime: str) -> None:
        self.machine.start()
        m = self.machine
        # The store is world-readable on a station: the stand-ins must be reachable for unit users too
        # (the machine's own /root, a tmpfs mount point here, is 0700 like the host's).
        for _, dest in m.binds_ro:
            for parent in Path(dest).parents:
                if str(parent) != "/":
                    m.run(["chmod", "o+x", str(parent)])
        m.write(DROP_CACHES, "")
        m.run(["mount", "--bind", DROP_CACHES, "/proc/sys/vm/drop_caches"])
        if self.netns:
            # /sys/class/net shows the network namespace that mounted sysfs (the host's): show the machine's
            m.run(["mkdir", "-p", "/run/netns-sysfs"])
            m.run(["mount", "-t", "sysfs", "sysfs", "/run/netns-sysfs"])
            for sub in ("class/net", "devices/virtual/net"):
                m.run(["mount", "--bind", f"/run/netns-sysfs/{sub}", f"/sys/{sub}"])
        if runtime == "docker":
            m.write(
                "/etc/systemd/system/docker.service",
                DOCKER_UNIT.format(parent=f"station-{self.name}"),
            )
            m.systemctl("daemon-reload")
            m.systemctl("start", "docker.service", timeout=60)
        self.install()

    def install(self) -> None:
        m = self.machine
        r = self.rendered
        sysusers = [f"g {g} -" for g in r.groups] + [
            f'u {u["name"]} -:{u["group"]} "{u["name"]}" /var/empty' for u in r.users
        ]
        if sysusers:
            m.write("/etc/sysusers.d/vllm-station.conf", "\n".join(sysusers) + "\n")
            m.run(["systemd-sysusers", "/etc/sysusers.d/vllm-station.conf"])
        if r.tmpfiles:
            m.write("/etc/tmpfiles.d/vllm-station.conf", "\n".join(r.tmpfiles) + "\n")
            m.run(["systemd-tmpfiles", "--create", "/etc/tmpfiles.d/vllm-station.conf"])
        for path, text in r.etc.items():
            m.write(f"/etc/{path}", text)
        for path, target in r.links.items():
            m.run(["mkdir", "-p", str(Path(f"/etc/{path}").parent)])
            m.run(["ln", "-sfn", target, f"/etc/{path}"])
        # nixpkgs' units call the running system's systemctl by /run/current-system/systemd (NixOS's
        # activation links it): here that is Debian's systemd in /usr.
        if any("/run/current-system/systemd/" in text for text in r.units.values()):
            m.run(["mkdir", "-p", "/run/current-system"])
            m.run(["ln", "-sfn", "/usr", "/run/current-system/systemd"])
        for name, text in r.units.items():
            m.write(f"/etc/systemd/system/{name}", text)
            # NixOS turns wantedBy/requiredBy into .wants/.requires links itself (no `systemctl enable`)
            for key, suffix in (
                ("WantedBy", "wants"),
                ("RequiredBy", "requires"),
                ("UpheldBy", "upholds"),
            ):
                for target in " ".join(exec_lines(text, key)).split():
                    m.run(["mkdir", "-p", f"/etc/systemd/system/{target}.{suffix}"])
                    m.run(
                        [
                            "ln",
                            "-sfn",
                            f"../{name}",
                            f"/etc/systemd/system/{target}.{suffix}/{name}",
                        ]
                    )
        m.systemctl("daemon-reload")

    def stop(self) -> None:
        self.machine.stop()

    def reboot(self, runtime: str) -> float:
        """A reboot: a clean poweroff (systemd stops every unit), then a new boot of the same machine. The
        root is volatile (a fresh tmpfs: /run and /etc start empty, as on any machine), /var is the same
        directory on disk (machine.py: --volatile=yes with /var bound), and NixOS's activation at boot
        (here `install()`: /etc, accounts, tmpfiles) writes the configuration before the units start.
        Returns the seconds from poweroff to a booted machine."""
        t0 = time.monotonic()
        self.machine.stop()
        self.boot(runtime)
        return time.monotonic() - t0

    # ---- reading systemd ----
    def unit(self, name: str = SERVE_UNIT) -> str:
        return self.rendered.units[name]

    def state(self, unit: str = SERVE_UNIT) -> dict[str, str]:
        return self.machine.show(
            unit,
            "ActiveState",
            "SubState",
            "Result",
            "NRestarts",
            "MainPID",
            "ExecMainStatus",
            "InvocationID",
        )

    def wait_for(
        self,
        predicate_desc: str,
        fn: Any,
        timeout: float,
        interval: float = 0.5,
        explain: Callable[[], str] | None = None,
    ) -> Any:
        """`fn()` until it is truthy; past `timeout`, an AssertionError with its last value and, when
        given, `explain()`: what the machine says about why (a unit's state and journal)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = fn()
            if last:
                return last
            time.sleep(interval)
        why = f"\n{explain()}" if explain is not None else ""
        raise AssertionError(
            f"timed out after {timeout:.0f} s waiting for {predicate_desc}; last: {last!r}{why}"
        )

    def explain_unit(self, unit: str = SERVE_UNIT) -> str:
        """A unit's state, systemd's queued jobs, the failed units and the unit's journal tail: what a
        timed-out wait on it needs to say (a start that never came, a restart queued 60 s out, a failed
        dependency)."""
        m = self.machine
        state = self.state(unit)
        jobs = m.run(["systemctl", "list-jobs", "--no-legend", "--full"], check=False).stdout.strip()
        failed = m.run(
            ["systemctl", "--failed", "--plain", "--no-legend", "--full"], check=False
        ).stdout.strip()
        tail = "\n".join(m.journal(unit).splitlines()[-60:])
        why = []
        for line in failed.splitlines()[:4]:  # each failed unit: its result and its own journal, timed
            name = line.split()[0]
            result = m.show(name, "Result").get("Result", "?")
            own = m.run(["journalctl", "-u", name, "--no-pager", "-o", "short-precise"], check=False).stdout
            why.append(f"---- {name} (Result={result}), last 15 lines:\n" + "\n".join(own.splitlines()[-15:]))
        return "\n".join([
            f"---- {unit}: {state}\n---- queued jobs:\n{jobs or '(none)'}",
            f"---- failed units:\n{failed or '(none)'}", *why,
            f"---- journal of {unit} (last 60 lines):\n{tail}",
        ])  # fmt: skip

    def wait_state(
        self, active: str, timeout: float, unit: str = SERVE_UNIT
    ) -> dict[str, str]:
        result: dict[str, str] = self.wait_for(
            f"{unit} ActiveState={active}",
            lambda: s if (s := self.state(unit))["ActiveState"] == active else None,
            timeout,
            explain=lambda: self.explain_unit(unit),
        )
        return result

    def journal_lines(self, unit: str = SERVE_UNIT) -> list[str]:
        return self.machine.journal(unit).splitlines()

    def logs_dir(self) -> list[str]:
        out = self.machine.run(
            ["ls", "-1", "/var/log/vllm-station"], check=False
        ).stdout
        return sorted(name for name in out.split() if name.endswith(".log"))

    def containers(self, runtime: str) -> list[str]:
        out = self.machine.run(
            [runtime, "ps", "-a", "--format", "{{.Names}}"], check=False
        ).stdout
        return [n for n in out.split() if n]


def store_paths(text: str) -> set[str]:
    return set(re.findall(r"/nix/store/[0-9a-z]{32}-[^/\s\"]+", text))


def run_checked(argv: list[str], timeout: float = 60) -> str:
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]}"
        )
    return proc.stdout
