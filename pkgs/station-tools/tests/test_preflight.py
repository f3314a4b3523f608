"""`station preflight`: every check against prepared roots (real files), the registry, the CLI and JSON."""

from __future__ import annotations

import json
import socket
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from preflight_config import FLASH, PAIR, make_config, mapping, write_config
from sysfs_fixtures import (
    NODE_DIR,
    add_container,
    add_image,
    add_listener,
    add_process,
    garble,
    gb300_root,
    make_unreadable,
    one_node_root,
    write,
    write_fake_runtime,
    write_proc_meminfo,
    write_stamp,
)

from vllm_station.cli import main
from vllm_station.commands.preflight import core
from vllm_station.commands.preflight.checks import assess_gpus
from vllm_station.commands.preflight.core import (
    CheckResult,
    Context,
    PreflightConfig,
    Status,
    check,
    run_checks,
)
from vllm_station.errors import UsageError
from vllm_station.host.nvml import GpuInfo, GpuProcess, NvmlReport

GiB = 1024**3
REV = "0123456789abcdef0123456789abcdef01234567"


def run_one(root: Path, name: str, **config: Any) -> CheckResult:
    ctx = Context(root=root, config=make_config(**config))
    (result,) = run_checks(ctx, [name])
    return result


@pytest.fixture
def gb300(tmp_path: Path) -> Path:
    return gb300_root(tmp_path / "root")


# --- configuration -------------------------------------------------------------------------------


def test_null_vllm_settings_mean_vllms_defaults(gb300: Path, tmp_path: Path) -> None:
    """The module writes null for an unset vLLM option (the glm53-tp2 preset leaves maxNumSeqs unset):
    found by the system tier, where every pair start failed with "'maxNumSeqs' must not be null"."""
    cfg = make_config(maxNumSeqs=None, gpuMemoryUtilization=None, kvCacheDtype=None, maxModelLen=None)
    assert (cfg.max_num_seqs, cfg.gpu_memory_utilization, cfg.kv_cache_dtype) == (None, 0.9, "auto")
    assert cfg.max_model_len is None, "null maxModelLen: the model's own context length"
    with pytest.raises(UsageError, match="'port' must not be null"):
        make_config(port=None)
    path = write_config(tmp_path / "preflight.json", maxNumSeqs=None, maxModelLen=98304, model="x")
    assert main(["preflight", "--config", str(path), "--root", str(gb300), "--only", "port"]) == 0


def test_config_reads_every_key_the_module_writes() -> None:
    cfg = make_config(
        port=9000,
        maxFilePagesGiB=2,
        gpuMemoryUtilization=0.9,
        modelDir="/m",
        paths={"state": "/s", "cache": "/c", "logs": "/l"},
        pair={"role": "worker", "rank": 1, "railInterface": "cx8r1", "beaconPort": 8471},
    )
    assert (cfg.port, cfg.max_file_pages_gib, cfg.gpu_memory_utilization, cfg.model_dir) == (
        9000,
        2.0,
        0.9,
        "/m",
    )
    assert cfg.max_model_len == 1048576 and cfg.kv_cache_dtype == "fp8" and cfg.gpu_node == 1
    assert (cfg.paths.state, cfg.paths.cache, cfg.paths.logs) == ("/s", "/c", "/l")
    assert cfg.pair is not None and cfg.pair.rail_interface == "cx8r1" and cfg.pair.rank == 1
    assert cfg.pair.beacon_port == 8471
    assert core.config_keys(PreflightConfig) == list(FLASH), "the keys the NixOS module writes, in order"
    assert core.config_keys(core.PairConfig) == list(PAIR)


def test_config_preflight_only_keys_are_accepted() -> None:
    cfg = make_config(diskMinFreeGiB={"cache": 1}, pair={"mtu": 4200, "peerTimeoutSeconds": 1})
    assert cfg.raw["diskMinFreeGiB"] == {"cache": 1} and cfg.raw["pair"]["mtu"] == 4200


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # a key renamed on the Nix side must not fall back to the Flash numbers
        ({"maxFilePagesGiBytes": 4}, "unknown key 'maxFilePagesGiBytes'; known keys: host, port, model,"),
        ({"paths": {"state": "/s", "cache": "/c", "logs": "/l", "tmp": "/t"}}, "unknown key 'paths.tmp'"),
        ({"pair": {**PAIR, "beacon": 1}}, "unknown key 'pair.beacon'; known keys of 'pair': role, rank,"),
    ],
)
def test_config_unknown_keys_refused(change: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as err:
        PreflightConfig.from_mapping({**FLASH, **change})
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        ("maxFilePagesGiB", "missing key 'maxFilePagesGiB'"),
        ("paths.logs", "missing key 'paths.logs'"),
        ("pair.beaconPort", "missing key 'pair.beaconPort'"),
        ("pair", "missing key 'pair'"),
    ],
)
def test_config_missing_keys_refused(drop: str, message: str) -> None:
    data = mapping(pair={})
    if "." in drop:
        outer, inner = drop.split(".")
        del data[outer][inner]
    else:
        del data[drop]
    with pytest.raises(UsageError, match=message):
        PreflightConfig.from_mapping(data)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (json.dumps(mapping(port="8888")), "'port' must be int"),
        (json.dumps(mapping(gpuMemoryUtilization=2)), "gpuMemoryUtilization must be in (0, 1]"),
        (json.dumps(mapping(pair=None) | {"pair": 3}), "'pair' must be an object"),
        (json.dumps(mapping(paths=None)), "'paths' must be an object"),
        (json.dumps(mapping(somethingNew=True)), "unknown key 'somethingNew'"),
        (json.dumps({"port": 8888}), "missing keys 'host', 'model',"),
        ("[1, 2]", "expected a JSON object"),
        ("{not json", "is not valid JSON"),
        (json.dumps(mapping(runtime="lxc")), "runtime must be docker, podman or an absolute path"),
    ],
)
def test_bad_config_is_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "preflight.json"
    path.write_text(text)
    assert main(["preflight", "--config", str(path), "--root", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_missing_check_module_is_an_error() -> None:
    from vllm_station.errors import StationError

    with pytest.raises(StationError, match=r"vllm_station\.commands\.preflight\.nonexistent cannot be imp"):
        core.load_checks(
            ("vllm_station.commands.preflight.checks", "vllm_station.commands.preflight.nonexistent")
        )


def test_missing_config_file_is_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preflight", "--config", str(tmp_path / "nope.json")]) == 2
    assert "cannot read preflight config" in capsys.readouterr().err


# --- registry ------------------------------------------------------------------------------------


@pytest.fixture
def scratch_checks() -> Iterator[None]:
    """Register throw-away checks (one that crashes, a pair check) and remove them afterwards."""
    core.load_checks()
    before = dict(core.REGISTRY)
    core.REGISTRY.clear()  # only numa and the scratch checks, so other modules' checks stay out of it
    core.REGISTRY["numa"] = before["numa"]

    @check("test-crash", group="testing")
    def crash(ctx: Context) -> CheckResult:
        raise ZeroDivisionError("boom")

    @check("test-pair", group="pair")
    def pair_probe(ctx: Context) -> CheckResult:
        assert ctx.config.pair is not None
        return CheckResult("test-pair", Status.PASS, f"rank {ctx.config.pair.rank}")

    yield
    core.REGISTRY.clear()
    core.REGISTRY.update(before)


@pytest.mark.usefixtures("scratch_checks")
def test_crashing_check_is_fail_not_crash(gb300: Path) -> None:
    results = run_checks(Context(root=gb300, config=make_config()), ["test-crash", "numa"])
    assert [r.name for r in results] == ["numa", "test-crash"], "registration order, whatever --only says"
    assert results[1].status is Status.FAIL
    assert "ZeroDivisionError: boom" in results[1].figure
    assert results[0].status is Status.PASS


@pytest.mark.usefixtures("scratch_checks")
def test_pair_group_runs_only_with_pair_config(gb300: Path) -> None:
    names = [r.name for r in run_checks(Context(root=gb300, config=make_config()))]
    assert names == ["numa", "test-crash"]
    asked = run_checks(Context(root=gb300, config=make_config()), ["pair"])
    assert [(r.name, r.status) for r in asked] == [("test-pair", Status.SKIP)]
    cfg = make_config(pair={"role": "worker", "rank": 1})
    paired = run_checks(Context(root=gb300, config=cfg))
    assert [r.name for r in paired] == ["numa", "test-crash", "test-pair"]
    pair_result = paired[-1]
    assert (pair_result.status, pair_result.figure, pair_result.group) == (Status.PASS, "rank 1", "pair")


def test_unknown_only_is_usage_error(gb300: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preflight", "--root", str(gb300), "--only", "numa,warp-drive"]) == 2
    assert "unknown check 'warp-drive'" in capsys.readouterr().err


def test_duplicate_registration_refused() -> None:
    core.load_checks()
    with pytest.raises(ValueError, match="registered twice"):
        check("numa")(lambda ctx: CheckResult("numa", Status.PASS, ""))


# --- numa / page cache / host memory -------------------------------------------------------------


def test_numa_gb300(gb300: Path) -> None:
    r = run_one(gb300, "numa")
    assert r.status is Status.PASS
    assert "GPU memory on node 1" in r.figure and "node1 234.69 GiB (no CPUs)" in r.figure
    assert r.details["memory_only_nodes"] == [1]


def test_numa_wrong_gpu_node(gb300: Path) -> None:
    r = run_one(gb300, "numa", gpuNode=2)
    assert r.status is Status.FAIL
    assert r.fix is not None and "to 1" in r.fix


def test_numa_cross_checked_with_nvml(gb300: Path) -> None:
    """On a Grace system NVML names the GPU's memory node; a gpuNode that disagrees is a FAIL."""
    report = h200(644939776, [])
    report.gpus[0].numa_node = 1
    ctx = Context(root=gb300, config=make_config(gpuNode=1))
    ctx.prime("nvml", report)
    (ok,) = run_checks(ctx, ["numa"])
    assert ok.status is Status.PASS and ok.details["nvml_gpu_numa_nodes"] == [1]
    report.gpus[0].numa_node = 2
    ctx = Context(root=gb300, config=make_config())
    ctx.prime("nvml", report)
    (bad,) = run_checks(ctx, ["numa"])
    assert bad.status is Status.FAIL
    assert "NVML says GPU memory is NUMA node [2], but gpuNode is 1" in bad.figure


def test_numa_one_node_machine(tmp_path: Path) -> None:
    r = run_one(one_node_root(tmp_path), "numa")
    assert r.status is Status.PASS
    assert "no memory-only node" in r.figure
    r0 = run_one(tmp_path, "numa", gpuNode=0)
    assert r0.status is Status.WARN and "has CPUs" in r0.figure


def test_numa_garbled_cpulist_and_no_sysfs(gb300: Path, tmp_path: Path) -> None:
    garble(gb300, f"{NODE_DIR}/node1/cpulist", "x-y\n")
    r = run_one(gb300, "numa")
    assert r.status is Status.FAIL and "node1/cpulist" in r.figure and r.fix
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_one(empty, "numa").status is Status.SKIP


def test_page_cache_low_high(tmp_path: Path) -> None:
    low = run_one(gb300_root(tmp_path / "low", file_pages_gib=0.5), "page-cache")
    assert low.status is Status.PASS
    assert low.figure.startswith("node 1: FilePages 0.50 GiB, MemFree")
    high = run_one(gb300_root(tmp_path / "high", file_pages_gib=37.5), "page-cache", maxFilePagesGiB=4)
    assert high.status is Status.FAIL
    assert "FilePages 37.50 GiB" in high.figure and "page cache in HBM" in high.figure
    assert high.threshold == "FilePages <= 4 GiB"
    assert high.fix is not None and "numa-exec --membind 0" in high.fix
    assert high.details["file_pages_bytes"] == int(37.5 * GiB)


def test_page_cache_missing_node_and_broken_file(tmp_path: Path) -> None:
    cdmm = run_one(one_node_root(tmp_path / "one"), "page-cache")
    assert cdmm.status is Status.PASS
    assert cdmm.figure == (
        "CDMM: GPU memory is not a NUMA node; the page-cache trap cannot occur "
        "(NUMA node 1 does not exist on this machine)"
    )
    assert cdmm.details["cdmm"] is True
    root = gb300_root(tmp_path / "broken")
    make_unreadable(root, f"{NODE_DIR}/node1/meminfo")
    r = run_one(root, "page-cache")
    assert r.status is Status.FAIL and "unreadable" in r.figure
    root = gb300_root(tmp_path / "short")
    write(root, f"{NODE_DIR}/node1/meminfo", "Node 1 MemTotal: 10 kB\n")
    r = run_one(root, "page-cache")
    assert r.status is Status.FAIL and "no FilePages, MemFree line" in r.figure


def test_page_cache_cdmm_said_out_loud(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No memory-only node (CDMM): node 0's FilePages is host page cache, never a reason to refuse."""
    root = one_node_root(tmp_path / "one")
    config = write_config(tmp_path / "preflight.json", gpuNode=0, maxFilePagesGiB=0)
    assert main(["preflight", "--config", str(config), "--root", str(root), "--only", "page-cache,numa"]) == 0
    out = capsys.readouterr().out
    assert (
        "PASS  page-cache  CDMM: GPU memory is not a NUMA node; the page-cache trap cannot occur "
        "(NUMA node 0 has CPUs and no NUMA node is memory-only)"
    ) in out
    assert (
        main(["preflight", "--config", str(config), "--root", str(root), "--only", "page-cache", "--json"])
        == 0
    )
    (check,) = json.loads(capsys.readouterr().out)["checks"]
    assert check["status"] == "PASS" and check["figure"].startswith("CDMM: GPU memory is not a NUMA node")
    assert check["details"]["cdmm"] is True
    numa = run_one(root, "numa")  # gpuNode 1 absent: the numa check says the same words
    assert "CDMM: GPU memory is not a NUMA node; the page-cache trap cannot occur" in numa.figure


def test_host_memory_drop_caches_estimate(tmp_path: Path) -> None:
    root = gb300_root(tmp_path, file_pages_gib=12, active_file_gib=2)
    r = run_one(root, "host-memory")
    assert r.status is Status.PASS
    assert "drop_caches would free ~10.00 GiB of node 1's 12.00 GiB FilePages" in r.figure
    assert r.details["drop_would_free_bytes"] == 10 * GiB


def test_host_memory_active_file_does_not_drop(tmp_path: Path) -> None:
    root = gb300_root(tmp_path, file_pages_gib=6, active_file_gib=5.9)
    r = run_one(root, "host-memory")
    assert "Active(file): in use, it comes back" in r.figure


def test_host_memory_low_and_swapping(gb300: Path) -> None:
    write_proc_meminfo(gb300, MemTotal=100 * GiB, MemAvailable=5 * GiB, SwapTotal=8 * GiB, SwapFree=4 * GiB)
    r = run_one(gb300, "host-memory")
    assert r.status is Status.WARN
    assert "less than 10% of host memory available" in r.figure and "4.00 GiB swapped out" in r.figure
    garble(gb300, "proc/meminfo")
    assert run_one(gb300, "host-memory").status is Status.FAIL


# --- GPU -----------------------------------------------------------------------------------------


def test_gpu_skips_without_nvml_for_real(gb300: Path) -> None:
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver; the SKIP path is for GPU-less hosts")
    r = run_one(gb300, "gpu")
    assert r.status is Status.SKIP
    assert r.figure.startswith("no NVML:")
    assert r.fix is not None


def h200(used: int, processes: list[GpuProcess], free: int | None = None) -> NvmlReport:
    total = 150754820096  # what NVML reported on the H200 (docs/preflight-h200.md)
    reserved = 644939776
    return NvmlReport(
        "580.159.04",
        "13.0",
        None,
        [
            GpuInfo(
                0,
                "NVIDIA H200",
                "GPU-x",
                total,
                used,
                free if free is not None else total - used,
                reserved,
                processes,
                None,
                "none",
                False,
            )
        ],
    )


def test_gpu_idle_fits() -> None:
    r = assess_gpus(h200(644939776, []), 0.94)
    assert r.status is Status.PASS
    assert "0.94 → 131.98 GiB fits in 139.80 GiB free" in r.figure


def test_gpu_stranded_memory_and_does_not_fit() -> None:
    holder = GpuProcess(429, 22114467840, "compute", "python3", "python3 -c import torch")
    r = assess_gpus(h200(22768648192, [holder]), 0.94)
    assert r.status is Status.FAIL
    assert "stranded: 20.60 GiB held by pid 429 (python3) while no vLLM runs" in r.figure
    assert "wants 131.98 GiB but only 119.20 GiB is free" in r.figure
    assert r.fix is not None and "stop pid 429" in r.fix and "below 0.85" in r.fix
    assert [f["finding"] for f in r.details["findings"]] == ["stranded", "does-not-fit"]


def test_gpu_stranded_but_fits_is_warn() -> None:
    holder = GpuProcess(77, 2 * GiB, "compute", "jupyter")
    r = assess_gpus(h200(2 * GiB + 644939776, [holder]), 0.5)
    assert r.status is Status.WARN and "stranded" in r.figure


def test_gpu_held_by_running_vllm_is_fine() -> None:
    engine = GpuProcess(4242, 130 * GiB, "compute", "VLLM::EngineCor", "VLLM::EngineCore")
    r = assess_gpus(h200(131 * GiB, [engine]), 0.94)
    assert r.status is Status.PASS and "vLLM is running on GPU0" in r.figure


def test_gpu_memory_held_by_invisible_process() -> None:
    r = assess_gpus(h200(30 * GiB, []), 0.5)
    assert r.status is Status.WARN
    assert "used by no process visible here" in r.figure


def test_gpu_none_visible() -> None:
    r = assess_gpus(NvmlReport("580.159.04", None, None, []), 0.94)
    assert r.status is Status.FAIL and "sees no GPU" in r.figure


# --- model ---------------------------------------------------------------------------------------


def test_model_stamp_paths(gb300: Path) -> None:
    assert run_one(gb300, "model").status is Status.SKIP
    r = run_one(gb300, "model", modelDir="/srv/models/glm", revision=REV)
    assert r.status is Status.FAIL and "does not exist" in r.figure
    (gb300 / "srv/models/glm").mkdir(parents=True)
    r = run_one(gb300, "model", modelDir="/srv/models/glm", revision=REV)
    assert r.status is Status.FAIL and "never verified" in r.figure
    assert r.fix is not None and "station verify /srv/models/glm" in r.fix


def test_model_revision_match_mismatch_and_unpinned(gb300: Path) -> None:
    write_stamp(gb300 / "srv/m", revision=REV)
    ok = run_one(gb300, "model", modelDir="/srv/m", revision=REV)
    assert ok.status is Status.PASS
    assert f"nvidia/GLM-5.3-Flash-NVFP4@{REV}, 2 files" in ok.figure
    bad = run_one(gb300, "model", modelDir="/srv/m", revision="f" * 40)
    assert bad.status is Status.FAIL
    assert f"stamp revision {REV} != configured {'f' * 40}" in bad.figure
    unpinned = run_one(gb300, "model", modelDir="/srv/m")
    assert unpinned.status is Status.WARN and "no revision pinned" in unpinned.figure


def test_model_files_changed_since_verification(gb300: Path) -> None:
    write_stamp(gb300 / "srv/m", revision=REV)
    with (gb300 / "srv/m/model-00001-of-00002.safetensors").open("ab") as f:
        f.write(b"x")
    (gb300 / "srv/m/model-00002-of-00002.safetensors").unlink()
    r = run_one(gb300, "model", modelDir="/srv/m", revision=REV)
    assert r.status is Status.FAIL
    assert "model-00001-of-00002.safetensors 4097 B != 4096 B" in r.figure
    assert "model-00002-of-00002.safetensors missing" in r.figure


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "not valid JSON"),
        ('{"version": 2, "files": []}', "unknown stamp version 2"),
        ('{"version": 1}', "no 'files' list"),
        ("[]", "not a JSON object"),
        # hand-written: present and parseable, but not what verify writes
        (f'{{"version": 1, "revision": "{REV}", "verified_at": "t", "files": []}}', "an empty 'files' list"),
        (f'{{"version": 1, "revision": "{REV}", "files": [{{"path": "a", "size": 1}}]}}', "no 'verified_at'"),
        (
            f'{{"version": 1, "revision": "{REV}", "verified_at": "t", "files": [{{"path": "a"}}]}}',
            "no 'size'",
        ),
    ],
)
def test_model_garbled_stamp(gb300: Path, text: str, problem: str) -> None:
    (gb300 / "m").mkdir()
    (gb300 / "m/a").write_bytes(b"x")
    (gb300 / "m/.station-verified.json").write_text(text)
    r = run_one(gb300, "model", modelDir="/m", revision=REV)
    assert r.status is Status.FAIL and "unreadable" in r.figure and problem in r.figure, r.figure


def test_model_listed_path_replaced_by_a_directory(gb300: Path) -> None:
    write_stamp(gb300 / "srv/m", revision=REV)
    shard = gb300 / "srv/m/model-00002-of-00002.safetensors"
    shard.unlink()
    shard.mkdir()
    r = run_one(gb300, "model", modelDir="/srv/m", revision=REV)
    assert r.status is Status.FAIL
    assert (
        "checkpoint changed since verification: model-00002-of-00002.safetensors is not a regular file"
        in r.figure
    )


# --- disk ----------------------------------------------------------------------------------------


def test_disk_thresholds(gb300: Path) -> None:
    ok = run_one(gb300, "disk", diskMinFreeGiB={"state": 0, "cache": 0, "logs": 0})
    assert ok.status is Status.PASS
    assert "cache /var/cache/vllm-station:" in ok.figure
    assert {row["kind"] for row in ok.details["paths"]} == {"state", "cache", "logs"}
    assert all(row["exists"] is False for row in ok.details["paths"]), "measured at the nearest parent"
    full = run_one(gb300, "disk", diskMinFreeGiB={"cache": 10**9})
    assert full.status is Status.FAIL
    assert full.fix is not None and "/var/cache/vllm-station" in full.fix
    (gb300 / "models").mkdir()
    model = run_one(gb300, "disk", modelDir="/models", diskMinFreeGiB={"model": 10**9, "cache": 0})
    assert model.status is Status.FAIL and "model /models" in model.figure


# --- port ----------------------------------------------------------------------------------------


def test_port_prepared_root(tmp_path: Path) -> None:
    root = gb300_root(tmp_path / "free")
    assert run_one(root, "port").status is Status.PASS
    ours = gb300_root(tmp_path / "ours")
    add_listener(ours, 8888, 5001)
    add_process(ours, 3100, "python3", "0::/system.slice/vllm-station.service", (5001,))
    r = run_one(ours, "port")
    assert r.status is Status.PASS and "held by our unit (pid 3100" in r.figure
    other = gb300_root(tmp_path / "other")
    add_listener(other, 8888, 5002)
    add_process(other, 812, "nginx", "0::/system.slice/nginx.service", (5002,))
    r = run_one(other, "port")
    assert r.status is Status.FAIL and "in use by pid 812 (nginx)" in r.figure
    proxy = gb300_root(tmp_path / "proxy")
    add_listener(proxy, 8888, 5003)
    add_process(proxy, 900, "docker-proxy", "0::/system.slice/docker.service", (5003,))
    assert run_one(proxy, "port").status is Status.WARN


def test_port_live_bind_probe() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        held = run_one(Path("/"), "port", port=port)
        assert held.status is Status.FAIL
        assert "pid " in held.figure and "python" in held.figure, "names this very test process"
    free = run_one(Path("/"), "port", port=port)
    assert free.status is Status.PASS
    foreign = run_one(Path("/"), "port", host="192.0.2.1", port=port)
    assert foreign.status is Status.FAIL and "not an address of this machine" in foreign.figure


# --- image ---------------------------------------------------------------------------------------

IMAGE = "vllm/vllm-openai@sha256:" + "ab" * 32


@pytest.fixture
def runtime_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script, state = write_fake_runtime(tmp_path / "rt")
    monkeypatch.setenv("STATION_RUNTIME_CMD", str(script))
    monkeypatch.setenv("FAKE_RUNTIME_STATE", str(state))
    return state


def test_image_skips(gb300: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert run_one(gb300, "image").status is Status.SKIP
    assert run_one(gb300, "image", image=IMAGE).status is Status.SKIP
    monkeypatch.setenv("STATION_RUNTIME_CMD", str(tmp_path / "no-docker"))
    r = run_one(gb300, "image", image=IMAGE, runtime="docker")
    assert r.status is Status.SKIP and "not installed" in r.figure


def test_image_runtime_by_absolute_path(gb300: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The module renders the runtime as an absolute store path: a unit's PATH need not hold it."""
    script, state = write_fake_runtime(tmp_path / "rt")
    monkeypatch.delenv("STATION_RUNTIME_CMD", raising=False)
    monkeypatch.setenv("FAKE_RUNTIME_STATE", str(state))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no docker on PATH at all
    docker = tmp_path / "store" / "bin" / "docker"
    docker.parent.mkdir(parents=True)
    docker.symlink_to(script)
    add_image(state, IMAGE, [IMAGE])
    r = run_one(gb300, "image", image=IMAGE, runtime=str(docker))
    assert r.status is Status.PASS, r
    bad = run_one(gb300, "image", image=IMAGE, runtime=str(tmp_path / "bin" / "runc"))
    assert bad.status is Status.FAIL and "docker, podman or an absolute path" in bad.figure


def test_image_digest(gb300: Path, runtime_state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absent = run_one(gb300, "image", image=IMAGE, runtime="docker")
    # absent is a warning, not a refused start: the runtime pulls exactly the pinned digest
    assert absent.status is Status.WARN and "not present locally" in absent.figure
    assert absent.fix == f"`docker pull {IMAGE}` before starting"
    add_image(runtime_state, IMAGE, [IMAGE])
    assert run_one(gb300, "image", image=IMAGE, runtime="docker").status is Status.PASS
    add_image(runtime_state, IMAGE, ["vllm/vllm-openai@sha256:" + "cd" * 32])
    moved = run_one(gb300, "image", image=IMAGE, runtime="docker")
    assert moved.status is Status.FAIL and "do not include the pinned" in moved.figure
    add_image(runtime_state, "vllm/vllm-openai:latest", [IMAGE])
    unpinned = run_one(gb300, "image", image="vllm/vllm-openai:latest", runtime="docker")
    assert unpinned.status is Status.WARN
    monkeypatch.setenv("FAKE_RUNTIME_FLAVOR", "podman")
    r = run_one(gb300, "image", image="quay.io/x@sha256:" + "0" * 64, runtime="podman")
    assert r.status is Status.WARN and "not present locally" in r.figure
    monkeypatch.setenv("FAKE_RUNTIME_DOWN", "1")
    down = run_one(gb300, "image", image=IMAGE, runtime="docker")
    assert down.status is Status.FAIL and "Cannot connect to the Docker daemon" in down.figure


# --- KV cache ------------------------------------------------------------------------------------


def test_kv_cache_reproduces_the_seed(gb300: Path) -> None:
    """GLM-5.3-Flash at 1M × 256, fp8, 0.94 on the GB300: 5,933,986 tokens ≈ 5.66 full requests."""
    r = run_one(gb300, "kv-cache")
    assert r.status is Status.WARN
    assert "fp8 KV cache ≈ 5,933,986 tokens (6,912 B/token" in r.figure
    assert "= 5.66 full 1,048,576-token requests" in r.figure
    assert "bfloat16: 2,966,993 tokens = 2.83" in r.figure
    assert "need 268,435,456 (45.2×)" in r.figure
    assert r.details["estimate"]["tokens"] == 5933986
    assert r.fix is not None and "queues" in r.fix


def test_kv_cache_bf16_config(gb300: Path) -> None:
    r = run_one(gb300, "kv-cache", kvCacheDtype="bfloat16")
    assert r.status is Status.WARN
    assert r.details["estimate"]["tokens"] == 2966993
    assert r.details["sources"]["kv_cache_dtype"] == "kvCacheDtype bfloat16"
    assert r.fix is not None and "use kvCacheDtype fp8" in r.fix


def test_kv_cache_auto_without_checkpoint_uses_the_profile(gb300: Path) -> None:
    """The GLM-5.3-Flash recipe sets no --kv-cache-dtype: its checkpoint configures the fp8 KV cache."""
    r = run_one(gb300, "kv-cache", kvCacheDtype=None)
    assert r.details["estimate"]["tokens"] == 5933986
    assert "KV dtype from assumed: GLM-5.3-Flash profile (its checkpoint's kv_cache_quant_algo)" in r.figure


MLA_CONFIG: dict[str, Any] = {
    "num_hidden_layers": 78,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "num_attention_heads": 64,
}


@pytest.mark.parametrize(
    ("config", "quant_file", "dtype", "source"),
    [
        (
            {**MLA_CONFIG, "quantization_config": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}},
            None,
            "fp8",
            "the checkpoint: config.json quantization_config.kv_cache_quant_algo FP8",
        ),
        (
            MLA_CONFIG,
            {
                "producer": {"name": "modelopt"},
                "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"},
            },
            "fp8",
            "the checkpoint: hf_quant_config.json quantization.kv_cache_quant_algo FP8",
        ),
        (
            MLA_CONFIG,
            {"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None}},
            "auto",
            "kvCacheDtype auto and the checkpoint names no KV quantization",
        ),
    ],
)
def test_kv_cache_auto_reads_the_checkpoints_kv_quantization(
    gb300: Path, config: dict[str, Any], quant_file: dict[str, Any] | None, dtype: str, source: str
) -> None:
    write_stamp(gb300 / "m", files={"model-00001-of-00001.safetensors": 150 * 10**9}, config=config)
    if quant_file is not None:
        (gb300 / "m/hf_quant_config.json").write_text(json.dumps(quant_file))
    r = run_one(gb300, "kv-cache", modelDir="/m", kvCacheDtype=None, maxModelLen=131072, maxNumSeqs=4)
    assert r.details["estimate"]["dtype"] == dtype
    assert r.details["estimate"]["bytes_per_token"] == 44928 * (1 if dtype == "fp8" else 2)
    assert r.details["sources"]["kv_cache_dtype"].startswith(source)
    assert f"KV dtype from {source}" in r.figure
    explicit = run_one(gb300, "kv-cache", modelDir="/m", kvCacheDtype="bfloat16", maxModelLen=131072)
    assert explicit.details["estimate"]["dtype"] == "bfloat16", "an explicit kvCacheDtype wins"


def test_kv_cache_unknown_checkpoint_kv_quantization_skips(gb300: Path) -> None:
    config = {**MLA_CONFIG, "quantization_config": {"kv_cache_quant_algo": "INT2"}}
    write_stamp(gb300 / "m", files={"model.safetensors": 10**9}, config=config)
    r = run_one(gb300, "kv-cache", modelDir="/m", kvCacheDtype="auto")
    assert r.status is Status.SKIP
    assert (
        "KV-cache quantization 'INT2'" in r.figure
        and r.fix == "set kvCacheDtype explicitly (fp8 or bfloat16)"
    )


def test_kv_cache_null_max_model_len_is_the_models(gb300: Path) -> None:
    write_stamp(
        gb300 / "m",
        files={"model.safetensors": 10**9},
        config={**MLA_CONFIG, "max_position_embeddings": 202752},
    )
    r = run_one(gb300, "kv-cache", modelDir="/m", maxModelLen=None, maxNumSeqs=None)
    assert r.details["max_model_len"] == 202752
    assert "one maxModelLen 202,752-token request" in (r.threshold or "")
    unknown = run_one(gb300, "kv-cache", maxModelLen=None)
    assert unknown.status is Status.SKIP and "maxModelLen unset" in unknown.figure


def test_kv_cache_from_checkpoint_config(gb300: Path) -> None:
    """A downloaded checkpoint's config.json and shard sizes replace the profile's assumptions."""
    # GLM-5-style MLA: 78 layers × (512 + 64) = 44,928 fp8 bytes per token; 150 GB of (sparse) shards
    config = {"num_hidden_layers": 78, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_attention_heads": 64}
    write_stamp(gb300 / "m", files={"model-00001-of-00001.safetensors": 150 * 10**9}, config=config)
    r = run_one(gb300, "kv-cache", modelDir="/m", maxModelLen=131072, maxNumSeqs=4)
    budget = round(252e9 * 0.94) - 150 * 10**9 - 4_864_288_768
    assert r.details["estimate"]["bytes_per_token"] == 44928
    assert r.details["estimate"]["tokens"] == budget // 44928
    assert r.details["sources"]["geometry"].endswith("m/config.json")
    assert r.details["sources"]["weights"] == "*.safetensors in /m"
    assert r.status is Status.PASS, r.figure


def test_kv_cache_gqa_geometry(gb300: Path) -> None:
    # a GQA model: 30 layers × 2 (K, V) × 3 KV heads × 64 = 11,520 elements/token; bf16 → 23,040 B/token
    config = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}
    write_stamp(gb300 / "g", files={"model.safetensors": 270_000_000}, config=config)
    r = run_one(gb300, "kv-cache", modelDir="/g", kvCacheDtype="bfloat16", maxModelLen=8192, maxNumSeqs=4)
    assert r.details["attention"] == "GQA"
    assert r.details["estimate"]["bytes_per_token"] == 23040


def test_kv_cache_fails_below_one_request_and_when_weights_do_not_fit(gb300: Path) -> None:
    r = run_one(gb300, "kv-cache", maxModelLen=8_000_000)
    assert r.status is Status.FAIL and "vLLM refuses to start" in r.figure
    r = run_one(gb300, "kv-cache", gpuMemoryUtilization=0.5)
    assert r.status is Status.FAIL and "no room for a KV cache" in r.figure


def test_kv_cache_reads_vllm_figure_from_saved_log(gb300: Path) -> None:
    write(
        gb300,
        "var/log/vllm-station/vllm-station-20261130T050000Z.log",
        "INFO [kv_cache_utils.py:1087] GPU KV cache size: 5,933,986 tokens\n"
        "INFO [kv_cache_utils.py:1091] Maximum concurrency for 1,048,576 tokens per request: 5.66x\n",
    )
    r = run_one(gb300, "kv-cache")
    assert "last run's vLLM reported 5,933,986 tokens (5.66x)" in r.figure
    assert r.details["measured"]["concurrency"] == 5.66


def test_kv_cache_unknown_model_and_dtype(gb300: Path) -> None:
    assert run_one(gb300, "kv-cache", model="some/unknown-model").status is Status.SKIP
    r = run_one(gb300, "kv-cache", kvCacheDtype="int3")
    assert r.status is Status.FAIL and "unknown kvCacheDtype" in r.figure


# --- CLI -----------------------------------------------------------------------------------------


def full_config(tmp_path: Path, **extra: Any) -> Path:
    return write_config(
        tmp_path / "preflight.json",
        port=18888,
        modelDir="/srv/m",
        revision=REV,
        paths={"state": "/var/lib/vllm-station", "cache": "/var/cache/vllm-station", "logs": "/var/log/v"},
        diskMinFreeGiB={"model": 0, "cache": 0, "logs": 0},
        **extra,
    )


def test_cli_json_schema_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = gb300_root(tmp_path / "root")
    write_stamp(root / "srv/m", revision=REV)
    config = full_config(tmp_path)
    assert main(["preflight", "--config", str(config), "--root", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {
        "version",
        "status",
        "exit_code",
        "root",
        "config",
        "summary",
        "elapsed_ms",
        "checks",
    }
    assert report["version"] == 1 and report["exit_code"] == 0 and report["status"] == "WARN"
    names = [c["name"] for c in report["checks"]]
    assert names == [
        *["numa", "page-cache", "host-memory", "gpu", "model", "parsers", "disk", "port", "image", "kv-cache"]
    ]
    for c in report["checks"]:
        assert set(c) == {"name", "status", "figure", "threshold", "fix", "details", "group", "elapsed_ms"}
        assert c["status"] in {"PASS", "WARN", "FAIL", "SKIP"}
        if c["status"] != "PASS":
            assert c["fix"] or c["status"] == "SKIP", c
    assert sum(report["summary"].values()) == len(names)

    root_hot = gb300_root(tmp_path / "hot", file_pages_gib=20)
    assert (
        main(["preflight", "--config", str(config), "--root", str(root_hot), "--only", "page-cache,numa"])
        == 1
    )
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("PASS  numa")
    assert "FAIL  page-cache  node 1: FilePages 20.00 GiB" in out
    assert "fix: run `station prestart --gpu-node 1`" in out
    assert "→ exit 1" in out.splitlines()[-1]


def test_cli_flag_overrides_and_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = gb300_root(tmp_path, file_pages_gib=3)
    assert main(["preflight", "--root", str(root), "--only", "page-cache", "--max-file-pages-gib", "2"]) == 1
    capsys.readouterr()
    assert main(["preflight", "--list"]) == 0
    listed = capsys.readouterr().out
    assert "kv-cache" in listed and "station" in listed


def test_full_preflight_runs_every_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Five full in-process runs, each a complete JSON report; their median time is printed, not bounded
    (issue 5's ≤ 1 s is a benchmark figure: scripts/bench-prestart measures the console script end to end;
    a wall-clock bound in a test fails on a machine other processes keep busy)."""
    root = gb300_root(tmp_path / "root")
    times = []
    for _ in range(5):
        start = time.perf_counter()
        main(["preflight", "--root", str(root), "--json"])
        times.append(time.perf_counter() - start)
        report = json.loads(capsys.readouterr().out)
        assert {c["name"] for c in report["checks"]} >= {"kv-cache", "page-cache"}, report
    print(f"full preflight in-process: median {statistics.median(times) * 1000:.0f} ms of 5")


def test_container_logs_from_prestart_feed_the_kv_check(
    tmp_path: Path, runtime_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """prestart keeps the last container's log; preflight reads vLLM's own KV figure from it."""
    root = gb300_root(tmp_path / "root")
    add_container(runtime_state, "vllm-station", stdout=b"INFO GPU KV cache size: 5,000,000 tokens\n")
    logs = root / "var/log/vllm-station"
    rc = main(
        [
            "prestart",
            "--root",
            str(root),
            "--settle-seconds",
            "0",
            "--runtime",
            "docker",
            "--log-dir",
            str(logs),
        ]
    )
    assert rc == 0
    capsys.readouterr()
    r = run_one(root, "kv-cache")
    assert "last run's vLLM reported 5,000,000 tokens" in r.figure
    assert r.details["measured"]["tokens"] == 5_000_000
