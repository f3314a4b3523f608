"""The cffi libnuma binding against the real libnuma and the real kernel of this machine.

Anything that *sets* a policy runs in a child process, so the pytest process keeps its default policy.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import cffi  # noqa: F401 - a dependency: without it every test below would skip, blaming libnuma
import pytest

from vllm_station.errors import UsageError
from vllm_station.host import numa

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
MPOL_DEFAULT = 0
MPOL_BIND = 2

pytestmark = pytest.mark.skipif(
    not numa.available(),
    reason="libnuma or kernel NUMA support missing: apt-get install libnuma1 (these tests need the real one)",
)

def _child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("STATION_LIBNUMA", None)
    env.update(extra)
    return env


def test_node_count_and_memory_match_sysfs() -> None:
    assert numa.node_count() >= 1
    assert 0 in numa.nodes()
    mem = numa.node_memory(0)
    meminfo = Path("/sys/devices/system/node/node0/meminfo").read_text()
    total_kb = next(int(line.split()[3]) for line in meminfo.splitlines() if "MemTotal:" in line)
    assert mem.total_bytes == total_kb * 1024
    assert 0 < mem.free_bytes <= mem.total_bytes


def test_node_memory_of_missing_node_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="NUMA node 5 does not exist"):
        numa.node_memory(5)


def test_pytest_process_itself_is_unbound() -> None:
    # the baseline the binding tests compare against: a fresh process has the default policy
    assert numa.get_mempolicy().mode == MPOL_DEFAULT
    assert numa.policy_of_pid(os.getpid()) == "default"


def test_bind_node0_is_read_back_from_the_kernel() -> None:
    child = textwrap.dedent(
        """
        import json, os, sys
        from vllm_station.host import numa
        policy = numa.set_membind([0])
        print(json.dumps({"pid": os.getpid(), "mode": policy.mode, "nodes": policy.nodes}), flush=True)
        sys.stdin.readline()  # keep running while the parent looks at /proc/<pid>
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", child],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_child_env(),
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        seen = json.loads(proc.stdout.readline())
        # the child's own get_mempolicy(2)
        assert seen["mode"] == MPOL_BIND and seen["nodes"] == [0]
        # what the kernel shows any other process: /proc/<pid>/numa_maps and /proc/<pid>/status
        assert numa.policy_of_pid(seen["pid"]) == "bind:0"
        assert 0 in numa.mems_allowed(seen["pid"])
        proc.stdin.write("\n")
        proc.stdin.flush()
    finally:
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_bind_to_missing_node_is_refused_before_the_kernel() -> None:
    with pytest.raises(UsageError) as err:
        numa.set_membind([5])
    assert "NUMA node 5 does not exist" in str(err.value)
    assert "nodes with memory here: 0" in str(err.value)
    assert numa.get_mempolicy().mode == MPOL_DEFAULT  # nothing was set


def test_kernel_refuses_missing_node_with_einval() -> None:
    # the raw syscall path: the kernel's own answer, errno read right after the call
    with pytest.raises(OSError) as err:
        numa.set_mempolicy_raw(MPOL_BIND, [5])
    assert err.value.errno == 22
    assert "set_mempolicy(bind, nodes 5)" in str(err.value)
    assert numa.get_mempolicy().mode == MPOL_DEFAULT


def test_mixed_set_with_missing_node_is_refused() -> None:
    # the kernel would silently drop node 5 from {0, 5}; the binding must not
    with pytest.raises(UsageError, match="node 5 does not exist"):
        numa.set_membind([0, 5])


@pytest.mark.parametrize(
    ("spec", "nodes"), [("0", [0]), ("0,2", [0, 2]), ("0-3", [0, 1, 2, 3]), ("3,0-1", [0, 1, 3])]
)
def test_parse_nodes(spec: str, nodes: list[int]) -> None:
    assert numa.parse_nodes(spec) == nodes
    assert numa.parse_nodes(numa.format_nodes(nodes)) == nodes


@pytest.mark.parametrize("spec", ["", "x", "1-0", "0,,1", "-1"])
def test_parse_nodes_rejects(spec: str) -> None:
    with pytest.raises(UsageError):
        numa.parse_nodes(spec)


def _import_and_use(env: dict[str, str], *prefix: str) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(
        """
        from vllm_station.host import numa   # import must work without the library
        print("available", numa.available())
        numa.node_count()
        """
    )
    return subprocess.run(
        [*prefix, sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )


def test_library_pinned_to_nothing_gives_one_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nothing" / "libnuma.so.1"
    r = _import_and_use(_child_env(STATION_LIBNUMA=str(missing)))
    assert r.returncode != 0
    assert "available False" in r.stdout
    assert "NumaUnavailable" in r.stderr
    assert f"$STATION_LIBNUMA={missing}" in r.stderr
    assert "apt-get install libnuma1" in r.stderr


@pytest.mark.host  # a Nix build lacks unshare(1)
def test_library_hidden_from_the_loader(tmp_path: Path) -> None:
    """No STATION_LIBNUMA: the system's libnuma is replaced by an empty file in a private mount namespace."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) missing: install util-linux to run the hidden-library test")
    name = ctypes.util.find_library("numa") or "libnuma.so.1"
    real = next(
        (p for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
                     "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu")
         if (p := Path(d) / name).exists()),
        None,
    )  # fmt: skip
    if real is None:
        pytest.skip(f"cannot find the file behind {name} to hide it")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m not permitted here ({probe.stderr.strip()}); needs CAP_SYS_ADMIN")
    script = tmp_path / "hide.sh"
    script.write_text(
        f'mount --bind /dev/null {real.resolve()} && mount --bind /dev/null {real} 2>/dev/null; exec "$@"\n'
    )
    r = _import_and_use(_child_env(), "unshare", "-m", "sh", str(script))
    assert r.returncode != 0, r.stdout + r.stderr
    assert "available False" in r.stdout
    assert "libnuma could not be loaded from the dynamic loader's search path" in r.stderr
    assert "libnuma.so.1" in r.stderr and "tried:" in r.stderr
    # and the real library is untouched outside that namespace
    assert numa.available()
