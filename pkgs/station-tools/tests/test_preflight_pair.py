"""Two-station preflight checks (group "pair") against prepared sysfs/proc trees, real TCP sockets on
127.0.0.x and a real HTTP server publishing the peer's verify stamp."""

from __future__ import annotations

import http.server
import ipaddress
import json
import resource
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pynvml
import pytest
from preflight_config import make_config, mapping
from sysfs_fixtures import gb300_root, write, write_stamp
from test_nvml import build_fake, system_nvml_loads, write_proc

from vllm_station.cli import main
from vllm_station.commands.preflight import pair
from vllm_station.commands.preflight.core import Context, PreflightConfig, load_checks, run_checks
from vllm_station.host import nvml
from vllm_station.status import Status

PAIR_CHECKS = [
    "rail-link", "rail-mtu", "rdma-device", "rdma-gid", "rail-peer", "memlock", "pair-revision",
    "pair-workers",
]  # fmt: skip
MODEL_DIR = "/var/lib/vllm-station/models/glm53"
PEER_DIR = "/var/lib/vllm-station/peer"  # where a copied/mounted peer stamp lives (inside --root)
REV_A = "a" * 40
REV_B = "b" * 40
LOCAL = "127.0.0.1"  # this station's (the head's) rail address in these tests

# --- builders --------------------------------------------------------------------------------------


def gid_text(address: str) -> str:
    """sysfs GID format: 8 groups of 4 hex digits (IPv4 addresses IPv4-mapped)."""
    ip = ipaddress.ip_address(address)
    v6 = ipaddress.IPv6Address(f"::ffff:{ip}") if ip.version == 4 else ip
    return ":".join(v6.exploded.split(":"))


LINK_LOCAL = "fe80:0000:0000:0000:a288:c2ff:fe3b:4e01"
EMPTY_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def rail_root(
    root: Path,
    *,
    iface: str = "cx8r1",
    hca: str = "mlx5_1",
    operstate: str = "up",
    mtu: int = 9000,
    address: str = LOCAL,
    port_state: str = "4: ACTIVE",
    link_layer: str = "Ethernet",
    gids: Mapping[int, tuple[str, str]] | None = None,
    memlock: str = "unlimited",
) -> Path:
    """A RoCE rail as mlx5 shows it: the usual four-entry GID table (0/1 link-local v1/v2,
    2/3 the rail address v1/v2), the netdev, the port state, and /proc/self/limits."""
    write(root, f"sys/class/net/{iface}/operstate", operstate + "\n")
    write(root, f"sys/class/net/{iface}/mtu", f"{mtu}\n")
    write(root, f"sys/class/net/{iface}/speed", "400000\n")
    write(root, "sys/class/net/lo/operstate", "unknown\n")
    write(root, "sys/class/net/enP2p1s0/operstate", "up\n")
    port = f"sys/class/infiniband/{hca}/ports/1"
    write(root, f"{port}/state", port_state + "\n")
    write(root, f"{port}/link_layer", link_layer + "\n")
    (root / f"sys/class/infiniband/{hca}/device/net/{iface}").mkdir(parents=True, exist_ok=True)
    table = (
        dict(gids)
        if gids is not None
        else {
            0: (LINK_LOCAL, "IB/RoCE v1"),
            1: (LINK_LOCAL, "RoCE v2"),
            2: (gid_text(address), "IB/RoCE v1"),
            3: (gid_text(address), "RoCE v2"),
        }
    )
    for i, (gid, kind) in table.items():
        write(root, f"{port}/gids/{i}", gid + "\n")
        write(root, f"{port}/gid_attrs/types/{i}", kind + "\n")
        write(root, f"{port}/gid_attrs/ndevs/{i}", iface + "\n")
    for i in range(len(table), len(table) + 4):  # unpopulated slots read as zero
        write(root, f"{port}/gids/{i}", EMPTY_GID + "\n")
    write_limits(root, memlock)
    return root


def write_limits(root: Path, memlock: str) -> None:
    value = f"{memlock:<21}{memlock:<21}bytes"
    write(
        root,
        "proc/self/limits",
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max open files            20000                20000                files     \n"
        f"Max locked memory         {value}     \n",
    )


def config(**pair_overrides: Any) -> PreflightConfig:
    pair_cfg: dict[str, Any] = {"headAddress": LOCAL, **pair_overrides}
    return make_config(modelDir=MODEL_DIR, revision=REV_A, pair=pair_cfg)


def run_one(root: Path, name: str, cfg: PreflightConfig) -> Any:
    (result,) = run_checks(Context(root=root, config=cfg), [name])
    return result


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return rail_root(tmp_path / "root")


# --- the registry ------------------------------------------------------------------------------------


def test_pair_checks_register_in_group_pair() -> None:
    registry = load_checks()
    assert [n for n, s in registry.items() if s.group == "pair"] == PAIR_CHECKS


def test_pair_checks_do_not_run_without_a_pair(root: Path) -> None:
    results = run_checks(Context(root=root, config=make_config()), ["pair"])
    assert [r.status for r in results] == [Status.SKIP] * len(PAIR_CHECKS)
    assert all("no pair configured" in r.figure for r in results)


# --- rail interface ----------------------------------------------------------------------------------


def test_rail_up(root: Path) -> None:
    result = run_one(root, "rail-link", config())
    assert result.status is Status.PASS
    assert result.figure == "cx8r1 up, 400 Gb/s"
    assert result.group == "pair"


@pytest.mark.parametrize(
    ("state", "status"), [("down", Status.FAIL), ("lowerlayerdown", Status.FAIL), ("unknown", Status.WARN)]
)
def test_rail_not_up(tmp_path: Path, state: str, status: Status) -> None:
    root = rail_root(tmp_path, operstate=state)
    result = run_one(root, "rail-link", config())
    assert result.status is status
    assert state in result.figure and result.fix


def test_rail_interface_missing(root: Path) -> None:
    result = run_one(root, "rail-link", config(railInterface="cx8r9"))
    assert result.status is Status.FAIL
    assert "cx8r9 does not exist" in result.figure
    assert "cx8r1" in result.figure and "enP2p1s0" in result.figure  # what is there
    assert run_one(root, "rail-mtu", config(railInterface="cx8r9")).status is Status.SKIP


def test_rail_interface_not_configured(root: Path) -> None:
    result = run_one(root, "rail-link", config(railInterface=None))
    assert result.status is Status.FAIL and "pair.railInterface is not set" in result.figure


def test_mtu_9000_passes(root: Path) -> None:
    result = run_one(root, "rail-mtu", config())
    assert result.status is Status.PASS and result.figure == "cx8r1 MTU 9000"


def test_wrong_mtu_warns(tmp_path: Path) -> None:
    root = rail_root(tmp_path, mtu=1500)
    result = run_one(root, "rail-mtu", config())
    assert result.status is Status.WARN
    assert "MTU 1500, 9000 expected" in result.figure
    assert "mtu = 9000" in result.fix
    assert result.details == {"interface": "cx8r1", "mtu": 1500, "expected": 9000}


def test_garbled_mtu_fails(root: Path) -> None:
    write(root, "sys/class/net/cx8r1/mtu", "jumbo\n")
    result = run_one(root, "rail-mtu", config())
    assert result.status is Status.FAIL and "'jumbo'" in result.figure


# --- RDMA device -------------------------------------------------------------------------------------


def test_rdma_device_present(root: Path) -> None:
    result = run_one(root, "rdma-device", config())
    assert result.status is Status.PASS
    assert result.figure == "mlx5_1 port 1 ACTIVE, link layer Ethernet, netdev cx8r1"


def test_missing_hca(root: Path) -> None:
    result = run_one(root, "rdma-device", config(railHca="mlx5_7"))
    assert result.status is Status.FAIL
    assert "mlx5_7 not found" in result.figure and "mlx5_1" in result.figure
    assert run_one(root, "rdma-gid", config(railHca="mlx5_7")).status is Status.SKIP


def test_no_rdma_devices_at_all(tmp_path: Path) -> None:
    root = gb300_root(tmp_path)
    write(root, "sys/class/net/cx8r1/operstate", "up\n")
    result = run_one(root, "rdma-device", config())
    assert result.status is Status.FAIL
    assert "no RDMA device at all" in result.figure and "mlx5_ib" in result.fix


def test_hca_port_down(tmp_path: Path) -> None:
    root = rail_root(tmp_path, port_state="1: DOWN")
    result = run_one(root, "rdma-device", config())
    assert result.status is Status.FAIL and "1: DOWN" in result.figure


def test_hca_of_another_interface_warns(root: Path) -> None:
    write(root, "sys/class/net/cx8r2/operstate", "up\n")
    result = run_one(root, "rdma-device", config(railInterface="cx8r2"))
    assert result.status is Status.WARN
    assert "its netdev is cx8r1, not the rail cx8r2" in result.figure


# --- GID index ---------------------------------------------------------------------------------------


def test_gid_roce_v2_with_the_rail_address(root: Path) -> None:
    result = run_one(root, "rdma-gid", config())
    assert result.status is Status.PASS
    assert result.figure == "mlx5_1 GID index 3: RoCE v2, 127.0.0.1 on cx8r1"


def test_roce_v1_at_the_index(root: Path) -> None:
    result = run_one(root, "rdma-gid", config(gidIndex=2))
    assert result.status is Status.FAIL
    assert "GID index 2 on mlx5_1 is IB/RoCE v1, not RoCE v2" in result.figure
    assert "use gidIndex 3" in result.fix
    assert result.details["roce_v2_indices_with_address"] == [3]


def test_gid_index_missing(root: Path) -> None:
    result = run_one(root, "rdma-gid", config(gidIndex=40))
    assert result.status is Status.FAIL
    assert "GID index 40 does not exist" in result.figure and "use gidIndex 3" in result.fix


def test_gid_index_empty(root: Path) -> None:
    result = run_one(root, "rdma-gid", config(gidIndex=5))
    assert result.status is Status.FAIL and "is empty" in result.figure


def test_gid_with_another_address(root: Path) -> None:
    result = run_one(root, "rdma-gid", config(gidIndex=1))  # RoCE v2, but the link-local GID
    assert result.status is Status.FAIL
    assert "not this station's rail address 127.0.0.1" in result.figure


def test_worker_compares_its_own_address(tmp_path: Path) -> None:
    root = rail_root(tmp_path, address="127.0.0.2")
    assert run_one(root, "rdma-gid", config(role="worker", rank=1)).status is Status.PASS
    assert run_one(root, "rdma-gid", config()).status is Status.FAIL  # as head it expects 127.0.0.1


def test_gid_type_unreadable_slot(root: Path) -> None:
    # the kernel answers EINVAL when reading the type of an unpopulated slot; a directory stands in
    path = root / "sys/class/infiniband/mlx5_1/ports/1/gid_attrs/types/3"
    path.unlink()
    path.mkdir()
    result = run_one(root, "rdma-gid", config())
    assert result.status is Status.FAIL and "of no readable type" in result.figure


def test_infiniband_link_layer_skips_gid_types(tmp_path: Path) -> None:
    root = rail_root(tmp_path, link_layer="InfiniBand")
    result = run_one(root, "rdma-gid", config())
    assert result.status is Status.PASS and "InfiniBand" in result.figure


# --- peer reachability ---------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[tuple[str, int]]:
    sock = socket.socket()
    sock.bind(("127.0.0.2", 0))
    sock.listen(8)
    try:
        yield "127.0.0.2", sock.getsockname()[1]
    finally:
        sock.close()


def closed_port(host: str) -> int:
    sock = socket.socket()
    sock.bind((host, 0))
    port = int(sock.getsockname()[1])
    sock.close()  # bound, never listened: connecting is refused
    return port


def test_peer_listening(root: Path, listener: tuple[str, int]) -> None:
    host, port = listener
    result = run_one(root, "rail-peer", config(workerAddress=host, masterPort=port))
    assert result.status is Status.PASS
    assert result.figure == f"{host}:{port} accepts connections from 127.0.0.1"


def test_peer_closed_port(root: Path) -> None:
    port = closed_port("127.0.0.3")
    result = run_one(root, "rail-peer", config(workerAddress="127.0.0.3", masterPort=port))
    assert result.status is Status.WARN
    assert f"refused port {port}: nothing listens there yet" in result.figure
    assert result.details["outcome"] == "ECONNREFUSED"


def test_peer_not_answering_fails(root: Path) -> None:
    # A listener with a full accept queue drops further SYNs: the connection times out like a dead peer.
    sock = socket.socket()
    sock.bind(("127.0.0.4", 0))
    sock.listen(0)
    port = sock.getsockname()[1]
    filler = socket.create_connection(("127.0.0.4", port), timeout=1)
    try:
        cfg = make_config(
            pair={
                "role": "head",
                "headAddress": LOCAL,
                "workerAddress": "127.0.0.4",
                "masterPort": port,
                "peerTimeoutSeconds": 0.3,
            }
        )
        result = run_one(root, "rail-peer", cfg)
    finally:
        filler.close()
        sock.close()
    assert result.status is Status.FAIL
    assert f"no answer from 127.0.0.4:{port} within 0.3 s" in result.figure
    assert result.details["outcome"] == "timeout"


def test_worker_probes_the_head(root: Path, listener: tuple[str, int]) -> None:
    host, port = listener
    cfg = config(role="worker", rank=1, headAddress=host, workerAddress="127.0.0.1", masterPort=port)
    assert run_one(root, "rail-peer", cfg).status is Status.PASS


def test_local_rail_address_not_on_this_host(root: Path, listener: tuple[str, int]) -> None:
    host, port = listener
    result = run_one(root, "rail-peer", config(headAddress="192.0.2.10", workerAddress=host, masterPort=port))
    assert result.status is Status.FAIL
    assert "rail address 192.0.2.10 is not configured on this host" in result.figure


def test_peer_beacon_port_is_probed_when_configured(root: Path, listener: tuple[str, int]) -> None:
    # the pair module's beacon listens while the peer serves and is open to us; masterPort may not be
    host, port = listener
    cfg = config(workerAddress=host, masterPort=closed_port(host), beaconPort=port)
    result = run_one(root, "rail-peer", cfg)
    assert result.status is Status.PASS
    assert result.details["port_name"] == "beaconPort" and result.details["port"] == port


def test_peer_stamp_url_port_is_probed(root: Path, listener: tuple[str, int]) -> None:
    # beaconPort null, but peerStampUrl = http://PEER:beaconPort/stamp (the beacon serves /stamp)
    host, port = listener
    cfg = config(workerAddress=host, masterPort=closed_port(host), peerStampUrl=f"http://{host}:{port}/stamp")
    result = run_one(root, "rail-peer", cfg)
    assert result.status is Status.PASS
    assert result.details["port_name"] == "peerStampUrl port" and result.details["port"] == port
    # a stamp URL on another host is not the peer's beacon: masterPort is probed
    other = config(workerAddress=host, masterPort=port, peerStampUrl="http://127.0.0.9:1/stamp")
    assert run_one(root, "rail-peer", other).details["port_name"] == "masterPort"


def test_peer_address_missing(root: Path) -> None:
    result = run_one(root, "rail-peer", config(workerAddress=None))
    assert result.status is Status.FAIL and "pair.workerAddress is not set" in result.figure


# --- memlock -------------------------------------------------------------------------------------


def test_memlock_unlimited(root: Path) -> None:
    result = run_one(root, "memlock", config())
    assert result.status is Status.PASS and result.details["soft"] == "unlimited"


def test_memlock_limited(tmp_path: Path) -> None:
    root = rail_root(tmp_path, memlock="8388608")
    result = run_one(root, "memlock", config())
    assert result.status is Status.FAIL
    assert "limited to 8 MiB" in result.figure and "LimitMEMLOCK=infinity" in result.fix


def test_memlock_limits_file_missing(root: Path) -> None:
    (root / "proc/self/limits").unlink()
    assert run_one(root, "memlock", config()).status is Status.SKIP


def test_memlock_live_host_matches_getrlimit() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    result = run_one(Path("/"), "memlock", config())
    assert result.details["source"].startswith("getrlimit")
    expected = Status.PASS if soft == resource.RLIM_INFINITY else Status.FAIL
    assert result.status is expected


# --- both stations at the same revision ----------------------------------------------------------


class StampHandler(http.server.BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[int, bytes]]] = {}

    def do_GET(self) -> None:
        code, body = self.routes.get(self.path, (404, b"not found"))
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def stamp_server() -> Iterator[tuple[str, dict[str, tuple[int, bytes]]]]:
    routes: dict[str, tuple[int, bytes]] = {}
    handler = type("Handler", (StampHandler,), {"routes": routes})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", routes
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def local_and_peer(
    root: Path, peer_revision: str = REV_A, peer_files: Mapping[str, int] | None = None
) -> bytes:
    """This station's stamp under MODEL_DIR and the peer's under PEER_DIR (both inside the root)."""
    write_stamp(root / MODEL_DIR.lstrip("/"), revision=REV_A)
    peer_stamp = write_stamp(root / PEER_DIR.lstrip("/"), revision=peer_revision, files=peer_files)
    return peer_stamp.read_bytes()


def test_same_revision_over_http(root: Path, stamp_server: tuple[str, dict[str, Any]]) -> None:
    url, routes = stamp_server
    routes["/stamp"] = (200, local_and_peer(root))
    result = run_one(root, "pair-revision", config(peerStampUrl=f"{url}/stamp"))
    assert result.status is Status.PASS
    assert (
        result.figure
        == f"both stations verified nvidia/GLM-5.3-Flash-NVFP4@{REV_A[:12]}, 2 files, same sizes"
    )


def test_revision_mismatch(root: Path, stamp_server: tuple[str, dict[str, Any]]) -> None:
    url, routes = stamp_server
    routes["/stamp"] = (200, local_and_peer(root, peer_revision=REV_B))
    result = run_one(root, "pair-revision", config(peerStampUrl=f"{url}/stamp"))
    assert result.status is Status.FAIL
    assert f"revision mismatch: here {REV_A[:12]}, peer {REV_B[:12]}" in result.figure
    assert "station copy rsync://" in result.fix


def test_same_revision_but_incomplete_sync(root: Path) -> None:
    local_and_peer(root, peer_files={"model-00001-of-00002.safetensors": 4096})
    result = run_one(root, "pair-revision", config(peerStampUrl=PEER_DIR))
    assert result.status is Status.FAIL
    assert "1 file(s) only here" in result.figure and "incomplete sync" in result.figure
    assert result.details["only_here"] == ["model-00002-of-00002.safetensors"]


def test_peer_stamp_from_a_file_url(root: Path) -> None:
    local_and_peer(root)
    url = f"file://{PEER_DIR}/.station-verified.json"  # a host path: read inside --root
    assert run_one(root, "pair-revision", config(peerStampUrl=url)).status is Status.PASS


def test_peer_stamp_url_scheme_unsupported(root: Path) -> None:
    local_and_peer(root)
    result = run_one(root, "pair-revision", config(peerStampUrl="ssh://station-b/stamp"))
    assert result.status is Status.FAIL and "unsupported peerStampUrl scheme 'ssh'" in result.figure


def test_configured_revision_differs_from_both(root: Path) -> None:
    local_and_peer(root)
    cfg = config(peerStampUrl=PEER_DIR)
    cfg.revision = REV_B
    result = run_one(root, "pair-revision", cfg)
    assert result.status is Status.FAIL and "configured revision is" in result.figure


def test_peer_stamp_http_404(root: Path, stamp_server: tuple[str, dict[str, Any]]) -> None:
    url, _ = stamp_server
    local_and_peer(root)
    result = run_one(root, "pair-revision", config(peerStampUrl=f"{url}/missing"))
    assert result.status is Status.FAIL and "answered HTTP 404" in result.figure


def test_peer_stamp_not_a_stamp(root: Path, stamp_server: tuple[str, dict[str, Any]]) -> None:
    url, routes = stamp_server
    routes["/stamp"] = (200, json.dumps({"hello": "world"}).encode())
    local_and_peer(root)
    result = run_one(root, "pair-revision", config(peerStampUrl=f"{url}/stamp"))
    assert result.status is Status.FAIL and "not a version-1 verify stamp" in result.figure


def test_peer_stamp_server_silent_times_out(root: Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)  # accepts (kernel) but never answers
    try:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/stamp"
        with pytest.raises(ValueError, match=r"did not answer within 0\.3 s"):
            pair.fetch_peer_stamp(Context(root=root, config=make_config()), url, timeout=0.3)
    finally:
        sock.close()


def test_worker_before_the_head_warns_on_an_unreachable_head_stamp(root: Path) -> None:
    local_and_peer(root)
    url = f"http://127.0.0.1:{closed_port('127.0.0.1')}/stamp"  # the head's beacon is not up yet
    result = run_one(root, "pair-revision", config(role="worker", rank=1, peerStampUrl=url))
    assert result.status is Status.WARN
    assert "the head compares both stamps when it starts" in result.figure


def test_head_fails_on_an_unreachable_worker_stamp(root: Path) -> None:
    local_and_peer(root)
    url = f"http://127.0.0.1:{closed_port('127.0.0.1')}/stamp"
    result = run_one(root, "pair-revision", config(peerStampUrl=url))
    assert result.status is Status.FAIL
    assert "cannot read the worker's stamp" in result.figure and "start the worker first" in result.fix


def test_no_local_stamp(root: Path) -> None:
    write_stamp(root / PEER_DIR.lstrip("/"))
    result = run_one(root, "pair-revision", config(peerStampUrl=PEER_DIR))
    assert result.status is Status.FAIL and "never verified" in result.figure


def test_no_peer_stamp_url_skips_with_the_fix(root: Path) -> None:
    result = run_one(root, "pair-revision", config())
    assert result.status is Status.SKIP
    assert "peerStampUrl" in result.figure and result.fix and "docs/pair.md" in result.fix


# --- pair-workers: NVML's compute processes (a gcc-built fake libnvidia-ml) and /proc under the root -----

GIB = 1024**3
GpuProcesses = Callable[..., None]


@pytest.fixture(scope="module")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake(tmp_path_factory.mktemp("nvml"), "580.95.05")


@pytest.fixture
def gpu_processes(fake_nvml_lib: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GpuProcesses]:
    """`gpu_processes(root, [(gpu, pid, bytes | None, title), …], gpus=1)`: the fake NVML reports these
    compute processes; /proc/<pid>/cmdline under `root` holds the title (empty title: no /proc entry
    readable but comm), comm its first 15 characters."""
    saved = pynvml.nvmlLib, dict(pynvml._nvmlGetFunctionPointer_cache)
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()
    monkeypatch.setenv(nvml.LIBRARY_ENV, str(fake_nvml_lib))

    def setup(root: Path, procs: list[tuple[int, int, int | None, str]], gpus: int = 1) -> None:
        for _, pid, _, title in procs:
            write_proc(root, pid, title, title.encode() + b"\0" if title else b"")
        monkeypatch.setenv("FAKE_NVML_GPUS", str(gpus))
        monkeypatch.setenv(
            "FAKE_NVML_PROCS", ",".join(f"{g}:{pid}:{'-' if b is None else b}" for g, pid, b, _ in procs)
        )

    yield setup
    pynvml.nvmlLib = saved[0]
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml._nvmlGetFunctionPointer_cache.update(saved[1])


def workers(root: Path, gpu_processes: GpuProcesses, procs: list[tuple[int, int, int | None, str]],
            gpus: int = 1, **pair_overrides: Any) -> Any:  # fmt: skip
    gpu_processes(root, procs, gpus)
    return run_one(root, "pair-workers", config(**pair_overrides))


def test_workers_this_ranks_worker_on_the_head(root: Path, gpu_processes: GpuProcesses) -> None:
    procs = [(0, 4242, 218 * GIB, "VLLM::Worker_TP0"), (0, 77, GIB // 2, "python3")]
    result = workers(root, gpu_processes, procs)
    assert result.status is Status.PASS
    figure = "VLLM::Worker_TP0 (pid 4242) holds 218.0 GiB on GPU0; this station is rank 0 (head)"
    assert result.figure == figure
    assert [p["pid"] for p in result.details["processes"]] == [4242]  # not vLLM: the gpu check's business


def test_workers_rank_1_on_the_worker_station(root: Path, gpu_processes: GpuProcesses) -> None:
    result = workers(
        root, gpu_processes, [(0, 8842, 218 * GIB, "VLLM::Worker_TP1_EP1")], role="worker", rank=1,
        workerAddress=LOCAL, headAddress="127.0.0.2",
    )  # fmt: skip
    assert result.status is Status.PASS
    assert "VLLM::Worker_TP1_EP1 (pid 8842)" in result.figure and "rank 1 (worker)" in result.figure


def test_workers_the_other_ranks_worker_here_fails(root: Path, gpu_processes: GpuProcesses) -> None:
    result = workers(root, gpu_processes, [(0, 4243, 218 * GIB, "VLLM::Worker_TP1")])
    assert result.status is Status.FAIL
    assert result.figure == (
        "VLLM::Worker_TP1 (pid 4243) holds 218.0 GiB on GPU0, but this station is rank 0 (head): "
        "the other rank's worker runs here"
    )
    assert result.fix and "pair.role" in result.fix


def test_workers_an_engine_with_the_whole_model_fails(root: Path, gpu_processes: GpuProcesses) -> None:
    """TP 1 on GPU: vLLM's 'uni' executor loads the whole model in VLLM::EngineCore, no worker at all."""
    result = workers(root, gpu_processes, [(0, 31544, 436 * GIB, "VLLM::EngineCore")])
    assert result.status is Status.FAIL
    assert "VLLM::EngineCore (pid 31544) holds 436.0 GiB on GPU0: one process holds the weights of both" in (
        result.figure
    )
    assert "its title names no TP rank" in result.figure


def test_workers_one_process_on_two_gpus_fails(root: Path, gpu_processes: GpuProcesses) -> None:
    procs = [(0, 4242, 218 * GIB, "VLLM::Worker_TP0"), (1, 4242, 218 * GIB, "VLLM::Worker_TP0")]
    result = workers(root, gpu_processes, procs, gpus=2)
    assert result.status is Status.FAIL
    both = "one process holds the weights of both ranks (vLLM runs with tensor parallel size 1 across GPUs)"
    assert both in result.figure


def test_workers_none_yet_skips(root: Path, gpu_processes: GpuProcesses) -> None:
    result = workers(root, gpu_processes, [(0, 77, 3 * GIB, "python3")])
    assert result.status is Status.SKIP
    assert result.figure == (
        "no vLLM process holds a GPU here yet (1 GPU(s) seen); "
        "run after the unit is active: station preflight --only pair-workers"
    )


def test_workers_still_loading_warns(root: Path, gpu_processes: GpuProcesses) -> None:
    result = workers(root, gpu_processes, [(0, 4242, 600 * 1024**2, "VLLM::Worker_TP0")])
    assert result.status is Status.WARN
    assert "under 1 GiB, the weights are not loaded yet" in result.figure


def test_workers_rank_cut_from_comm_warns(root: Path, gpu_processes: GpuProcesses) -> None:
    """Only comm readable ("VLLM::Worker_TP", 15 characters): the rank is unknown, not a FAIL."""
    gpu_processes(root, [(0, 4242, None, "VLLM::Worker_TP0")])
    (root / "proc/4242/cmdline").write_bytes(b"")  # e.g. hidepid, or a zombie
    result = run_one(root, "pair-workers", config())
    assert result.status is Status.WARN
    assert "VLLM::Worker_TP (pid 4242) holds an unknown amount on GPU0: no TP rank readable" in result.figure


def test_workers_without_nvml_skip(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if system_nvml_loads():
        pytest.skip("this machine has a real libnvidia-ml.so.1 on the loader path")
    saved = pynvml.nvmlLib
    pynvml.nvmlLib = None
    monkeypatch.setenv(nvml.LIBRARY_ENV, str(root / "nope.so"))
    try:
        result = run_one(root, "pair-workers", config())
    finally:
        pynvml.nvmlLib = saved
    assert result.status is Status.SKIP and result.figure.startswith("no NVML: cannot load the NVML library")


# --- through `station preflight` ---------------------------------------------------------------


def test_cli_pair_group_all_pass(
    root: Path,
    tmp_path: Path,
    listener: tuple[str, int],
    gpu_processes: GpuProcesses,
    capsys: pytest.CaptureFixture[str],
) -> None:
    host, port = listener
    local_and_peer(root)
    cfg = mapping(
        modelDir=MODEL_DIR,
        revision=REV_A,
        pair={
            "role": "head",
            "rank": 0,
            "headAddress": LOCAL,
            "workerAddress": host,
            "railInterface": "cx8r1",
            "railHca": "mlx5_1",
            "gidIndex": 3,
            "masterPort": port,
            "peerStampUrl": PEER_DIR,
        },
    )
    cfg_path = tmp_path / "preflight.json"
    cfg_path.write_text(json.dumps(cfg))
    gpu_processes(root, [(0, 4242, 218 * GIB, "VLLM::Worker_TP0")])
    code = main(["preflight", "--config", str(cfg_path), "--root", str(root), "--only", "pair", "--json"])
    data = json.loads(capsys.readouterr().out)
    statuses = {c["name"]: c["status"] for c in data["checks"]}
    assert statuses == dict.fromkeys(PAIR_CHECKS, "PASS")
    assert code == 0


def test_cli_pair_failures_exit_1(
    tmp_path: Path, gpu_processes: GpuProcesses, capsys: pytest.CaptureFixture[str]
) -> None:
    root = rail_root(tmp_path / "root", operstate="down", mtu=1500, memlock="65536")
    gpu_processes(root, [(0, 4243, 218 * GIB, "VLLM::Worker_TP1")])  # the worker's rank on the head
    cfg_path = tmp_path / "preflight.json"
    cfg_path.write_text(
        json.dumps(mapping(pair={"role": "head", "headAddress": LOCAL, "workerAddress": "127.0.0.3",
                                 "masterPort": closed_port("127.0.0.3"), "railInterface": "cx8r1",
                                 "railHca": "mlx5_1", "gidIndex": 2}))
    )  # fmt: skip
    code = main(["preflight", "--config", str(cfg_path), "--root", str(root), "--only", "pair"])
    out = capsys.readouterr().out
    assert code == 1
    lines = {
        line.split()[1]: line.split()[0]
        for line in out.splitlines()
        if line[:4] in ("PASS", "WARN", "FAIL", "SKIP")
    }
    assert lines == {
        "rail-link": "FAIL",
        "rail-mtu": "WARN",
        "rdma-device": "PASS",
        "rdma-gid": "FAIL",
        "rail-peer": "WARN",
        "memlock": "FAIL",
        "pair-revision": "SKIP",
        "pair-workers": "FAIL",
    }
