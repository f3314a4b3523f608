"""`station weights-check` against vLLM logs: real lines of the vLLM 0.32.0 CPU build (tests/data/weights/
cpu_*.log, captured here) and GPU lines built from vLLM 0.32.0's format strings (gpu_*.log; their header
names the source lines). Checkpoint sizes come from real stamps and sparse files; --unit goes through a
journalctl stand-in; --wait watches a growing file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import fakejournal
import pytest

from vllm_station.checkpoint.stamp import STAMP_NAME
from vllm_station.cli import main
from vllm_station.commands import weights
from vllm_station.commands.weights import checkpoint_size, scan
from vllm_station.status import Status

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
GiB = 2**30

DATA = Path(__file__).parent / "data" / "weights"
STATION = [sys.executable, "-m", "vllm_station"]
SHARD = round(109.2 * GiB)  # 4 shards: 436.8 GiB, GLM-5.3 NVFP4's order of magnitude
SHARDS = {f"model-0000{i}-of-00004.safetensors": SHARD for i in range(1, 5)}
WHOLE = 4 * SHARD


def stamp_dir(directory: Path, files: dict[str, int] | None = None) -> Path:
    """A checkpoint directory holding only a verify stamp (the sizes come from it, not from files)."""
    directory.mkdir(parents=True, exist_ok=True)
    entries = [{"path": "config.json", "size": 2048, "sha256": None}]
    sizes = SHARDS if files is None else files
    entries += [{"path": p, "size": s, "sha256": None} for p, s in sizes.items()]
    stamp = {
        "version": 1,
        "repo": "nvidia/GLM-5.3-NVFP4",
        "revision": "a" * 40,
        "verified_at": "2026-01-01T00:00:00Z",
        "sha256_checked": False,
        "architectures": ["GlmMoeDsaForCausalLM"],
        "quant_algo": "NVFP4",
        "files": entries,
    }
    (directory / STAMP_NAME).write_text(json.dumps(stamp))
    return directory


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    return stamp_dir(tmp_path / "glm53")


# file → (--tensor-parallel-size, status, exit code, substrings of the summary)
CASES = {
    "gpu_tp2_head.log": (2, Status.PASS, 0, ["Worker_TP0 218.37 GiB", "218.40 GiB per rank", "TP 2"]),
    "gpu_tp2_worker.log": (2, Status.PASS, 0, ["Worker_TP1 218.41 GiB"]),
    "gpu_tp2_runner_v2.log": (2, Status.PASS, 0, ["Worker_TP0 218.36 GiB; Worker_TP1 218.40 GiB"]),
    "gpu_tp1_whole.log": (
        2,
        Status.FAIL,
        1,
        ["EngineCore holds 436.52 GiB", "100 % of the whole checkpoint", "tensor parallelism not applied"],
    ),
    "gpu_tp2_skewed.log": (2, Status.WARN, 0, ["Worker_TP0 holds 150.12 GiB", "69 %", "a skewed split"]),
    "gpu_tp2_pending.log": (2, Status.PENDING, 4, ["no 'Model loading took", "weights are loading"]),
    "cpu_tp1.log": (1, Status.SKIP, 0, ["CPU build logs no weight memory", "Loading weights took 0.08"]),
    "cpu_tp2.log": (2, Status.SKIP, 0, ["CPU build logs no weight memory", "Loading weights took 0.02"]),
}


def test_every_fixture_has_a_case() -> None:
    assert sorted(p.name for p in DATA.glob("*.log")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixtures(name: str, ckpt: Path) -> None:
    tp, status, code, fragments = CASES[name]
    report = scan((DATA / name).read_text(), checkpoint_size(ckpt), tp, name)
    assert report.status is status, report.summary
    assert report.exit_code == code
    for fragment in fragments:
        assert fragment in report.summary
    assert (report.fix is None) == (status is Status.PASS)


def test_head_details(ckpt: Path) -> None:
    report = scan((DATA / "gpu_tp2_head.log").read_text(), checkpoint_size(ckpt), 2)
    (rank,) = report.ranks
    assert (rank.process, rank.pid, rank.tp_rank) == ("Worker_TP0", 31610, 0)
    assert (rank.memory_gib, rank.load_seconds, rank.weights_seconds) == (218.37, 386.402117, 384.21)
    assert rank.memory_bytes == round(218.37 * GiB)
    assert rank.share_of_expected == pytest.approx(218.37 / 218.4, abs=1e-4)
    assert rank.share_of_checkpoint == pytest.approx(0.5, abs=1e-3)
    assert report.logged_tensor_parallel_size == 2 and report.platform is None
    assert report.expected_bytes_per_rank == WHOLE // 2
    # one station's journal holds its own rank only: said, not a failure
    assert any("TP rank(s) 0 seen of 2" in n for n in report.notes)


def test_real_cpu_lines(ckpt: Path) -> None:
    """The real CPU logs: the tags vLLM 0.32 writes, and only the local first rank's weights line."""
    tp2 = scan((DATA / "cpu_tp2.log").read_text(), checkpoint_size(ckpt), 2)
    assert tp2.platform == "cpu" and tp2.logged_tensor_parallel_size == 2
    assert [(r.process, r.pid, r.tp_rank, r.memory_gib, r.weights_seconds) for r in tp2.ranks] == [
        ("Worker_TP0", 26859, 0, None, 0.02)
    ]
    tp1 = scan((DATA / "cpu_tp1.log").read_text(), checkpoint_size(ckpt), 1)
    assert [(r.process, r.tp_rank) for r in tp1.ranks] == [("Worker", None)]
    assert tp1.logged_tensor_parallel_size == 1


def test_whole_model_on_a_tp2_rank_fails_by_memory_alone(ckpt: Path) -> None:
    """The engine says TP 2, but rank 0 holds 95 % of the checkpoint: FAIL from the figure itself."""
    text = (DATA / "gpu_tp2_head.log").read_text().replace("took 218.37 GiB", "took 415.00 GiB")
    report = scan(text, checkpoint_size(ckpt), 2)
    assert report.status is Status.FAIL and report.exit_code == 1
    assert "95 % of the whole checkpoint" in report.summary
    assert "tensor parallelism not applied" in report.summary


def test_engine_tp1_fails_even_without_a_memory_figure(ckpt: Path) -> None:
    """The CPU log of a TP-1 engine checked as TP 2: the engine config line decides."""
    report = scan((DATA / "cpu_tp1.log").read_text(), checkpoint_size(ckpt), 2)
    assert report.status is Status.FAIL
    assert report.summary == (
        "tensor parallelism not applied: vLLM's engine config says tensor_parallel_size=1, "
        "--tensor-parallel-size 2"
    )


def test_tp_size_larger_than_configured_warns(ckpt: Path) -> None:
    report = scan((DATA / "gpu_tp2_head.log").read_text(), checkpoint_size(ckpt), 1)
    assert report.status is Status.WARN  # 50 % of a TP-1 share, and the engine ran TP 2
    assert "tensor_parallel_size=2, --tensor-parallel-size 1" in " ".join([report.summary, *report.notes])


def test_restart_in_one_log_counts_the_latest_start(ckpt: Path) -> None:
    """--all-invocations or a kept log: a rank that started twice is judged by its last line."""
    first = (DATA / "gpu_tp1_whole.log").read_text().replace("EngineCore pid=31544", "Worker_TP0 pid=100")
    second = (DATA / "gpu_tp2_head.log").read_text()
    report = scan(first + second, checkpoint_size(ckpt), 2)
    assert report.status is Status.PASS
    assert [(r.process, r.pid, r.memory_gib) for r in report.ranks] == [("Worker_TP0", 31610, 218.37)]


def test_colour_codes_and_prefixes_are_ignored(ckpt: Path) -> None:
    line = (
        "Dec 01 09:14:07 station-a vllm[31544]: \x1b[0;36m(Worker_TP0 pid=31610)\x1b[0;0m "
        "\x1b[32mINFO\x1b[0m 12-01 09:14:07 [gpu_model_runner.py:5149] Model loading took 218.4 GiB "
        "memory and 386.402117 seconds"
    )
    report = scan(line, checkpoint_size(ckpt), 2)
    assert report.status is Status.PASS and report.ranks[0].tp_rank == 0


# --- checkpoint size ------------------------------------------------------------------------------------


def test_stamp_sizes_count_only_safetensors(ckpt: Path) -> None:
    size = checkpoint_size(ckpt)
    assert (size.bytes, size.files, size.source, size.note) == (WHOLE, 4, "stamp", None)


def sparse(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(size)


def test_no_stamp_sums_the_files_on_disk_and_says_so(tmp_path: Path) -> None:
    sparse(tmp_path / "ck" / "model-00001-of-00002.safetensors", 3 * GiB)
    sparse(tmp_path / "ck" / "sub" / "model-00002-of-00002.safetensors", 1 * GiB)
    (tmp_path / "ck" / "config.json").write_text("{}")
    size = checkpoint_size(tmp_path / "ck")
    assert (size.bytes, size.files, size.source) == (4 * GiB, 2, "safetensors")
    assert size.note == f"no verify stamp ({STAMP_NAME}): summed the 2 .safetensors file(s) on disk"
    report = scan((DATA / "gpu_tp2_head.log").read_text(), size, 2)
    assert any(n.startswith("checkpoint size: no verify stamp") for n in report.notes)


def test_a_broken_stamp_falls_back_with_the_reason(tmp_path: Path) -> None:
    sparse(tmp_path / "ck" / "model.safetensors", 2 * GiB)
    (tmp_path / "ck" / STAMP_NAME).write_text("{not json")
    size = checkpoint_size(tmp_path / "ck")
    assert size.bytes == 2 * GiB and size.note is not None
    assert size.note.startswith("the verify stamp is unusable (not valid JSON")


def test_a_stamp_without_weight_files_falls_back(tmp_path: Path) -> None:
    ck = stamp_dir(tmp_path / "ck", files={})
    sparse(ck / "model.safetensors", GiB)
    size = checkpoint_size(ck)
    assert size.source == "safetensors" and size.note is not None
    assert size.note.startswith("the verify stamp lists no .safetensors file")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "absent", "is not a directory"),
        (lambda d: d, "has no .safetensors files: no checkpoint size"),
    ],
)
def test_no_checkpoint_size_is_a_usage_error(
    tmp_path: Path, make: object, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = make(tmp_path)  # type: ignore[operator]
    log = str(DATA / "gpu_tp2_head.log")
    args = ["weights-check", "--log", log, "--checkpoint", str(directory), "--tensor-parallel-size", "2"]
    assert main(args) == 2
    assert message in capsys.readouterr().err


# --- the CLI ------------------------------------------------------------------------------------------


def cli(ckpt: Path, *extra: str, log: str = "gpu_tp2_head.log", tp: str = "2") -> list[str]:
    return [
        "weights-check", "--log", str(DATA / log), "--checkpoint", str(ckpt),
        "--tensor-parallel-size", tp, *extra,
    ]  # fmt: skip


def test_cli_table(ckpt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(cli(ckpt)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("PASS    Worker_TP0 218.37 GiB: within ±30 % of the expected 218.40 GiB")
    assert f"  checkpoint: {ckpt}: 436.80 GiB in 4 .safetensors file(s) (verify stamp)" in out
    expected = "  expected:   218.40 GiB per rank (TP 2); WARN outside ±30 %, FAIL at >= 90 % of the whole"
    assert f"{expected} checkpoint" in out
    header = next(line for line in out if line.strip().startswith("process"))
    headers = ["process", "pid", "TP rank", "weights GiB", "% of share", "load s", "verdict"]
    assert re.split(r"\s{2,}", header.strip()) == headers
    row = next(line for line in out if line.strip().startswith("Worker_TP0"))
    assert row.split() == ["Worker_TP0", "31610", "0", "218.37", "100", "386.40", "PASS"]


def test_cli_json_schema(ckpt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(cli(ckpt, "--json", log="gpu_tp2_skewed.log")) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert list(data) == [
        "status", "summary", "fix", "source", "lines_read", "platform", "tensor_parallel_size",
        "logged_tensor_parallel_size", "checkpoint", "expected_bytes_per_rank", "thresholds", "ranks",
        "notes", "exit_code",
    ]  # fmt: skip
    assert data["status"] == "WARN" and data["exit_code"] == 0
    assert data["thresholds"] == {"whole_model_fraction": 0.9, "share_tolerance": 0.3}
    checkpoint = {"dir": str(ckpt), "bytes": WHOLE, "files": 4, "source": "stamp", "note": None}
    assert data["checkpoint"] == checkpoint
    (rank,) = data["ranks"]
    assert list(rank) == [
        "process", "pid", "tp_rank", "memory_gib", "load_seconds", "weights_seconds", "line", "memory_bytes",
        "share_of_expected", "share_of_checkpoint", "status", "note",
    ]  # fmt: skip
    assert rank["status"] == "WARN" and rank["memory_gib"] == 150.12
    assert "WARN: Worker_TP0 holds 150.12 GiB" in captured.err


@pytest.mark.parametrize(
    ("log", "tp", "code"),
    [
        ("gpu_tp1_whole.log", "2", 1),
        ("gpu_tp2_pending.log", "2", 4),
        ("cpu_tp1.log", "1", 0),
    ],
)
def test_cli_exit_codes(ckpt: Path, log: str, tp: str, code: int) -> None:
    assert main(cli(ckpt, log=log, tp=tp)) == code


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--log", "/nonexistent/vllm.log"], "does not exist"),
        (["--log", str(DATA)], "is a directory"),
    ],
)
def test_cli_unreadable_log_is_exit_3(
    ckpt: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["weights-check", *argv, "--checkpoint", str(ckpt), "--tensor-parallel-size", "2"]
    assert main(args) == 3
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra",
    [
        ["--tensor-parallel-size", "0"],
        ["--tensor-parallel-size", "2", "--unit", "vllm-station.service"],  # two sources
        ["--tensor-parallel-size", "2", "--wait", "-1"],
        ["--tensor-parallel-size", "2", "--interval", "0"],
    ],
)
def test_cli_usage_errors_exit_2(ckpt: Path, extra: list[str]) -> None:
    log = str(DATA / "gpu_tp2_head.log")
    assert main(["weights-check", "--log", log, "--checkpoint", str(ckpt), *extra]) == 2


def test_cli_requires_checkpoint_and_tp(ckpt: Path) -> None:
    log = str(DATA / "gpu_tp2_head.log")
    assert main(["weights-check", "--log", log, "--tensor-parallel-size", "2"]) == 2
    assert main(["weights-check", "--log", log, "--checkpoint", str(ckpt)]) == 2
    assert main(["weights-check", "--checkpoint", str(ckpt), "--tensor-parallel-size", "2"]) == 2


def test_subprocess_entry_point(ckpt: Path) -> None:
    proc = subprocess.run([*STATION, *cli(ckpt, log="gpu_tp1_whole.log")], capture_output=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith(b"FAIL    EngineCore holds 436.52 GiB")
    assert b"Traceback" not in proc.stderr


# --- --unit through a journalctl stand-in ----------------------------------------------------------------

def test_unit_reads_the_current_invocation(
    ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fakejournal.install(tmp_path, monkeypatch)
    calls = tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_JOURNAL", str(DATA / "gpu_tp2_worker.log"))
    monkeypatch.setenv("FAKE_INVOCATION", "0123456789abcdef0123456789abcdef")
    args = ["--unit", "vllm-station.service", "--checkpoint", str(ckpt), "--tensor-parallel-size", "2"]
    assert main(["weights-check", *args]) == 0
    out = capsys.readouterr().out
    assert "unit vllm-station.service (invocation 0123456789abcdef0123456789abcdef)" in out
    assert calls.read_text().splitlines() == [
        "systemctl show --property=InvocationID,LoadState -- vllm-station.service",
        "journalctl _SYSTEMD_INVOCATION_ID=0123456789abcdef0123456789abcdef -o cat --no-pager",
    ]


def test_unit_without_journalctl_names_this_command(
    ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    args = ["--unit", "vllm-station.service", "--checkpoint", str(ckpt), "--tensor-parallel-size", "2"]
    assert main(["weights-check", *args]) == 3
    err = capsys.readouterr().err
    assert "journalctl not found on PATH" in err and "station weights-check --log FILE" in err


# --- --wait ----------------------------------------------------------------------------------------------


@pytest.mark.timing
def test_wait_on_a_growing_file_returns_at_the_loading_line(
    ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "vllm.log"
    log.write_text((DATA / "gpu_tp2_pending.log").read_text())
    line = (DATA / "gpu_tp2_head.log").read_text().splitlines()[-1]

    def later() -> None:
        time.sleep(0.4)
        with log.open("a") as f:
            f.write(line + "\n")

    thread = threading.Thread(target=later, daemon=True)
    thread.start()
    start = time.monotonic()
    args = ["weights-check", "--log", str(log), "--checkpoint", str(ckpt), "--tensor-parallel-size", "2"]
    assert main([*args, "--wait", "20", "--interval", "0.1"]) == 0
    elapsed = time.monotonic() - start
    thread.join()
    assert 0.4 <= elapsed < 10
    assert capsys.readouterr().out.startswith("PASS")


def test_wait_times_out_pending(ckpt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    start = time.monotonic()
    assert main(cli(ckpt, "--wait", "0.5", "--interval", "0.1", log="gpu_tp2_pending.log")) == 4
    assert 0.5 <= time.monotonic() - start < 5
    assert capsys.readouterr().out.startswith("PENDING still pending after 0.5 s: no 'Model loading took")


def test_poll_uses_the_clock_and_interval(ckpt: Path) -> None:
    now = [0.0]
    sleeps: list[float] = []
    pending = (DATA / "gpu_tp2_pending.log").read_text()
    texts = iter([pending, pending, (DATA / "gpu_tp2_head.log").read_text()])

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    report = weights.poll(
        lambda: (next(texts), "test"), checkpoint_size(ckpt), 2, wait=60, interval=5,
        clock=lambda: now[0], sleep=sleep,
    )  # fmt: skip
    assert report.status is Status.PASS and sleeps == [5, 5]
