"""`station prestart` against prepared sysfs/proc roots and a docker-like stand-in runtime."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sysfs_fixtures import (
    NODE_DIR,
    add_container,
    garble,
    gb300_root,
    make_unreadable,
    node_meminfo_text,
    one_node_root,
    set_file_pages,
    write,
    write_fake_runtime,
)

from vllm_station.cli import main

GiB = 1024**3


def prestart(root: Path, *extra: str) -> int:
    return main(["prestart", "--root", str(root), "--gpu-node", "1", "--max-file-pages-gib", "4", *extra])


@pytest.fixture
def gb300(tmp_path: Path) -> Path:
    return gb300_root(tmp_path / "root")


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script, state = write_fake_runtime(tmp_path / "runtime")
    monkeypatch.setenv("STATION_RUNTIME_CMD", str(script))
    monkeypatch.setenv("FAKE_RUNTIME_STATE", str(state))
    return state


def test_below_threshold_drops_and_passes(gb300: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert prestart(gb300, "--settle-seconds", "0") == 0
    assert (gb300 / "proc/sys/vm/drop_caches").read_text() == "1\n"
    out = capsys.readouterr().out
    assert "NUMA node 1 FilePages 0.25 GiB <= 4 GiB" in out


def test_above_threshold_refuses_with_cause_figure_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = gb300_root(tmp_path / "root", file_pages_gib=37.5)
    start = time.perf_counter()
    assert prestart(root, "--settle-seconds", "0.3") == 1
    waited = time.perf_counter() - start
    assert 0.3 <= waited < 2.0, "waits the settle time, then gives up"
    err = capsys.readouterr().err
    assert "page cache in HBM on NUMA node 1" in err
    assert "FilePages 37.50 GiB > 4 GiB" in err
    assert "station numa-exec --membind 0 --" in err
    assert "refusing the start" in err


@pytest.mark.timing
def test_page_cache_falling_during_settle_passes(gb300: Path, capsys: pytest.CaptureFixture[str]) -> None:
    set_file_pages(gb300, 1, 30)

    def kernel_reclaims() -> None:  # what the drop does a moment later on a busy machine
        time.sleep(0.25)
        set_file_pages(gb300, 1, 0.5)

    t = threading.Thread(target=kernel_reclaims)
    t.start()
    try:
        assert prestart(gb300, "--settle-seconds", "3", "--json") == 0
    finally:
        t.join()
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "ok"
    assert report["file_pages_gib"] == 0.5
    assert 0.2 <= report["waited_s"] < 2.5, "returns as soon as the figure is below the threshold"


def test_no_drop_leaves_drop_caches_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = gb300_root(tmp_path / "root", file_pages_gib=5)
    start = time.perf_counter()
    assert prestart(root, "--no-drop", "--settle-seconds", "5") == 1
    assert time.perf_counter() - start < 2.0, "no drop: nothing to wait for"
    assert (root / "proc/sys/vm/drop_caches").read_text() == ""
    assert "(no drop: --no-drop)" in capsys.readouterr().err


CDMM = "CDMM: GPU memory is not a NUMA node; the page-cache trap cannot occur"


def test_missing_node_is_a_message_and_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = one_node_root(tmp_path / "root")
    assert prestart(root, "--settle-seconds", "0") == 0
    out = capsys.readouterr().out
    assert f"station prestart: {CDMM} (NUMA node 1 does not exist on this machine)" in out


def test_cdmm_said_out_loud_in_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """CDMM mode: node 0 (CPUs + LPDDR) is the only node; even a gpuNode that exists but has CPUs is
    not GPU memory, so its FilePages (host page cache) must not refuse the start."""
    root = one_node_root(tmp_path / "root")
    write(root, f"{NODE_DIR}/node0/meminfo", node_meminfo_text(0, {"MemTotal": 100 * GiB, "MemFree": GiB,
                                                                      "FilePages": 90 * GiB}))  # fmt: skip
    assert main(["prestart", "--root", str(root), "--gpu-node", "0", "--settle-seconds", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "no-node" and report["cdmm"] is True
    assert report["message"] == f"{CDMM} (NUMA node 0 has CPUs and no NUMA node is memory-only)"
    assert report["file_pages_bytes"] is None
    assert main(["prestart", "--root", str(root), "--gpu-node", "1", "--settle-seconds", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cdmm"] is True and report["message"].startswith(CDMM)


def test_gb300_numa_mode_is_not_cdmm(gb300: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prestart", "--root", str(gb300), "--settle-seconds", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "ok" and report["cdmm"] is False and "CDMM" not in report["message"]


def test_unreadable_meminfo_is_a_clear_error(gb300: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_unreadable(gb300, f"{NODE_DIR}/node1/meminfo")
    assert prestart(gb300, "--settle-seconds", "0") == 1
    err = capsys.readouterr().err
    assert "cannot read FilePages of NUMA node 1" in err
    assert "node1/meminfo: unreadable" in err
    assert "Traceback" not in err


def test_garbled_meminfo_is_a_clear_error(gb300: Path, capsys: pytest.CaptureFixture[str]) -> None:
    garble(gb300, f"{NODE_DIR}/node1/meminfo")
    assert prestart(gb300, "--settle-seconds", "0") == 1
    assert "garbled line 1" in capsys.readouterr().err


def test_meminfo_without_filepages(gb300: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = gb300 / NODE_DIR / "node1/meminfo"
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines() if "FilePages" not in line))
    assert prestart(gb300, "--settle-seconds", "0") == 1
    assert "no FilePages line" in capsys.readouterr().err


def test_drop_caches_not_writable(gb300: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_unreadable(gb300, "proc/sys/vm/drop_caches")
    assert prestart(gb300) == 1
    assert "cannot write" in capsys.readouterr().err


def test_json_report(gb300: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert prestart(gb300, "--settle-seconds", "0", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "ok"
    assert report["node"] == 1
    assert report["file_pages_bytes"] == int(0.25 * 1024**3) // 1024 * 1024
    assert report["threshold_gib"] == 4
    assert report["dropped"] is True
    assert report["logs"] is None
    assert {"sync", "drop", "read", "total"} <= set(report["timings_ms"])


@pytest.mark.parametrize("args", [["--keep-logs", "0"], ["--runtime", "lxc"], ["--settle-seconds", "-1"]])
def test_usage_errors_exit_2(gb300: Path, args: list[str]) -> None:
    assert prestart(gb300, *args) == 2


# --- container logs ------------------------------------------------------------------------------


def test_saves_logs_then_removes_container(
    gb300: Path, tmp_path: Path, runtime: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add_container(
        runtime, "vllm-station", stdout=b"INFO engine started\n", stderr=b"ERROR CUDA out of memory\n"
    )
    logs = tmp_path / "logs"
    rc = prestart(gb300, "--settle-seconds", "0", "--runtime", "docker", "--log-dir", str(logs), "--json")
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    saved = Path(report["logs"]["saved"])
    assert saved.parent == logs
    assert saved.name.startswith("vllm-station-") and saved.name.endswith("Z.log")
    text = saved.read_text()
    assert "INFO engine started" in text and "ERROR CUDA out of memory" in text, "stdout and stderr kept"
    assert report["logs"]["removed"] is True
    assert not (runtime / "containers/vllm-station").exists()
    calls = (runtime / "calls.log").read_text().splitlines()
    assert calls == ["logs vllm-station", "rm -f vllm-station"], "logs are saved before the container goes"
    assert not list(logs.glob("*.partial"))


def test_runtime_by_absolute_path_with_an_empty_path(
    gb300: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A unit's PATH holds coreutils & co., not the runtime: the module renders its absolute path."""
    script, state = write_fake_runtime(tmp_path / "runtime")
    monkeypatch.delenv("STATION_RUNTIME_CMD", raising=False)
    monkeypatch.setenv("FAKE_RUNTIME_STATE", str(state))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    docker = tmp_path / "store" / "bin" / "docker"
    docker.parent.mkdir(parents=True)
    docker.symlink_to(script)
    add_container(state, "vllm-station", stdout=b"INFO engine started\n")
    logs = tmp_path / "logs"
    rc = prestart(gb300, "--settle-seconds", "0", "--runtime", str(docker), "--log-dir", str(logs), "--json")
    assert rc == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert "INFO engine started" in Path(report["logs"]["saved"]).read_text()
    assert (state / "calls.log").read_text().splitlines() == ["logs vllm-station", "rm -f vllm-station"]


@pytest.mark.parametrize("runtime_arg", ["lxc", "relative/docker", "/usr/bin/runc"])
def test_runtime_must_be_docker_or_podman(
    gb300: Path, runtime_arg: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert prestart(gb300, "--settle-seconds", "0", "--runtime", runtime_arg) == 2
    assert "docker, podman or an absolute path" in capsys.readouterr().err


@pytest.mark.parametrize("flavor", ["docker", "podman"])
def test_no_previous_container_is_fine(
    gb300: Path,
    tmp_path: Path,
    runtime: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flavor: str,
) -> None:
    monkeypatch.setenv("FAKE_RUNTIME_FLAVOR", flavor)
    logs = tmp_path / "logs"
    assert prestart(gb300, "--settle-seconds", "0", "--runtime", flavor, "--log-dir", str(logs)) == 0
    assert "no previous container 'vllm-station'" in capsys.readouterr().out
    assert list(logs.iterdir()) == []


def test_keeps_newest_logs_only(gb300: Path, tmp_path: Path, runtime: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    old = [f"vllm-station-2026110{d}T120000Z.log" for d in range(1, 6)]
    for name in old:
        (logs / name).write_text(name)
    (logs / "other-20260101T000000Z.log").write_text("another container's log stays")
    add_container(runtime, "vllm-station", stdout=b"newest\n")
    rc = prestart(
        gb300, "--settle-seconds", "0", "--runtime", "docker", "--log-dir", str(logs), "--keep-logs", "3"
    )
    assert rc == 0
    names = sorted(p.name for p in logs.iterdir())
    kept = [n for n in names if n.startswith("vllm-station-")]
    assert len(kept) == 3
    assert old[3] in kept and old[4] in kept
    assert old[0] not in kept
    assert "other-20260101T000000Z.log" in names


def test_runtime_failure_is_a_clear_error(
    gb300: Path,
    tmp_path: Path,
    runtime: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FAKE_RUNTIME_DOWN", "1")
    rc = prestart(gb300, "--settle-seconds", "0", "--runtime", "docker", "--log-dir", str(tmp_path / "logs"))
    assert rc == 1
    err = capsys.readouterr().err
    assert "logs vllm-station` failed (exit 1)" in err
    assert "Cannot connect to the Docker daemon" in err
    assert not list((tmp_path / "logs").glob("*.log")), "no half-written log file"


def test_runtime_missing_is_a_clear_error(
    gb300: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STATION_RUNTIME_CMD", str(tmp_path / "no-such-docker"))
    rc = prestart(gb300, "--settle-seconds", "0", "--runtime", "docker", "--log-dir", str(tmp_path / "logs"))
    assert rc == 1
    assert "not found; install docker or set STATION_RUNTIME_CMD" in capsys.readouterr().err


def test_logs_kept_even_when_page_cache_refuses_start(
    tmp_path: Path, runtime: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = gb300_root(tmp_path / "root", file_pages_gib=12)
    add_container(runtime, "vllm-station", stdout=b"crashed: tried to allocate 151 GiB, 159.43 GiB free\n")
    logs = tmp_path / "logs"
    rc = prestart(root, "--settle-seconds", "0", "--runtime", "docker", "--log-dir", str(logs), "--json")
    assert rc == 1
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "above-threshold"
    assert "151 GiB" in Path(report["logs"]["saved"]).read_text()


def test_console_script_end_to_end(tmp_path: Path) -> None:
    station = shutil.which("station") or str(Path(sys.executable).parent / "station")
    root = gb300_root(tmp_path / "root", file_pages_gib=8)
    proc = subprocess.run(
        [station, "prestart", "--root", str(root), "--settle-seconds", "0", "--max-file-pages-gib", "4"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert "page cache in HBM on NUMA node 1: FilePages 8.00 GiB > 4 GiB" in proc.stderr
