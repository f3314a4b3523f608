"""`station numa-exec`: the child it execs carries the policy; every failure is refused before exec."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vllm_station.host import numa

pytestmark = pytest.mark.skipif(
    not numa.available(), reason="libnuma or kernel NUMA support missing: apt-get install libnuma1"
)

STATION = [sys.executable, "-m", "vllm_station"]


def station(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = dict(os.environ)
    base.pop("STATION_LIBNUMA", None)
    base.update(env or {})
    return subprocess.run([*STATION, *args], capture_output=True, text=True, env=base, timeout=120)


SELF_REPORT = textwrap.dedent(
    """
    import json, os
    from vllm_station.host import numa
    p = numa.get_mempolicy()
    print(json.dumps({"mode": p.mode_name, "nodes": p.nodes, "numa_maps": numa.policy_of_pid("self"),
                      "pid": os.getpid()}))
    """
)


def test_child_reads_its_own_policy() -> None:
    r = station("numa-exec", "--membind", "0", "--", sys.executable, "-c", SELF_REPORT)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert seen["mode"] == "bind" and seen["nodes"] == [0]
    assert seen["numa_maps"] == "bind:0"


def test_unbound_child_shows_default_policy() -> None:
    # the same probe without numa-exec: proves the probe can tell the difference
    r = subprocess.run([sys.executable, "-c", SELF_REPORT], capture_output=True, text=True, timeout=60)
    seen = json.loads(r.stdout)
    assert seen["mode"] == "default" and seen["numa_maps"] == "default"


@pytest.mark.host  # a Nix build lacks numactl
def test_numactl_show_in_child() -> None:
    if shutil.which("numactl") is None:
        pytest.skip("numactl missing: apt-get install numactl to cross-check with numactl --show")
    r = station("numa-exec", "--membind", "0", "--", "numactl", "--show")
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(":", 1) for line in r.stdout.splitlines() if ":" in line)
    assert lines["policy"].strip() == "bind"
    assert lines["membind"].strip() == "0"


def test_exec_replaces_the_process_and_keeps_exit_code(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    proc = subprocess.Popen(
        [*STATION, "numa-exec", "--", "sh", "-c", f"echo $$ > {marker}; exit 7"], env=dict(os.environ)
    )
    proc.wait(timeout=60)
    assert proc.returncode == 7
    # exec, not fork: the shell has the pid of the station process
    assert int(marker.read_text()) == proc.pid


def test_default_is_node0() -> None:
    r = station("numa-exec", "--", "grep", "-m1", "-o", "bind:0", "/proc/self/numa_maps")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "bind:0"


def test_missing_node_refused_before_exec(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    r = station("numa-exec", "--membind", "5", "--", "touch", str(marker))
    assert r.returncode == 2
    assert "NUMA node 5 does not exist" in r.stderr
    assert not marker.exists()


@pytest.mark.parametrize("argv", [["numa-exec"], ["numa-exec", "--membind", "0", "--"]])
def test_empty_command(argv: list[str]) -> None:
    r = station(*argv)
    assert r.returncode == 2
    assert "no command given" in r.stderr


def test_command_not_found() -> None:
    r = station("numa-exec", "--", "no-such-command-xyz")
    assert r.returncode == 127
    assert "command not found: 'no-such-command-xyz'" in r.stderr


def test_command_not_executable(tmp_path: Path) -> None:
    f = tmp_path / "data.txt"
    f.write_text("not a program\n")
    r = station("numa-exec", "--", str(f))
    assert r.returncode == 126
    assert "cannot execute" in r.stderr


def test_bad_node_list() -> None:
    r = station("numa-exec", "--membind", "zero", "--", "true")
    assert r.returncode == 2
    assert "cannot parse NUMA node list 'zero'" in r.stderr


def test_without_libnuma(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    r = station("numa-exec", "--", "touch", str(marker), env={"STATION_LIBNUMA": str(tmp_path / "none.so")})
    assert r.returncode == 1
    assert "libnuma could not be loaded" in r.stderr and str(tmp_path / "none.so") in r.stderr
    assert "Traceback" not in r.stderr
    assert not marker.exists()


def test_without_numa_support(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a libnuma stand-in without NUMA support (apt-get install gcc)")
    (tmp_path / "fake.c").write_text("int numa_available(void) { return -1; }\n")
    lib = tmp_path / "libnuma.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "fake.c")], check=True, timeout=60)
    marker = tmp_path / "ran"
    r = station("numa-exec", "--", "touch", str(marker), env={"STATION_LIBNUMA": str(lib)})
    assert r.returncode == 1
    assert "reports no NUMA support" in r.stderr
    assert not marker.exists()
