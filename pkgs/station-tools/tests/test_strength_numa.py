"""Mutants of the NUMA binding (`vllm_station.host.numa`, `membind`; scripts/bench-mutation): node lists as
numactl and the kernel write them, the per-process files under /proc, and the binding this process gets
from real libnuma on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_station import bounded
from vllm_station.errors import StationError, UsageError
from vllm_station.host import numa
from vllm_station.membind import bind_memory

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
MPOL_DEFAULT = 0
MPOL_BIND = 2


@pytest.mark.parametrize(
    ("spec", "nodes"),
    [("0", [0]), (" 3 ", [3]), ("0,2", [0, 2]), ("0-3", [0, 1, 2, 3]), ("0-1,4", [0, 1, 4]),
     ("4, 1 - 2 ,1", [1, 2, 4]), ("2-2", [2]), ("1023", [1023]), ("1022-1023", [1022, 1023])],
)  # fmt: skip
def test_parse_nodes(spec: str, nodes: list[int]) -> None:
    assert numa.parse_nodes(spec) == nodes


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty NUMA node list: give nodes like 0, 0,1 or 0-3"),
        ("  ", "empty NUMA node list: give nodes like 0, 0,1 or 0-3"),
        ("0,,1", "cannot parse NUMA node list '0,,1': give nodes like 0, 0,1 or 0-3"),
        ("a", "cannot parse NUMA node list 'a': give nodes like 0, 0,1 or 0-3"),
        ("-1", "cannot parse NUMA node list '-1': give nodes like 0, 0,1 or 0-3"),
        ("3-1", "cannot parse NUMA node list '3-1': range 3-1 runs backwards"),
        ("1024", "NUMA node list '1024': node 1024 is above 1023 (the kernel supports at most 1024 nodes)"),
        ("0-1024",
         "NUMA node list '0-1024': node 1024 is above 1023 (the kernel supports at most 1024 nodes)"),
    ],
)
def test_parse_nodes_refuses(spec: str, message: str) -> None:
    with pytest.raises(UsageError) as err:
        numa.parse_nodes(spec)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("nodes", "text"),
    [([], ""), ([0], "0"), ([0, 1], "0-1"), ([0, 1, 2, 5], "0-2,5"), ([5, 0, 1, 1], "0-1,5"),
     ([1, 3, 5], "1,3,5"), ([7, 8, 9, 10, 12, 13], "7-10,12-13")],
)  # fmt: skip
def test_format_nodes(nodes: list[int], text: str) -> None:
    assert numa.format_nodes(nodes) == text
    if nodes:
        assert numa.parse_nodes(text) == sorted(set(nodes))


def test_policy_describe() -> None:
    assert numa.MemPolicy(MPOL_DEFAULT, "default", []).describe() == "default"
    assert numa.MemPolicy(MPOL_BIND, "bind", [0, 1, 3]).describe() == "bind:0-1,3"


def _status(tmp_path: Path, pid: str, text: str) -> Path:
    d = tmp_path / pid
    d.mkdir(parents=True, exist_ok=True)
    (d / "status").write_text(text)
    return d / "status"


def test_mems_allowed_from_proc(tmp_path: Path) -> None:
    _status(tmp_path, "42", "Name:\tx\nCpus_allowed_list:\t0-3\nMems_allowed_list:\t0-1,3\n")
    assert numa.mems_allowed(42, tmp_path) == [0, 1, 3]
    _status(tmp_path, "43", "Mems_allowed_list:\t\n")
    assert numa.mems_allowed("43", tmp_path) == []
    path = _status(tmp_path, "44", "Name:\tx\n")
    with pytest.raises(StationError) as err:
        numa.mems_allowed(44, tmp_path)
    assert str(err.value) == f"{path} has no Mems_allowed_list line (kernel without cpusets?)"
    with pytest.raises(StationError) as err:
        numa.mems_allowed(45, tmp_path)
    assert str(err.value) == f"cannot read {tmp_path / '45' / 'status'}: No such file or directory"
    assert numa.mems_allowed() == numa.mems_allowed(os.getpid())


def test_policy_of_pid_is_the_most_common_policy(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7/numa_maps").write_text(
        "55d0 bind:0 file=/usr/bin/python3 mapped=1\n"
        "55d1 bind:0 heap anon=3\n"
        "7f00 interleave:0-1 anon=9\n"
        "7f01 bind:0 stack anon=2\n"
        "not a mapping line\n"
    )
    assert numa.policy_of_pid(7, tmp_path) == "bind:0"
    (tmp_path / "8").mkdir()
    (tmp_path / "8/numa_maps").write_text("garbage\n")
    with pytest.raises(StationError) as err:
        numa.policy_of_pid("8", tmp_path)
    assert str(err.value) == f"{tmp_path / '8' / 'numa_maps'} lists no mappings"
    with pytest.raises(StationError) as err:
        numa.policy_of_pid(9, tmp_path)
    assert str(err.value) == f"cannot read {tmp_path / '9' / 'numa_maps'}: No such file or directory"


def test_bind_memory_in_a_child_reports_the_kernel_read_back() -> None:
    """The real libnuma on this machine, in a fork (the binding is per process and must not stay here)."""
    if not numa.available():
        pytest.skip("libnuma is not loadable here (apt-get install libnuma1; scripts/check installs it)")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            out = "|".join([bind_memory("0", "test"), numa.policy_of_pid(), numa.get_mempolicy().describe()])
        except BaseException as exc:
            out = f"error: {exc}"
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        got = f.read()
    os.waitpid(pid, 0)
    assert got == "bind:0|bind:0|bind:0"
    with pytest.raises(UsageError, match="NUMA node 1023 does not exist on this machine"):
        bind_memory("1023", "test")
    assert numa.get_mempolicy().describe() == "default", "a refused binding leaves this process unbound"


def test_proc_files_with_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "5").mkdir()
    (tmp_path / "5/status").write_bytes(b"Name:\tpython\xff\nMems_allowed_list:\t0\n")
    assert numa.mems_allowed(5, tmp_path) == [0]
    (tmp_path / "5/numa_maps").write_bytes(b"55d0 bind:0 file=/data/\xfe\xff.bin mapped=1\n")
    assert numa.policy_of_pid(5, tmp_path) == "bind:0"


def test_a_mems_allowed_value_with_a_colon_is_refused(tmp_path: Path) -> None:
    _status(tmp_path, "6", "Mems_allowed_list:\t0:1\n")
    with pytest.raises(UsageError, match=r"cannot parse NUMA node list '0:1'"):
        numa.mems_allowed(6, tmp_path)


def test_policy_of_pid_counts_each_policy(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7/numa_maps").write_text("1 interleave:0-1 anon=1\n2 bind:0 anon=1\n3 bind:0 anon=1\n")
    assert numa.policy_of_pid(7, tmp_path) == "bind:0"
    assert numa.policy_of_pid() == numa.policy_of_pid(os.getpid()), "the default is this process"


def test_a_numa_maps_past_its_limit_is_refused(tmp_path: Path) -> None:
    (tmp_path / "8").mkdir()
    with (tmp_path / "8/numa_maps").open("wb") as f:  # sparse: no disk used
        f.truncate(16 * bounded.SYSFS_LIMIT + 1)
    with pytest.raises(StationError) as err:
        numa.policy_of_pid(8, tmp_path)
    assert str(err.value).startswith(f"cannot read {tmp_path / '8' / 'numa_maps'}: ")
    assert "lists no mappings" not in str(err.value)


def test_bind_memory_errors_name_the_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without NUMA and a kernel refusal cannot be made here: set_membind is replaced."""

    def unavailable(_nodes: object) -> object:
        raise numa.NumaUnavailable("libnuma is not installed")

    monkeypatch.setattr(numa, "set_membind", unavailable)
    with pytest.raises(StationError) as err:
        bind_memory("0", "download")
    assert str(err.value) == "libnuma is not installed — to download without a NUMA binding pass --no-membind"

    def refused(_nodes: object) -> object:
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(numa, "set_membind", refused)
    with pytest.raises(StationError) as err:
        bind_memory("0-1", "copy")
    assert str(err.value) == "cannot bind memory to NUMA nodes 0-1: [Errno 1] Operation not permitted"


# ---- station numa-exec's own texts (the survivors of the whole-module run) ------------------------------


def _numa_exec(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STATION_LIBNUMA"}
    return subprocess.run([sys.executable, "-m", "vllm_station", *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)  # fmt: skip


def test_numa_exec_usage_names_the_nodes_option() -> None:
    r = _numa_exec("numa-exec", "--help")
    assert r.returncode == 0
    assert r.stdout.splitlines()[0] == "usage: station numa-exec [-h] [--membind NODES] ..."


def test_numa_exec_without_a_command_shows_how_to_give_one() -> None:
    r = _numa_exec("numa-exec", "--membind", "0")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "station numa-exec: error: no command given: station numa-exec --membind 0 -- CMD ARGS…"
    )


@pytest.mark.skipif(
    not numa.available(), reason="libnuma or kernel NUMA support missing: apt-get install libnuma1"
)
def test_numa_exec_debug_line_names_the_policy_and_the_command() -> None:
    r = _numa_exec("--debug", "numa-exec", "--membind", "0", "--", "true")
    assert r.returncode == 0, r.stderr
    line = "DEBUG vllm_station.commands.numa_exec: memory policy bind:0, exec ['true']"
    assert line in r.stderr.splitlines()
