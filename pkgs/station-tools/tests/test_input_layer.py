"""The input layer, end to end: hostile files, numbers and JSON are clear usage errors before any work.

Real files (/dev/zero, a FIFO, a directory), the real CLI in a subprocess with its address space capped
(RLIMIT_AS), so a regression that reads /dev/zero whole fails with a MemoryError instead of taking the
machine down; real servers (`station simulate`) where a server-reported size is clamped.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import golive_config
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simserver import SimServer

from vllm_station import argtypes, bounded
from vllm_station.api import ApiClient
from vllm_station.api.served import MAX_CONTEXT, max_model_len
from vllm_station.cli import main
from vllm_station.commands.bench import expect
from vllm_station.commands.bench.metrics import summarise_level
from vllm_station.commands.bench.parse import RequestResult
from vllm_station.errors import UsageError
from vllm_station.host.container import resolve_runtime
from vllm_station.sim.config import SimConfig

SRC = Path(__file__).resolve().parents[1] / "src"
AS_LIMIT = 2 * 1024**3  # 2 GiB of address space: the CLI needs far less; /dev/zero read whole needs more
CLOSED = "http://127.0.0.1:9"  # nothing listens: a command that got past its inputs would exit 3, not 2


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def station(
    *argv: str, stdin: object = subprocess.DEVNULL, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """The real CLI in a subprocess, memory capped; the timeout is a hang guard only, not a bound."""
    full_env = {
        **os.environ,
        "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        **(env or {}),
    }
    r = subprocess.run(
        [sys.executable, "-m", "vllm_station", *argv], stdin=stdin, capture_output=True, text=True,
        timeout=300, preexec_fn=_cap, env=full_env,
    )  # fmt: skip
    return r.returncode, r.stdout + r.stderr


@pytest.fixture
def hostile(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    d = tmp_path / "dir"
    d.mkdir()
    return {"/dev/zero": Path("/dev/zero"), "fifo": fifo, "directory": d}


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "directory"])
def test_golive_config_that_is_not_a_regular_file(kind: str, hostile: dict[str, Path]) -> None:
    code, out = station("golive", "--config", str(hostile[kind]))
    assert code == 2, out
    assert f"--config {hostile[kind]}: cannot read it" in out and "not a regular file" in out
    assert "Traceback" not in out and "MemoryError" not in out


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo"])
@pytest.mark.parametrize(
    "argv",
    [["gates", "tools", "--cases"], ["gates", "agent", "--tasks"], ["gates", "list", "--cases"]],
    ids=["tools-cases", "agent-tasks", "list-cases"],
)
def test_gates_case_files_that_are_not_regular_files(
    argv: list[str], kind: str, hostile: dict[str, Path]
) -> None:
    path = hostile[kind]
    extra = [] if argv[1] == "list" else ["--base-url", CLOSED]
    code, out = station(*argv, str(path), *extra)
    assert code == 2, out
    assert str(path) in out and "not a regular file" in out
    assert "Traceback" not in out and "MemoryError" not in out


def test_a_fifo_named_json_inside_a_case_directory(hostile: dict[str, Path]) -> None:
    os.mkfifo(hostile["directory"] / "more.json")
    code, out = station("gates", "list", "--cases", str(hostile["directory"]))
    assert code == 2 and "more.json" in out and "FIFO" in out and "Traceback" not in out, out


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "directory"])
def test_needle_calibration_cache_that_is_not_a_regular_file(kind: str, hostile: dict[str, Path]) -> None:
    """Refused before the server is asked, and never replaced (it would have been renamed over)."""
    path = hostile[kind]
    code, out = station("gates", "needle", "--base-url", CLOSED, "--calibration-cache", str(path))
    assert code == 2, out
    assert f"--calibration-cache {path}" in out and "not a regular file" in out and "Traceback" not in out
    assert path.exists() and not path.is_file()


def test_nccl_check_stdin_is_read_in_bounded_memory() -> None:
    """/dev/zero on stdin: no line ever ends; the scan stops at its limit, in capped memory: PENDING."""
    with open("/dev/zero", "rb") as zero:
        code, out = station("nccl-check", "-", stdin=zero)
    assert code == 4, out
    assert "Traceback" not in out and "MemoryError" not in out


# ---- numbers: every option and every config value through the shared types, at parse time ----


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--bench-concurrency", "100000000"], "--bench-concurrency"),
        (["--bench-concurrency", "0"], "--bench-concurrency"),
        (["--bench-requests", "100000000000000000000"], "--bench-requests"),
        (["--bench-requests", "0"], "--bench-requests"),
        (["--bench-requests", "-1"], "--bench-requests"),
        (["--bench-requests", "0x"], "--bench-requests"),
        (["--needle-lengths", "nan"], "--needle-lengths"),
        (["--needle-lengths", "nan%"], "--needle-lengths"),
        (["--needle-lengths", "1e400k"], "--needle-lengths"),
        (["--needle-lengths", "100%"], "--needle-lengths"),
        (["--needle-depths", "101"], "--needle-depths"),
        (["--bench-output-len", "٣"], "--bench-output-len"),  # an Arabic-Indic three: int() reads it
        (["--agent-repeats", "１"], "--agent-repeats"),  # a full-width one
        (["--timeout", "1_0"], "--timeout"),
    ],
)
def test_golive_numbers_are_refused_at_parse_time(
    argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["golive", "--base-url", CLOSED, *argv]) == 2
    err = capsys.readouterr().err
    assert f"argument {option}:" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"bench": {"concurrency": [0]}}, "bench.concurrency"),
        ({"bench": {"concurrency": [1, 100000000]}}, "bench.concurrency"),
        ({"bench": {"concurrency": "1,32"}}, "bench.concurrency"),
        ({"bench": {"concurrency": [True]}}, "bench.concurrency"),
        ({"bench": {"requests": 0}}, "bench.requests"),
        ({"bench": {"requests": "-1"}}, "bench.requests"),
        ({"bench": {"requests": 10**20}}, "bench.requests"),
        ({"bench": {"requests": True}}, "bench.requests"),
        ({"bench": {"requests": [2]}}, "bench.requests"),
        ({"bench": {"outputLen": "256"}}, "bench.outputLen"),
        ({"bench": {"outputLen": 1.5}}, "bench.outputLen"),
        ({"bench": 5}, "bench"),
        ({"agent": {"repeats": 0}}, "agent.repeats"),
        ({"agent": {"repeats": "3"}}, "agent.repeats"),
        ({"timeout": "nan"}, "timeout"),
        ({"timeout": 1e300}, "timeout"),
        ({"timeout": -1}, "timeout"),
        ({"needle": {"lengths": 5}}, "needle.lengths"),
        ({"needle": {"lengths": "nan%"}}, "needle.lengths"),
        ({"needle": {"depths": "٥٠"}}, "needle.depths"),
        ({"needle": {"calibrationCache": 7}}, "needle.calibrationCache"),
        ({"needle": {"calibrationCache": "/dev/zero"}}, "needle.calibrationCache"),
        ({"skip": "bench"}, "skip"),
        ({"expect": "failures==0"}, "expect"),
        ({"station": [1]}, "station"),
        ({"model": 5}, "model"),
        ({"outDir": ["x"]}, "outDir"),
        ({"baseUrl": 5}, "baseUrl"),
        ({"apiKeyFile": {"a": 1}}, "apiKeyFile"),
    ],
    ids=lambda v: json.dumps(v)[:40] if isinstance(v, dict) else v,
)
def test_golive_config_values_are_typed_and_ranged(
    config: dict[str, object], key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wrongly typed or out-of-range value in --config: exit 2 naming the file and the key, before any
    gate runs (nothing listens at the URL: getting further would be exit 3)."""
    path = tmp_path / "golive.json"
    golive_config.write(path, **{"baseUrl": CLOSED, **config})
    assert main(["golive", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"--config {path}: {key}" in err and "Traceback" not in err, err


def test_a_go_needs_evidence_zero_requests_cannot_be_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["--bench-requests", "0"], ["--bench-concurrency", "0"]):
        assert main(["golive", "--base-url", CLOSED, *argv]) == 2
        assert "Traceback" not in capsys.readouterr().err


def _ok(i: int) -> RequestResult:
    return RequestResult(
        index=i, ok=True, failure=None, detail="", t_start=0.0, t_end=0.2, queue=0.0, ttft=0.1, e2e=0.2,
        output_tokens=11, prompt_tokens=100, token_source="usage", itl=0.01, gaps=[0.01] * 10,
    )  # fmt: skip


def _failed(i: int) -> RequestResult:
    return RequestResult(
        index=i, ok=False, failure="http_5xx", detail="500", t_start=0.0, t_end=0.1, queue=0.0, ttft=None,
        e2e=None, output_tokens=0, prompt_tokens=None, token_source="none", itl=None, gaps=[],
    )  # fmt: skip


def test_a_threshold_that_measured_nothing_is_not_held() -> None:
    """`failures==0` holds trivially when nothing ran: with no successful request it is not held."""
    exps = expect.parse(["failures==0", "ok>=0", "c1.tok_s>=0"])
    nothing = summarise_level("c1", "sweep", 1, 128, 11, [[]])
    assert [r.passed for r in expect.evaluate(exps, [nothing])] == [False, False, False]
    assert "nothing was measured" in expect.evaluate(exps, [nothing])[0].detail
    assert [r.passed for r in expect.evaluate(expect.parse(["failures==0", "tok_s>=0"]), [])] == [
        False,
        False,
    ]
    measured = summarise_level("c1", "sweep", 1, 128, 11, [[_ok(0)]])
    assert [r.passed for r in expect.evaluate(exps, [measured])] == [True, True, True]
    # a level where every request failed: failures==0 is not held, and its metrics were not measured
    failed = summarise_level("c1", "sweep", 1, 128, 11, [[_failed(0)]])
    assert [r.passed for r in expect.evaluate(exps, [failed])] == [False, False, False]


# ---- JSON: a depth limit everywhere ----


@pytest.mark.parametrize("depth", [bounded.MAX_JSON_DEPTH + 1, 100_000, 10_000_000])
def test_deep_json_is_a_clear_error(depth: int) -> None:
    text = "[" * depth + "]" * depth
    with pytest.raises(json.JSONDecodeError, match="nested more than 100 levels"):
        bounded.loads_json(text)
    with pytest.raises(ValueError, match="nested more than"):
        bounded.loads_json("[" * depth)  # unbalanced too: still this error, never a RecursionError
    ok = "[" * bounded.MAX_JSON_DEPTH + "]" * bounded.MAX_JSON_DEPTH
    assert bounded.loads_json(ok) is not None
    assert bounded.loads_json('{"a": "' + "[" * 5000 + '"}') == {"a": "[" * 5000}  # brackets in strings


def test_gate_stamp_with_a_deeply_nested_stamp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The unit's start gate reads the stamp: deep JSON is a refusal (exit 1) naming it, no traceback."""
    (tmp_path / ".station-verified.json").write_text('{"files": ' + "[" * 200_000 + "]" * 200_000 + "}")
    assert main(["gate", "stamp", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "nested more than" in err and "Traceback" not in err and "RecursionError" not in err


def test_deep_json_from_a_case_file_and_extra_body(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"cases": ' + "[" * 50_000 + "]" * 50_000 + "}")
    assert main(["gates", "list", "--cases", str(deep)]) == 2
    assert "nested more than" in capsys.readouterr().err
    assert main(["gates", "tools", "--base-url", CLOSED, "--extra-body", "[" * 50_000]) == 2
    assert "nested more than" in capsys.readouterr().err


# ---- server-reported sizes, and the smaller ones ----


def test_a_server_reported_max_model_len_is_clamped() -> None:
    with (
        SimServer(SimConfig(max_model_len=10**12, model="glm-sim")) as s,
        ApiClient(s.base_url, timeout=60) as api,
    ):
        assert max_model_len(api, "glm-sim") == MAX_CONTEXT
    # the seed's 1,048,576-token station is gated at its full context, not held below it
    assert MAX_CONTEXT >= 1_048_576


def test_unicode_digits_are_not_numbers() -> None:
    for text in ("٣", "３", "³", "1_000", "𝟗"):
        with pytest.raises(ValueError):
            argtypes.parse_int(text)
        with pytest.raises(ValueError):
            argtypes.parse_float(text)
    assert argtypes.parse_int(" 42 ") == 42 and argtypes.parse_float("1e3") == 1000.0


def test_an_unbalanced_runtime_command_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="STATION_RUNTIME_CMD"):
        resolve_runtime("docker", {"STATION_RUNTIME_CMD": "docker 'x"})


@pytest.mark.parametrize(
    "argv",
    [
        ["copy", "rsync://[::1/m", "--dir", "/nonexistent/m", "--revision", "abc", "--no-membind"],
        ["pair", "wait-worker", "--url", "http://[::1", "--timeout", "5", "--interval", "1"],
        ["verify", "/nonexistent", "--expect-arch", ""],
        ["verify", "/nonexistent", "--expect-arch", ","],
    ],
    ids=["copy-ipv6", "wait-worker-ipv6", "expect-arch-empty", "expect-arch-comma"],
)
def test_malformed_inputs_are_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error" in err


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=400).map(lambda b: b.replace(b"\x00", b"\n")),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
    max_line=st.integers(min_value=1, max_value=40),
)
def test_line_splitter_cuts_lines_however_the_stream_is_split(
    data: bytes, cuts: list[int], max_line: int
) -> None:
    """The same lines (each cut at max_line) whatever the chunks; never more than max_line buffered."""
    splitter = bounded.LineSplitter(max_line)
    got: list[bytes] = []
    edges = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    for a, b in itertools.pairwise(edges):
        got += splitter.feed(data[a:b])
        assert len(splitter._buf) <= max_line
    *lines, last = data.split(b"\n")
    assert got == [line[:max_line] for line in lines]
    assert splitter.flush() == last[:max_line]
