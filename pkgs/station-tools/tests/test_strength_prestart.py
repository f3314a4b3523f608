"""Mutants of `station prestart` that survived the other tests (issue 17): the threshold's boundary and unit.

The documented rule is "refuse when FilePages is above the threshold; at or below passes", the threshold in
GiB (2^30 bytes). A figure exactly on the threshold must pass and one kB more must refuse; a figure between
4 GB (decimal) and 4 GiB must pass with the default 4.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from pathlib import Path

import pytest
from sysfs_fixtures import add_container, gb300_root, one_node_root, set_file_pages, write_fake_runtime

from vllm_station import textfile
from vllm_station.cli import main
from vllm_station.commands.prestart import configure, log_path, options_from_args, prune_logs, utc_stamp
from vllm_station.errors import UsageError

GiB = 1024**3
KiB = 1024


def run_json(root: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, object]]:
    rc = main(["prestart", "--root", str(root), "--gpu-node", "1", "--settle-seconds", "0", "--no-drop",
               "--json", *extra])
    return rc, json.loads(capsys.readouterr().out)


def test_exactly_at_the_threshold_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = gb300_root(tmp_path / "root", file_pages_gib=4)
    rc, report = run_json(root, capsys, "--max-file-pages-gib", "4")
    assert report["file_pages_bytes"] == 4 * GiB, "the fixture puts FilePages exactly on 4 GiB"
    assert (rc, report["status"]) == (0, "ok"), "at the threshold is 'at or below': the start goes on"
    assert report["message"] == "NUMA node 1 FilePages 4.00 GiB <= 4 GiB"


def test_one_kib_above_the_threshold_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = gb300_root(tmp_path / "root")
    set_file_pages(root, 1, 4 + KiB / GiB)
    rc, report = run_json(root, capsys, "--max-file-pages-gib", "4")
    assert report["file_pages_bytes"] == 4 * GiB + KiB
    assert (rc, report["status"]) == (1, "above-threshold")


@pytest.mark.parametrize("threshold", ["4", "2.5"])
def test_fractional_and_whole_thresholds_at_the_boundary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], threshold: str
) -> None:
    limit = float(threshold)
    root = gb300_root(tmp_path / "root", file_pages_gib=limit)
    assert run_json(root, capsys, "--max-file-pages-gib", threshold)[0] == 0
    set_file_pages(root, 1, limit + KiB / GiB)
    assert run_json(root, capsys, "--max-file-pages-gib", threshold)[0] == 1


def test_threshold_is_gib_not_gb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """4.2 GB = 3.91 GiB: below the default 4 GiB, above a (wrong) decimal 4 GB."""
    root = gb300_root(tmp_path / "root", file_pages_gib=4.2e9 / GiB)
    rc, report = run_json(root, capsys)  # the default threshold, 4
    assert 4 * 10**9 < report["file_pages_bytes"] < 4 * GiB  # type: ignore[operator]
    assert report["threshold_gib"] == 4.0
    assert (rc, report["status"]) == (0, "ok")
    assert report["file_pages_gib"] == round(report["file_pages_bytes"] / GiB, 3)  # type: ignore[operator]


# ---- the rest of prestart's report (mutants the benchmark found: scripts/bench-mutation) ----


def test_cdmm_report_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = one_node_root(tmp_path / "root")
    rc = main(["prestart", "--root", str(root), "--gpu-node", "1", "--settle-seconds", "0.5", "--no-drop",
               "--max-file-pages-gib", "3", "--json"])  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert {k: report[k] for k in ("status", "node", "dropped", "waited_s", "threshold_gib", "cdmm")} == {
        "status": "no-node", "node": 1, "dropped": False, "waited_s": 0.0, "threshold_gib": 3.0, "cdmm": True,
    }  # fmt: skip


@pytest.fixture
def runtime_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script, state = write_fake_runtime(tmp_path / "runtime")
    monkeypatch.setenv("STATION_RUNTIME_CMD", str(script))
    monkeypatch.setenv("FAKE_RUNTIME_STATE", str(state))
    return state


def test_logs_report_and_timings(
    tmp_path: Path, runtime_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = gb300_root(tmp_path / "root")
    add_container(runtime_state, "engine-a", stdout=b"last words\n")
    logs = tmp_path / "deep" / "er" / "logs"  # created with its parents
    args = ("--runtime", "docker", "--container", "engine-a", "--log-dir", str(logs))
    rc, report = run_json(root, capsys, *args)
    assert rc == 0
    saved = report["logs"]["saved"]  # type: ignore[index]
    assert {k: v for k, v in report["logs"].items() if k != "saved"} == {  # type: ignore[union-attr]
        "runtime": "docker", "container": "engine-a", "removed": True, "pruned": [],
        "message": f"saved engine-a logs to {saved}; container removed",
    }  # fmt: skip
    assert Path(saved).parent == logs and "last words" in Path(saved).read_text()
    timings = report["timings_ms"]
    assert {"sync", "read", "logs", "rm", "total"} <= set(timings)  # type: ignore[arg-type]
    assert all(isinstance(v, float) and v >= 0 for v in timings.values())  # type: ignore[union-attr]

    rc, report = run_json(root, capsys, *args)
    assert rc == 0 and report["logs"]["saved"] is None  # type: ignore[index]
    assert report["logs"]["removed"] is False  # type: ignore[index]
    assert report["logs"]["message"] == "no previous container 'engine-a': no logs to keep"  # type: ignore[index]
    timings = report["timings_ms"]
    assert isinstance(timings["logs"], float) and isinstance(timings["rm"], float)  # type: ignore[index]


def test_a_log_dir_that_cannot_be_created_is_an_error(
    tmp_path: Path, runtime_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = gb300_root(tmp_path / "root")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    rc = main(["prestart", "--root", str(root), "--settle-seconds", "0", "--no-drop", "--runtime", "docker",
               "--log-dir", str(blocker / "logs")])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 1
    assert f"station prestart: error: cannot create log dir {blocker / 'logs'}: Not a directory" in err


def test_log_path_numbers_collisions_from_1(tmp_path: Path) -> None:
    stamp = "20260101T000000Z"
    first = log_path(tmp_path, "c", stamp)
    assert first == tmp_path / f"c-{stamp}.log"
    first.write_text("")
    second = log_path(tmp_path, "c", stamp)
    assert second == tmp_path / f"c-{stamp}-1.log"
    second.write_text("")
    assert log_path(tmp_path, "c", stamp) == tmp_path / f"c-{stamp}-2.log"


def test_prune_orders_by_stamp_then_collision_number(tmp_path: Path) -> None:
    names = ["c-20260101T000000Z.log", "c-20260101T000000Z-1.log", "c-20260101T000000Z-2.log",
             "c-20251231T235959Z-9.log", "other-20200101T000000Z.log", "c-notes.txt"]  # fmt: skip
    for n in names:
        (tmp_path / n).write_text("")
    removed = prune_logs(tmp_path, "c", 2)
    assert removed == [str(tmp_path / "c-20251231T235959Z-9.log"), str(tmp_path / "c-20260101T000000Z.log")]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["c-20260101T000000Z-1.log", "c-20260101T000000Z-2.log", "other-20200101T000000Z.log", "c-notes.txt"]
    )


def test_utc_stamp_is_utc_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # UTC+05:30: a local-time stamp would be off by hours
    time.tzset()
    try:
        before = dt.datetime.now(dt.UTC).replace(microsecond=0)
        got = dt.datetime.strptime(utc_stamp(), "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
        after = dt.datetime.now(dt.UTC)
        assert before <= got <= after
        assert utc_stamp(dt.datetime(2026, 2, 3, 4, 5, 6, tzinfo=dt.UTC)) == "20260203T040506Z"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_drop_timings_are_measured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = gb300_root(tmp_path / "root")
    rc = main(["prestart", "--root", str(root), "--settle-seconds", "0", "--json"])
    timings = json.loads(capsys.readouterr().out)["timings_ms"]
    assert rc == 0 and (root / "proc/sys/vm/drop_caches").read_text() == "1\n"
    assert {"sync", "drop", "read", "total"} == set(timings)
    assert all(isinstance(v, float) and v >= 0 for v in timings.values())


def test_drop_caches_errors_name_the_path_and_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = gb300_root(tmp_path / "root")
    target = root / "proc/sys/vm/drop_caches"
    target.unlink()
    target.mkdir()  # a write fails with EISDIR, even as root
    assert main(["prestart", "--root", str(root), "--settle-seconds", "0"]) == 1
    assert f"station prestart: error: cannot write {target}: Is a directory" in capsys.readouterr().err
    target.rmdir()
    target.write_text("")

    real_open = Path.open

    def refuse(self: Path, *args: object, **kwargs: object) -> object:  # EACCES: root cannot be refused here
        if self == target:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "open", refuse)
    assert main(["prestart", "--root", str(root), "--settle-seconds", "0"]) == 1
    assert (
        f"station prestart: error: cannot write {target}: permission denied; prestart must run privileged "
        "(systemd: ExecStartPre=+station prestart …), or pass --no-drop to only check"
    ) in capsys.readouterr().err


def test_meminfo_without_file_pages_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = gb300_root(tmp_path / "root")
    meminfo = root / "sys/devices/system/node/node1/meminfo"
    meminfo.write_text("".join(ln + "\n" for ln in meminfo.read_text().splitlines() if "FilePages" not in ln))
    assert main(["prestart", "--root", str(root), "--settle-seconds", "0", "--no-drop"]) == 1
    err = capsys.readouterr().err
    assert f"cannot read FilePages of NUMA node 1: {meminfo}: no FilePages line" in err


@pytest.mark.timing
def test_at_the_threshold_after_a_drop_there_is_nothing_to_wait_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = gb300_root(tmp_path / "root", file_pages_gib=4)
    rc = main(["prestart", "--root", str(root), "--settle-seconds", "5", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert (rc, report["status"]) == (0, "ok")
    assert report["waited_s"] < 2.5, "at the threshold the settle loop must not run"


def test_node_missing_while_the_layout_is_unreadable_is_cdmm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = gb300_root(tmp_path / "root")
    (root / "sys/devices/system/node/node0/cpulist").write_text("garbage\n")  # the layout cannot be read
    for f in (root / "sys/devices/system/node/node1").iterdir():
        f.unlink()
    (root / "sys/devices/system/node/node1").rmdir()
    rc = main(["prestart", "--root", str(root), "--settle-seconds", "0", "--no-drop", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert (rc, report["status"], report["cdmm"]) == (0, "no-node", True)
    assert report["message"].endswith("(NUMA node 1 does not exist on this machine)")
    assert set(report["timings_ms"]) == {"sync", "read", "total"}
    assert all(isinstance(v, float) for v in report["timings_ms"].values())


def test_cdmm_timings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = one_node_root(tmp_path / "root")
    assert main(["prestart", "--root", str(root), "--settle-seconds", "0", "--no-drop", "--json"]) == 0
    timings = json.loads(capsys.readouterr().out)["timings_ms"]
    assert set(timings) == {"sync", "read", "total"}
    assert all(isinstance(v, float) for v in timings.values())


def _namespace(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = dict(gpu_node=1, max_file_pages_gib=4.0, settle_seconds=2.0, no_drop=False,
                                   root=Path("/"), runtime="none", container="vllm-station",
                                   log_dir=Path("/var/log/vllm-station"), keep_logs=20)  # fmt: skip
    base.update(kw)
    return argparse.Namespace(**base)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"gpu_node": -1}, "--gpu-node must be >= 0, got -1"),
        ({"max_file_pages_gib": -0.5}, "--max-file-pages-gib must be >= 0, got -0.5"),
        ({"settle_seconds": -1.0}, "--settle-seconds must be >= 0, got -1.0"),
        ({"keep_logs": 0}, "--keep-logs must be >= 1, got 0"),
        ({"runtime": "docker", "container": ""}, "--container must not be empty"),
    ],
)
def test_options_are_checked_even_without_argparse(kw: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as err:
        options_from_args(_namespace(**kw))
    assert str(err.value) == message


def test_option_boundaries_are_accepted() -> None:
    opts = options_from_args(_namespace(gpu_node=0, max_file_pages_gib=0.0, settle_seconds=0.0, keep_logs=1,
                                        no_drop=True, container=""))  # fmt: skip
    assert (opts.gpu_node, opts.max_file_pages_gib, opts.settle_seconds, opts.keep_logs) == (0, 0.0, 0.0, 1)
    assert (opts.drop, opts.runtime, opts.container) == (False, "none", "")
    opts = options_from_args(_namespace(max_file_pages_gib=0.5, runtime="podman", container="c",
                                        root=Path("/r"), log_dir=Path("/l")))  # fmt: skip
    assert (opts.max_file_pages_gib, opts.runtime, opts.container, opts.root, opts.log_dir, opts.drop) == (
        0.5, "podman", "c", Path("/r"), Path("/l"), True)  # fmt: skip


def test_timings_are_milliseconds_to_the_microsecond(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = gb300_root(tmp_path / "root")
    t0 = time.perf_counter()
    assert main(["prestart", "--root", str(root), "--settle-seconds", "0", "--json"]) == 0
    wall_ms = (time.perf_counter() - t0) * 1000
    timings = json.loads(capsys.readouterr().out)["timings_ms"]
    assert all(round(v, 3) == v for v in timings.values())
    assert 0.001 <= timings["total"] <= wall_ms
    assert timings["sync"] + timings["drop"] + timings["read"] <= timings["total"]


def test_above_threshold_report_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = gb300_root(tmp_path / "root", file_pages_gib=5.123456)
    rc = main(["prestart", "--root", str(root), "--settle-seconds", "0", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert {k: report[k] for k in ("status", "node", "file_pages_gib", "dropped", "threshold_gib")} == {
        "status": "above-threshold", "node": 1, "file_pages_gib": 5.123, "dropped": True,
        "threshold_gib": 4.0}  # fmt: skip
    assert isinstance(report["waited_s"], float) and round(report["waited_s"], 3) == report["waited_s"]
    assert report["message"] == (
        "page cache in HBM on NUMA node 1: FilePages 5.12 GiB > 4 GiB after a drop_caches and 0 s; "
        "vLLM would see too little free GPU memory"
    )
    assert report["fix"] == (
        "bind bulk file I/O (downloads, copies, rsync, backups) to node 0: "
        "`station numa-exec --membind 0 -- …`; find the writer "
        "(grep FilePages /sys/devices/system/node/node1/meminfo while it runs), then restart"
    )
    ok = gb300_root(tmp_path / "ok", file_pages_gib=1.23456)
    assert main(["prestart", "--root", str(ok), "--settle-seconds", "0", "--no-drop", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["file_pages_gib"] == 1.235 and round(report["waited_s"], 3) == report["waited_s"]


def test_defaults_and_bounds_of_the_options() -> None:
    parser = argparse.ArgumentParser()
    configure(parser)
    ns = parser.parse_args([])
    assert (ns.gpu_node, ns.max_file_pages_gib, ns.settle_seconds, ns.no_drop, ns.root, ns.runtime) == (
        1, 4.0, 2.0, False, Path("/"), "none")  # fmt: skip
    assert (ns.container, ns.log_dir, ns.keep_logs, ns.json) == (
        "vllm-station", Path("/var/log/vllm-station"), 20, False)  # fmt: skip
    edges = [("--gpu-node", "1023", "1024"), ("--max-file-pages-gib", "1000000", "1000000.5"),
             ("--settle-seconds", "3600", "3600.5"), ("--keep-logs", "100000", "100001")]  # fmt: skip
    for option, ok, bad in edges:
        parser.parse_args([option, ok])
        with pytest.raises(SystemExit):
            parser.parse_args([option, bad])
    assert parser.parse_args(["--max-file-pages-gib", "0", "--settle-seconds", "0", "--gpu-node", "0"])


def test_status_error_and_its_exit(
    tmp_path: Path, runtime_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad_logs = ["--runtime", "docker", "--log-dir", str(blocker / "logs")]
    root = gb300_root(tmp_path / "root")
    rc, report = run_json(root, capsys, *bad_logs)
    assert (rc, report["status"]) == (1, "error")
    assert report["errors"] == [f"cannot create log dir {blocker / 'logs'}: Not a directory"]
    above = gb300_root(tmp_path / "above", file_pages_gib=9)
    rc, report = run_json(above, capsys, *bad_logs)
    assert (rc, report["status"]) == (1, "above-threshold"), "the refusal is the status; the error is listed"


def test_human_output(tmp_path: Path, runtime_state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for stamp in ("20200101T000000Z", "20200102T000000Z"):
        (logs / f"vllm-station-{stamp}.log").write_text("")
    add_container(runtime_state, "vllm-station", stdout=b"bye\n")
    root = gb300_root(tmp_path / "root", file_pages_gib=9)
    rc = main(["prestart", "--root", str(root), "--settle-seconds", "0", "--no-drop", "--runtime", "docker",
               "--log-dir", str(logs), "--keep-logs", "2"])  # fmt: skip
    out, err = capsys.readouterr()
    assert rc == 1
    lines = out.splitlines()
    assert lines[0].startswith("station prestart: saved vllm-station logs to ")
    assert lines[1:] == [f"  pruned old log {logs / 'vllm-station-20200101T000000Z.log'}"]
    assert "page cache in HBM" not in out and err.count("page cache in HBM") == 1


def test_page_cache_figures_go_to_the_textfile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    monkeypatch.setenv("STATION_TEXTFILE_DIR", str(metrics))
    root = gb300_root(tmp_path / "root", file_pages_gib=2)
    assert main(["prestart", "--root", str(root), "--settle-seconds", "0", "--no-drop",
                 "--max-file-pages-gib", "3"]) == 0  # fmt: skip
    values = textfile.read(metrics / "station-page-cache-prestart.prom")
    labels = '{node="1",source="prestart"}'
    assert values[f"station_page_cache_file_pages_bytes{labels}"] == 2 * GiB
    assert values[f"station_page_cache_threshold_bytes{labels}"] == 3 * GiB
    assert values[f"station_page_cache_gpu_memory_numa{labels}"] == 1.0
    cdmm = one_node_root(tmp_path / "cdmm")
    assert main(["prestart", "--root", str(cdmm), "--settle-seconds", "0", "--no-drop"]) == 0
    values = textfile.read(metrics / "station-page-cache-prestart.prom")
    assert values[f"station_page_cache_gpu_memory_numa{labels}"] == 0.0


def test_no_drop_refusal_message_exactly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = gb300_root(tmp_path / "root", file_pages_gib=6)
    rc, report = run_json(root, capsys)
    assert rc == 1
    assert report["message"] == (
        "page cache in HBM on NUMA node 1: FilePages 6.00 GiB > 4 GiB (no drop: --no-drop); "
        "vLLM would see too little free GPU memory"
    )
