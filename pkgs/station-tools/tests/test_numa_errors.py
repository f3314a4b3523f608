"""The libnuma binding's paths a one-node machine cannot produce, against a libnuma stand-in.

`fake_libnuma.c` (built here with the C compiler) is loaded through $STATION_LIBNUMA, in this process: it
sets no real memory policy. Its fake kernel has four nodes, a cpuset, memoryless nodes, failing calls and a
policy read-back that can disagree, each chosen by an environment variable (the file's header lists them),
and it checks `maxnode` the way Linux does. What the real kernel and the real libnuma answer is tested in
test_numa.py; the loader's search (no stand-in needed) is at the end of this file.
"""

from __future__ import annotations

import ctypes.util
import errno
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from vllm_station.errors import StationError, UsageError
from vllm_station.host import numa

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
ENV_LIBNUMA = "STATION_LIBNUMA"
MPOL_BIND = 2
MPOL_DEFAULT = 0
MPOL_INTERLEAVE = 3

FAKE_SOURCE = Path(__file__).resolve().parent / "fake_libnuma.c"
GiB = 1 << 30
MiB = 1 << 20

Configure = Callable[..., None]


def _reopen() -> None:
    numa._load.cache_clear()
    numa._numa.cache_clear()


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the libnuma stand-in (apt-get install gcc)")
    lib = tmp_path_factory.mktemp("fakenuma") / "libnuma.so.1"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(lib), str(FAKE_SOURCE)],
        check=True,
        timeout=60,
    )
    return lib


@pytest.fixture
def fake(fake_lib: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Configure]:
    """Open the stand-in instead of libnuma; the returned function sets FAKE_NUMA_<NAME> variables."""
    for name in list(os.environ):
        if name.startswith("FAKE_NUMA_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv(ENV_LIBNUMA, str(fake_lib))
    _reopen()

    def configure(**settings: str) -> None:
        for key, value in settings.items():
            monkeypatch.setenv(f"FAKE_NUMA_{key.upper()}", value)

    yield configure
    _reopen()  # the next test opens the real library again


def test_the_stand_in_is_what_the_binding_opened(fake: Configure, fake_lib: Path) -> None:
    assert numa.library_path() == str(fake_lib)
    assert numa.node_count() == 4 and numa.max_node() == 3
    assert numa.nodes() == [0, 1, 2, 3]


def test_kernel_without_numa_support(fake: Configure) -> None:
    fake(available="-1")
    assert numa.available() is False
    with pytest.raises(numa.NumaUnavailable) as err:
        numa.node_count()
    assert "reports no NUMA support (numa_available() = -1 via" in str(err.value)
    assert "station download --no-membind" in str(err.value)


def test_nodes_are_the_cpusets_nodes(fake: Configure) -> None:
    fake(allowed="0x5")
    assert numa.nodes() == [0, 2]
    fake(allowed="0x0")
    assert numa.nodes() == []


def test_node_memory(fake: Configure) -> None:
    assert numa.node_memory(2) == numa.NodeMemory(node=2, total_bytes=3 * GiB, free_bytes=512 * MiB)
    assert numa.node_memory(0) == numa.NodeMemory(node=0, total_bytes=GiB, free_bytes=0)


def test_memoryless_node_has_zero_bytes_not_an_error(fake: Configure) -> None:
    # CPU-only nodes exist: numa_node_size64() answers 0 for them, which is a size, not a failure
    fake(memoryless="0x2")
    assert numa.node_memory(1) == numa.NodeMemory(node=1, total_bytes=0, free_bytes=0)


def test_node_memory_beyond_the_highest_node(fake: Configure) -> None:
    fake(allowed="0x5")
    with pytest.raises(UsageError) as err:
        numa.node_memory(4)
    assert str(err.value) == "NUMA node 4 does not exist on this machine (nodes: 0,2)"
    with pytest.raises(UsageError, match="NUMA node -1 does not exist"):
        numa.node_memory(-1)


@pytest.mark.parametrize(
    ("function", "call", "message"),
    [
        ("numa_node_size64", lambda: numa.node_memory(2),
         f"[Errno {errno.ENOENT}] {os.strerror(errno.ENOENT)}: 'numa_node_size64(2)'"),
        ("numa_get_mems_allowed", numa.nodes,
         f"[Errno {errno.ENOMEM}] {os.strerror(errno.ENOMEM)}: 'numa_get_mems_allowed()'"),
        ("numa_allocate_nodemask", numa.get_mempolicy,
         f"[Errno {errno.ENOMEM}] {os.strerror(errno.ENOMEM)}: 'numa_allocate_nodemask()'"),
        ("numa_allocate_nodemask", lambda: numa.set_mempolicy_raw(MPOL_BIND, [0]),
         f"[Errno {errno.ENOMEM}] {os.strerror(errno.ENOMEM)}: 'numa_allocate_nodemask()'"),
        ("get_mempolicy", numa.get_mempolicy,
         f"[Errno {errno.EPERM}] {os.strerror(errno.EPERM)}: 'get_mempolicy()'"),
        ("set_mempolicy", lambda: numa.set_membind([1]),
         f"[Errno {errno.EPERM}] {os.strerror(errno.EPERM)}: 'set_mempolicy(bind, nodes 1)'"),
    ],
)  # fmt: skip
def test_a_failing_call_raises_its_errno_and_names_the_call(
    fake: Configure, function: str, call: Callable[[], object], message: str
) -> None:
    fake(fail=function)
    with pytest.raises(OSError) as err:
        call()
    assert str(err.value) == message


def test_set_membind_binds_and_reads_back(fake: Configure) -> None:
    fake(allowed="0x5")
    policy = numa.set_membind([2, 0, 2])
    assert policy == numa.MemPolicy(mode=MPOL_BIND, mode_name="bind", nodes=[0, 2])
    assert numa.get_mempolicy() == policy


def test_no_node_to_bind_to(fake: Configure) -> None:
    with pytest.raises(UsageError) as err:
        numa.set_membind([])
    assert str(err.value) == "no NUMA node given to bind to"
    assert numa.get_mempolicy().mode == MPOL_DEFAULT


@pytest.mark.parametrize(
    ("allowed", "bind", "message"),
    [
        # node 1 exists but the cpuset leaves it out; node 3, the highest, too
        ("0x5", [1], "NUMA node 1 is not allowed to this process (cpuset Mems_allowed: 0,2); "
                     "pick from those or widen the cpuset"),
        ("0x5", [3], "NUMA node 3 is not allowed to this process (cpuset Mems_allowed: 0,2); "
                     "pick from those or widen the cpuset"),
        ("0x5", [0, 1, 3], "NUMA node 1,3 is not allowed to this process (cpuset Mems_allowed: 0,2); "
                           "pick from those or widen the cpuset"),
        ("0x0", [1], "NUMA node 1 is not allowed to this process (cpuset Mems_allowed: none); "
                     "pick from those or widen the cpuset"),
        # beyond the highest node: it does not exist at all
        ("0x5", [1, 4, 5], "NUMA node 4-5 does not exist on this machine (nodes with memory here: 0,2); "
                           "pick from those"),
        ("0x0", [4], "NUMA node 4 does not exist on this machine (nodes with memory here: none); "
                     "pick from those"),
    ],
)  # fmt: skip
def test_bind_outside_the_cpuset_is_refused_before_the_kernel(
    fake: Configure, allowed: str, bind: list[int], message: str
) -> None:
    fake(allowed=allowed)
    with pytest.raises(UsageError) as err:
        numa.set_membind(bind)
    assert str(err.value) == message
    assert numa.get_mempolicy().mode == MPOL_DEFAULT  # nothing was set


@pytest.mark.parametrize(
    ("report", "reported"),
    [({"report_mode": str(MPOL_INTERLEAVE)}, "interleave:0,2"),  # another mode, the same nodes
     ({"report_nodes": "0x1"}, "bind:0"),  # the same mode, other nodes
     ({"report_mode": str(MPOL_DEFAULT), "report_nodes": "0x0"}, "default")],
)  # fmt: skip
def test_a_kernel_that_reports_another_policy_is_an_error(
    fake: Configure, report: dict[str, str], reported: str
) -> None:
    fake(allowed="0x5", **report)
    with pytest.raises(StationError) as err:
        numa.set_membind([0, 2])
    assert str(err.value) == f"set_mempolicy(bind, 0,2) succeeded but the kernel reports {reported}"


def test_mode_flags_are_not_part_of_the_mode(fake: Configure) -> None:
    fake(report_mode=str(MPOL_BIND | 1 << 15), report_nodes="0x8")  # MPOL_F_STATIC_NODES
    assert numa.get_mempolicy() == numa.MemPolicy(mode=MPOL_BIND, mode_name="bind", nodes=[3])


def test_a_mode_without_a_name_is_shown_by_number(fake: Configure) -> None:
    fake(report_mode="9")
    policy = numa.get_mempolicy()
    assert (policy.mode, policy.mode_name, policy.describe()) == (9, "mode9", "mode9")


def test_maxnode_covers_the_last_possible_node(fake: Configure) -> None:
    # Linux drops the last bit of maxnode: the binding passes size + 1, so node 63 of 64 possible is kept,
    # and nothing past the 64-bit mask is read or written
    fake(max_node="63", allowed=hex((1 << 64) - 1))
    numa.set_mempolicy_raw(MPOL_BIND, [63])
    assert numa.get_mempolicy() == numa.MemPolicy(mode=MPOL_BIND, mode_name="bind", nodes=[63])


def test_node_beyond_the_possible_nodes(fake: Configure) -> None:
    with pytest.raises(OSError) as err:
        numa.set_mempolicy_raw(MPOL_BIND, [64])
    assert err.value.errno == errno.EINVAL
    assert str(err.value) == (
        f"[Errno {errno.EINVAL}] {os.strerror(errno.EINVAL)}: "
        '"NUMA node 64 is beyond this kernel\'s 64 possible"'
    )


@pytest.mark.parametrize(
    ("mode", "nodes", "shown"),
    [(99, [0], "set_mempolicy(99, nodes 0)"),  # a mode libnuma has no name for: its number
     (MPOL_BIND, [], "set_mempolicy(bind, nodes -)")],  # binding to no node at all
)  # fmt: skip
def test_kernel_refusal_names_mode_and_nodes(
    fake: Configure, mode: int, nodes: list[int], shown: str
) -> None:
    with pytest.raises(OSError) as err:
        numa.set_mempolicy_raw(mode, nodes)
    assert str(err.value) == f"[Errno {errno.EINVAL}] {os.strerror(errno.EINVAL)}: '{shown}'"


# --- where the library is looked for (no stand-in needed) ---------------------------------------------------


@pytest.fixture
def loader(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """find_library("numa") answers what the test appends; the names it was asked for are recorded."""
    monkeypatch.delenv(ENV_LIBNUMA, raising=False)
    answers: list[str] = []
    asked: list[str] = []

    def find_library(name: str) -> str | None:
        asked.append(name)
        return answers[0] if answers else None

    monkeypatch.setattr(ctypes.util, "find_library", find_library)
    yield answers
    assert asked and set(asked) == {"numa"}


@pytest.mark.parametrize(
    ("found", "names"),
    [("libnuma.so.1.0.0", ["libnuma.so.1.0.0", "libnuma.so.1", "libnuma.so"]),
     ("libnuma.so.1", ["libnuma.so.1", "libnuma.so"]),  # not tried twice
     (None, ["libnuma.so.1", "libnuma.so"])],
)  # fmt: skip
def test_loader_candidates(loader: list[str], found: str | None, names: list[str]) -> None:
    if found is not None:
        loader.append(found)
    assert numa._candidates() == (names, "the dynamic loader's search path")


def test_pinned_library_is_the_only_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_LIBNUMA, "/nix/store/x-numactl/lib/libnuma.so.1")
    assert numa._candidates() == (
        ["/nix/store/x-numactl/lib/libnuma.so.1"],
        "$STATION_LIBNUMA=/nix/store/x-numactl/lib/libnuma.so.1",
    )


def test_a_library_that_is_not_libnuma_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("the C library's name is not known to ctypes.util.find_library here")
    monkeypatch.setenv(ENV_LIBNUMA, libc)
    _reopen()
    try:
        with pytest.raises(numa.NumaUnavailable) as err:
            numa.library_path()
    finally:
        _reopen()
    assert str(err.value).startswith(
        f"libnuma could not be loaded from ${ENV_LIBNUMA}={libc}; "
        f"tried: {libc} (not libnuma: it has no numa_available). Install libnuma"
    )
