"""The textfile-collector writer: exposition format, atomic replacement, a real node_exporter reading it."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from sysfs_fixtures import gb300_root

from vllm_station import textfile
from vllm_station.errors import UsageError
from vllm_station.textfile import Family, Sample

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
DIR_ENV = "STATION_TEXTFILE_DIR"
NCCL_FILE = "station-nccl.prom"

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
PROMTOOL = shutil.which("promtool")
NEED_DEBIAN = "apt-get install -y prometheus prometheus-node-exporter (scripts/check installs them)"


def test_render_is_the_text_exposition() -> None:
    text = textfile.render(
        [
            Family.one("station_probe_success", "1 when it worked", 1),
            Family(
                "station_watchdog_verdict",
                "one-hot",
                "gauge",
                (Sample(1, {"verdict": "ok"}), Sample(0, {"verdict": 'we"dg\\ed\n'})),
            ),
            Family.one("station_probe_tokens_per_second", "tok/s", math.nan),
            Family.one("station_x_total", "a counter", 3.25, "counter"),
        ]
    )
    assert text.splitlines() == [
        "# HELP station_probe_success 1 when it worked",
        "# TYPE station_probe_success gauge",
        "station_probe_success 1",
        "# HELP station_watchdog_verdict one-hot",
        "# TYPE station_watchdog_verdict gauge",
        'station_watchdog_verdict{verdict="ok"} 1',
        'station_watchdog_verdict{verdict="we\\"dg\\\\ed\\n"} 0',
        "# HELP station_probe_tokens_per_second tok/s",
        "# TYPE station_probe_tokens_per_second gauge",
        "station_probe_tokens_per_second NaN",
        "# HELP station_x_total a counter",
        "# TYPE station_x_total counter",
        "station_x_total 3.25",
    ]


@pytest.mark.parametrize(
    ("family", "match"),
    [
        (Family.one("station-probe", "h", 1), "not a Prometheus metric name"),
        (Family.one("ok_name", "h", 1, "summary"), "type 'summary'"),
        (Family("ok_name", "h", "gauge", (Sample(1, {"bad-label": "x"}),)), "not a label name"),
        (Family("ok_name", "h", "gauge", (Sample(1, {"__name__": "x"}),)), "not a label name"),
    ],
)
def test_render_refuses_what_prometheus_would_refuse(family: Family, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        textfile.render([family])


def test_a_family_given_twice_is_refused() -> None:
    with pytest.raises(UsageError, match="given twice"):
        textfile.render([Family.one("a", "h", 1), Family.one("a", "h", 2)])


@pytest.mark.parametrize("name", ["x.txt", "../x.prom", "sub/x.prom", ".prom", ""])
def test_write_refuses_a_name_node_exporter_would_not_read_or_a_path(tmp_path: Path, name: str) -> None:
    with pytest.raises(UsageError, match=r"\.prom"):
        textfile.write(tmp_path, name, [Family.one("a", "h", 1)])
    assert list(tmp_path.iterdir()) == []


def test_write_is_world_readable_under_a_strict_umask_and_leaves_no_temporary(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        path = textfile.write(tmp_path, "probe.prom", [Family.one("a", "h", 1)])
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["probe.prom"]
    assert textfile.read(path) == {"a": 1.0}


def test_write_into_a_missing_or_unwritable_directory_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(textfile.TextfileError, match=str(tmp_path / "nope" / "a.prom")):
        textfile.write(tmp_path / "nope", "a.prom", [Family.one("a", "h", 1)])


def test_a_reader_never_sees_a_partial_file(tmp_path: Path) -> None:
    """Writers replace the file 40 times with 1,000-line expositions while a reader reads it: every read
    is one whole exposition (its last line present, all values from one write)."""
    stop = threading.Event()
    seen: list[set[float]] = []
    errors: list[str] = []

    def reader() -> None:
        path = tmp_path / "big.prom"
        while not stop.is_set():
            try:
                text = path.read_text()
            except FileNotFoundError:
                continue
            values = {float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if not line.startswith("#")}
            if not text.endswith("\n") or len(text.splitlines()) != 1002:
                errors.append(f"partial read: {len(text.splitlines())} lines")
            seen.append(values)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(40):
            samples = tuple(Sample(float(i), {"n": str(k)}) for k in range(1000))
            textfile.write(tmp_path, "big.prom", [Family("big", "h", "gauge", samples)])
    finally:
        stop.set()
        t.join()
    assert not errors, errors[:3]
    assert seen and all(len(v) == 1 for v in seen)
    assert [p.name for p in tmp_path.iterdir()] == ["big.prom"]


def test_page_cache_export_writes_only_where_monitoring_made_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    details = {"node": 1, "file_pages_bytes": 3 * 2**30, "threshold_bytes": 4 * 2**30, "cdmm": False}
    monkeypatch.setenv(DIR_ENV, str(tmp_path / "absent"))
    assert textfile.export_page_cache("prestart", details) is None
    assert not (tmp_path / "absent").exists()
    monkeypatch.setenv(DIR_ENV, str(tmp_path))
    path = textfile.export_page_cache("prestart", details)
    assert path == tmp_path / "station-page-cache-prestart.prom"
    got = textfile.read(path)
    assert got['station_page_cache_file_pages_bytes{node="1",source="prestart"}'] == 3 * 2**30
    assert got['station_page_cache_threshold_bytes{node="1",source="prestart"}'] == 4 * 2**30
    assert got['station_page_cache_gpu_memory_numa{node="1",source="prestart"}'] == 1
    assert (
        abs(got['station_page_cache_check_timestamp_seconds{node="1",source="prestart"}'] - time.time()) < 60
    )


def test_page_cache_under_cdmm_exports_no_file_pages(tmp_path: Path) -> None:
    path = textfile.export_page_cache("preflight", {"node": 1, "cdmm": True, "reason": "x"}, tmp_path)
    assert path is not None
    got = textfile.read(path)
    assert got['station_page_cache_gpu_memory_numa{node="1",source="preflight"}'] == 0
    assert not any(k.startswith("station_page_cache_file_pages_bytes") for k in got)


def test_a_failing_write_never_raises_for_prestart(tmp_path: Path) -> None:
    (tmp_path / "station-page-cache-prestart.prom").mkdir()  # os.replace onto a directory fails
    assert textfile.export_page_cache("prestart", {"node": 1, "file_pages_bytes": 1}, tmp_path) is None


# ---- real programs read what we write ------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _node_exporter(directory: Path) -> Iterator[str]:
    assert NODE_EXPORTER is not None
    port = _free_port()
    proc = subprocess.Popen(
        [
            NODE_EXPORTER,
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={directory}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError("node_exporter did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.host  # a Nix build lacks node_exporter
@pytest.mark.skipif(NODE_EXPORTER is None, reason=f"no node_exporter: {NEED_DEBIAN}")
def test_real_node_exporter_exposes_every_file_without_errors(tmp_path: Path) -> None:
    textfile.export_page_cache(
        "prestart", {"node": 1, "file_pages_bytes": 123, "threshold_bytes": 4}, tmp_path
    )
    textfile.export_page_cache(
        "preflight", {"node": 1, "file_pages_bytes": 456, "threshold_bytes": 4}, tmp_path
    )
    textfile.write(
        tmp_path,
        "probe.prom",
        [
            Family.one("station_probe_ttft_seconds", "TTFT", 0.061),
            Family.one("station_probe_x", "nan", math.nan),
        ],
    )
    with _node_exporter(tmp_path) as url:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    assert 'station_page_cache_file_pages_bytes{node="1",source="prestart"} 123' in text
    assert 'station_page_cache_file_pages_bytes{node="1",source="preflight"} 456' in text
    assert "station_probe_ttft_seconds 0.061" in text
    assert "station_probe_x NaN" in text
    assert "node_textfile_scrape_error 0" in text, text[-2000:]


@pytest.mark.host  # a Nix build lacks promtool
@pytest.mark.skipif(PROMTOOL is None, reason=f"no promtool: {NEED_DEBIAN}")
def test_promtool_lints_the_exposition_clean() -> None:
    fams = textfile.page_cache_families(
        "prestart", {"node": 1, "file_pages_bytes": 1, "threshold_bytes": 2}, 1.0
    )
    assert PROMTOOL is not None
    proc = subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=textfile.render(fams),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- the writers' callers: prestart, preflight and nccl-check, as commands --------------------------------


def _station(args: list[str], directory: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, DIR_ENV: str(directory)}
    return subprocess.run(
        [sys.executable, "-m", "vllm_station", *args], capture_output=True, text=True, timeout=60, env=env
    )


def test_prestart_and_preflight_export_the_gpu_nodes_page_cache(tmp_path: Path) -> None:
    root = gb300_root(tmp_path / "root", file_pages_gib=2.5)
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    out = _station(["prestart", "--root", str(root), "--no-drop", "--max-file-pages-gib", "4"], metrics)
    assert out.returncode == 0, out.stderr
    out = _station(
        ["preflight", "--root", str(root), "--only", "page-cache", "--max-file-pages-gib", "2"], metrics
    )
    assert out.returncode == 1, out.stdout  # 2.5 GiB > 2: the check fails, and its figure is exported
    got = {**textfile.read(metrics / "station-page-cache-prestart.prom"),
           **textfile.read(metrics / "station-page-cache-preflight.prom")}  # fmt: skip
    assert got['station_page_cache_file_pages_bytes{node="1",source="prestart"}'] == 2.5 * 2**30
    assert got['station_page_cache_threshold_bytes{node="1",source="prestart"}'] == 4 * 2**30
    assert got['station_page_cache_file_pages_bytes{node="1",source="preflight"}'] == 2.5 * 2**30
    assert got['station_page_cache_threshold_bytes{node="1",source="preflight"}'] == 2 * 2**30


def test_prestart_without_the_directory_writes_nothing_and_still_passes(tmp_path: Path) -> None:
    root = gb300_root(tmp_path / "root", file_pages_gib=0.5)
    out = _station(["prestart", "--root", str(root), "--no-drop"], tmp_path / "absent")
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "absent").exists()


def test_nccl_check_exports_its_verdict(tmp_path: Path) -> None:
    data = Path(__file__).resolve().parent / "data" / "nccl"
    out = _station(["nccl-check", "--log", str(data / "gdrdma.log")], tmp_path)
    assert out.returncode == 0, out.stderr
    got = textfile.read(tmp_path / NCCL_FILE)
    assert got['station_nccl_transport_verdict{verdict="pass"}'] == 1
    assert got['station_nccl_transport_verdict{verdict="fail"}'] == 0
    socket_logs = sorted(p for p in data.iterdir() if "socket" in p.name)
    assert socket_logs, sorted(p.name for p in data.iterdir())
    out = _station(["nccl-check", "--log", str(socket_logs[0])], tmp_path)
    assert out.returncode == 1, out.stdout
    got = textfile.read(tmp_path / NCCL_FILE)
    assert got['station_nccl_transport_verdict{verdict="fail"}'] == 1
