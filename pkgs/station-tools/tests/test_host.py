"""host/ readers against prepared roots and, where it is harmless, this machine's real /sys and /proc."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from sysfs_fixtures import (
    HBM_BYTES,
    NODE_DIR,
    add_image,
    add_listener,
    add_process,
    garble,
    gb300_root,
    make_unreadable,
    one_node_root,
    write,
    write_fake_runtime,
)

from vllm_station.host import container as rt
from vllm_station.host import sysfs
from vllm_station.host.nvml import NvmlUnavailable, read_nvml

GiB = 1024**3


def test_gb300_layout_hbm_on_memory_only_node_1(tmp_path: Path) -> None:
    root = gb300_root(tmp_path, file_pages_gib=6)
    layout = sysfs.numa_layout(root)
    assert [n.node for n in layout] == [0, 1]
    assert len(layout[0].cpus) == 72 and layout[1].cpus == []
    assert sysfs.memory_only_nodes(layout) == [1]
    assert layout[1].mem_total == HBM_BYTES // 1024 * 1024, "kB figures come back as bytes"
    assert layout[1].file_pages == 6 * GiB


def test_one_node_machine_has_no_memory_only_node(tmp_path: Path) -> None:
    root = one_node_root(tmp_path)
    assert sysfs.nodes(root) == [0]
    assert sysfs.memory_only_nodes(sysfs.numa_layout(root)) == []
    with pytest.raises(sysfs.NodeNotFound, match="NUMA node 1 does not exist"):
        sysfs.node_meminfo(root, 1)


def test_no_numa_sysfs_at_all(tmp_path: Path) -> None:
    assert sysfs.nodes(tmp_path) == []
    assert sysfs.numa_layout(tmp_path) == []


def test_meminfo_units_and_counts(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "m",
        "Node 1 MemTotal:       263579264 kB\n"
        "Node 1 Active(file):          4 kB\n"
        "Node 1 HugePages_Total:     7\n",
    )
    values = sysfs.parse_meminfo(path.read_text(), path)
    assert values == {"MemTotal": 263579264 * 1024, "Active(file)": 4096, "HugePages_Total": 7}


def test_proc_meminfo_format(tmp_path: Path) -> None:
    write(tmp_path, "proc/meminfo", "MemTotal:       24680000 kB\nMemAvailable:   1000 kB\n")
    assert sysfs.proc_meminfo(tmp_path) == {"MemTotal": 24680000 * 1024, "MemAvailable": 1024000}


def test_real_host_meminfo_and_nodes_parse() -> None:
    """This machine's own files: whatever they hold, the readers must parse them."""
    info = sysfs.proc_meminfo(Path("/"))
    assert info["MemTotal"] > 0
    for node in sysfs.nodes(Path("/")):
        assert sysfs.node_info(Path("/"), node).mem_total > 0


@pytest.mark.parametrize(
    ("rel", "problem"),
    [
        (f"{NODE_DIR}/node1/meminfo", "garbled line 1"),
        (f"{NODE_DIR}/node1/cpulist", "garbled cpulist"),
        ("proc/meminfo", "garbled line 1"),
    ],
)
def test_garbled_files_name_path_and_problem(tmp_path: Path, rel: str, problem: str) -> None:
    root = gb300_root(tmp_path)
    garble(root, rel, "0-x\n" if rel.endswith("cpulist") else "MemTotal 12 parsecs\n")
    with pytest.raises(sysfs.HostReadError) as err:
        sysfs.proc_meminfo(root) if rel.startswith("proc") else sysfs.numa_layout(root)
    assert rel in str(err.value)
    assert problem in str(err.value)


def test_unreadable_and_missing_files(tmp_path: Path) -> None:
    root = gb300_root(tmp_path)
    make_unreadable(root, f"{NODE_DIR}/node1/meminfo")
    with pytest.raises(sysfs.HostReadError, match="unreadable: it is a directory"):
        sysfs.node_meminfo(root, 1)
    (root / NODE_DIR / "node0" / "cpulist").unlink()
    with pytest.raises(sysfs.HostReadError, match="cpulist: missing"):
        sysfs.node_cpus(root, 0)
    write(root, "proc/meminfo", "")
    with pytest.raises(sysfs.HostReadError, match="empty"):
        sysfs.proc_meminfo(root)


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3,8,10-11\n", [0, 1, 2, 3, 8, 10, 11]), ("\n", []), ("5", [5])],
)
def test_cpulist(text: str, cpus: list[int]) -> None:
    assert sysfs.parse_cpulist(text, Path("x")) == cpus


def test_cpulist_rejects_reversed_range() -> None:
    with pytest.raises(sysfs.HostReadError):
        sysfs.parse_cpulist("7-3", Path("x"))


def test_tcp_listeners_and_owners_in_prepared_root(tmp_path: Path) -> None:
    root = gb300_root(tmp_path)
    add_listener(root, 8888, inode=4242, address="127.0.0.1")
    add_listener(root, 9999, inode=4243)
    add_listener(root, 8888, inode=4244, state="01")  # an established connection, not a listener
    add_process(root, 1234, "vllm", "0::/system.slice/vllm-station.service", socket_inodes=(4242,))
    add_process(root, 99, "sshd", socket_inodes=(7,))
    found = sysfs.tcp_listeners(root, 8888)
    assert found == [sysfs.Listener("127.0.0.1", 8888, 4242, "tcp")]
    owners = sysfs.socket_owners(root, {4242})
    assert owners == [sysfs.SocketOwner(1234, "vllm", "0::/system.slice/vllm-station.service")]


def test_tcp6_address_decoding(tmp_path: Path) -> None:
    write(
        tmp_path,
        "proc/net/tcp6",
        "  sl  local_address remote_address st tx rx tr tm retr uid timeout inode\n"
        "   0: 00000000000000000000000001000000:22B8 00000000000000000000000000000000:0000 0A "
        "00000000:00000000 00:00000000 00000000     0        0 777 1 0 100 0 0 10 0\n",
    )
    assert sysfs.tcp_listeners(tmp_path, 8888) == [sysfs.Listener("0:0:0:0:0:0:0:1", 8888, 777, "tcp6")]


def test_missing_proc_net_tcp_is_not_no_listener(tmp_path: Path) -> None:
    """Neither /proc/net/tcp nor tcp6: the port check must not pass on "no listener" read from nothing."""
    with pytest.raises(sysfs.HostReadError, match="cannot tell which ports are in use"):
        sysfs.tcp_listeners(tmp_path, 8888)


def test_garbled_proc_net_tcp(tmp_path: Path) -> None:
    write(tmp_path, "proc/net/tcp", "header\n 0: nonsense\n")
    with pytest.raises(sysfs.HostReadError, match="garbled line 2"):
        sysfs.tcp_listeners(tmp_path)


def test_real_listener_found_with_its_owner() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        found = sysfs.tcp_listeners(Path("/"), port)
        assert [x.port for x in found] == [port]
        owners = sysfs.socket_owners(Path("/"), {x.inode for x in found})
        assert os.getpid() in [o.pid for o in owners]


def test_nvml_absent_here_raises_unavailable() -> None:
    """No NVIDIA driver on this machine: the reader says why instead of crashing. nvidia-ml-py is a
    dependency, so the reason must be NVML itself; a missing module fails here."""
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver; the absent path is for GPU-less hosts")
    with pytest.raises(NvmlUnavailable, match=r"cannot load the NVML library|NVML could not start"):
        read_nvml()


# --- container runtime ---------------------------------------------------------------------------


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[rt.Runtime, Path]:
    script, state = write_fake_runtime(tmp_path / "rt")
    env = {"STATION_RUNTIME_CMD": str(script)}
    monkeypatch.setenv("FAKE_RUNTIME_STATE", str(state))
    return rt.resolve_runtime("docker", env, timeout_s=30), state


def test_resolve_runtime_override_and_default() -> None:
    assert rt.resolve_runtime("podman", {}).argv == ("podman",)
    assert rt.resolve_runtime("docker", {"STATION_RUNTIME_CMD": "/opt/x --flag"}).argv == ("/opt/x", "--flag")


def test_inspect_image_present_absent(fake: tuple[rt.Runtime, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    runtime, state = fake
    ref = "vllm/vllm-openai@sha256:" + "ab" * 32
    assert rt.inspect_image(runtime, ref) is None
    add_image(state, ref, [ref])
    info = rt.inspect_image(runtime, ref)
    assert info is not None and info.repo_digests == [ref]
    monkeypatch.setenv("FAKE_RUNTIME_FLAVOR", "podman")
    assert rt.inspect_image(runtime, "other@sha256:" + "0" * 64) is None


def test_inspect_image_garbage_output(fake: tuple[rt.Runtime, Path]) -> None:
    runtime, state = fake
    path = state / "images" / "x.json"
    path.write_text("not json")
    with pytest.raises(rt.RuntimeCommandError, match="not image JSON"):
        rt.inspect_image(runtime, "x")
    path.write_text(json.dumps([]))
    with pytest.raises(rt.RuntimeCommandError):
        rt.inspect_image(runtime, "x")


def test_remove_missing_container_is_false(fake: tuple[rt.Runtime, Path]) -> None:
    runtime, _ = fake
    assert rt.remove_container(runtime, "nothing-here") is False


def test_runtime_timeout_is_an_error(tmp_path: Path) -> None:
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    runtime = rt.Runtime("docker", (str(slow),), timeout_s=0.3)
    with pytest.raises(rt.RuntimeCommandError, match="did not answer within"):
        rt.remove_container(runtime, "x")
