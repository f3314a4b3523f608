"""A real systemd (252, Debian's) booted as PID 1 of a systemd-nspawn container over a volatile root.

`--volatile=yes` gives the machine this host's /usr read-only and a fresh tmpfs for everything else, so
every boot starts clean. The caller binds what a station would have (station.py: the mapped store at
/nix/store, the `station` venv, /var on disk). The machine shares the host's network, or joins a network
namespace the test made. Its memory is capped through a cgroup-v1 memory group.
Commands run inside with `nsenter` into the container's PID 1 namespaces.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

MEMORY_CGROUP = Path("/sys/fs/cgroup/memory")


class MachineError(AssertionError):
    pass


@dataclass
class Machine:
    name: str
    work: Path
    binds_ro: list[tuple[Path, str]] = field(default_factory=list)
    binds: list[tuple[Path, str]] = field(default_factory=list)
    options: list[str] = field(default_factory=list)  # more systemd-nspawn options
    kernel_args: list[str] = field(
        default_factory=list
    )  # more arguments for the machine's systemd
    memory_bytes: int = 8 << 30
    cgroups: list[str] = field(
        default_factory=list
    )  # cgroups made in the machine (dockerd's parent): removed at stop
    proc: subprocess.Popen[bytes] | None = None
    leader: int = 0
    boot_seconds: float = 0.0

    def start(self, timeout: float = 300) -> None:
        """Boot the machine; again after `stop()` too (a reboot: a fresh volatile root, the same binds)."""
        self.work.mkdir(parents=True, exist_ok=True)
        self.leader = 0
        args = [
            "systemd-nspawn",
            "--register=no",
            "--keep-unit",
            "-q",
            "-D",
            "/",
            "--volatile=yes",
            f"--machine={self.name}",
            # crun/runc create a session keyring; nspawn's default seccomp filter refuses it
            "--system-call-filter=@keyring",
            "--tmpfs=/var/tmp",
        ]
        args += [f"--bind-ro={src}:{dest}" for src, dest in self.binds_ro]
        args += [f"--bind={src}:{dest}" for src, dest in self.binds]
        args += self.options
        # basic.target: none of the host's own services (the tests start the units they need)
        args += [
            "-b",
            "systemd.firstboot=off",
            "systemd.unit=basic.target",
            *self.kernel_args,
        ]
        log = (self.work / "console.log").open("ab")  # a reboot appends
        started = time.monotonic()
        group = self._memory_group()
        if (
            group is not None
        ):  # enter the memory group before exec, so every process of the machine is in it
            args = [
                "sh",
                "-c",
                f'echo $$ > {group}/cgroup.procs && exec "$@"',
                "sh",
                *args,
            ]
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise MachineError(
                    f"systemd-nspawn exited {self.proc.returncode}: {self.console()[-2000:]}"
                )
            if not self.leader:
                self.leader = self._find_leader()
            if self.leader:
                state = self.run(
                    ["systemctl", "is-system-running"], check=False, timeout=10
                ).stdout.strip()
                if state in ("running", "degraded"):
                    self.boot_seconds = time.monotonic() - started
                    return
            time.sleep(0.5)
        self.stop()
        raise MachineError(
            f"{self.name} did not boot within {timeout:.0f} s: {self.console()[-2000:]}"
        )

    def _memory_group(self) -> Path | None:
        group = MEMORY_CGROUP / f"station-system-{self.name}"
        try:
            group.mkdir(exist_ok=True)
            (group / "memory.limit_in_bytes").write_text(str(self.memory_bytes))
        except OSError as err:
            print(
                f"no memory cgroup ({err}): the machine runs without a memory cap",
                file=sys.stderr,
            )
            return None
        return group

    def _find_leader(self) -> int:
        assert self.proc is not None
        try:
            children = (
                Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
                .read_text()
                .split()
            )
        except OSError:
            return 0
        return int(children[0]) if children else 0

    def console(self) -> str:
        try:
            return (self.work / "console.log").read_text(errors="replace")
        except OSError:
            return ""

    def run(
        self,
        argv: list[str],
        *,
        check: bool = True,
        timeout: float = 60,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside the machine (all its namespaces), as root."""
        if not self.leader:
            raise MachineError("machine not started")
        proc = subprocess.run(
            ["nsenter", "-t", str(self.leader), "-a", "--", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            check=False,
            env={
                "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "LANG": "C.UTF-8",
            },
        )
        if check and proc.returncode != 0:
            raise MachineError(
                f"in {self.name}: {shlex.join(argv)} exited {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            )
        return proc

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        self.run(["install", "-D", "-m", f"{mode:o}", "/dev/stdin", path], input=text)

    def systemctl(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        try:
            return self.run(["systemctl", *args], check=check, timeout=timeout).stdout.strip()
        except MachineError as error:
            # a failed start/stop/restart says why in the unit's journal, not in systemctl's output
            units = [a for a in args[1:] if not a.startswith("-")] if args[:1] in (
                ("start",), ("restart",), ("stop",), ("reload",)
            ) else []
            if units and "dependency" in str(error):
                # "A dependency job … failed": which one, and its own journal
                failed = self.run(["systemctl", "--failed", "--plain", "--no-legend", "--full"], check=False)
                units += [line.split()[0] for line in failed.stdout.splitlines() if line.split()]
            tails = [
                f"---- journal of {u} (last 40 lines) ----\n"
                + "\n".join(self.journal(u).splitlines()[-40:])
                for u in dict.fromkeys(units)
            ]
            raise MachineError("\n".join([str(error), *tails])) from None

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.systemctl("show", unit, *(f"-p{p}" for p in props))
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, unit: str) -> str:
        return self.run(
            ["journalctl", "-u", unit, "--no-pager", "-o", "cat"], check=False
        ).stdout

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            if self.leader:
                # a clean poweroff stops every unit (and their containers); then nspawn exits
                subprocess.run(["kill", "-RTMIN+4", str(self.leader)], check=False)
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        group = MEMORY_CGROUP / f"station-system-{self.name}"
        leftovers = [group, *(c / name for c in Path("/sys/fs/cgroup").iterdir() for name in self.cgroups)]
        # whatever outlived nspawn (an orphaned PID 1, dockerd's containers) goes with its cgroups
        for _ in range(20):
            pids = [
                pid for tree in leftovers if tree.is_dir() for f in tree.rglob("cgroup.procs") for pid in _read_pids(f)
            ]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        for tree in leftovers:
            _remove_cgroup_tree(tree)


def _remove_cgroup_tree(root: Path) -> None:
    """rmdir a cgroup-v1 directory and its children, deepest first (each must be empty of processes)."""
    if not root.is_dir():
        return
    for d in sorted(
        (p for p in root.rglob("*") if p.is_dir()),
        key=lambda p: len(p.parts),
        reverse=True,
    ):
        try:
            d.rmdir()
        except OSError as err:
            print(f"could not remove {d}: {err}", file=sys.stderr)
    try:
        root.rmdir()
    except OSError as err:
        print(f"could not remove {root}: {err}", file=sys.stderr)


def _read_pids(procs: Path) -> list[int]:
    try:
        return [int(p) for p in procs.read_text().split()]
    except OSError:
        return []
