"""`station probe`: its figures against a server of known timing (`station simulate`), its failures, the
textfile it leaves for node_exporter, and the real vLLM."""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import VllmServer, free_port
from simserver import SimServer

from vllm_station import cli, textfile
from vllm_station.api import ApiClient
from vllm_station.commands import probe
from vllm_station.errors import EXIT_FAIL, EXIT_OK, EXIT_UNREACHABLE
from vllm_station.sim.config import SimConfig

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
TEXTFILE = "station-probe.prom"

TTFT, ITL = 0.05, 0.01  # the simulator's schedule: 100 tok/s for one user


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    # eos_after: without vLLM's ignore_eos the answer would stop after 5 tokens
    with SimServer(SimConfig(model="sim", ttft=TTFT, itl=ITL, eos_after=5)) as s:
        yield s


@pytest.fixture
def station(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """`station probe ARGS` in this process (cli.main: the exit code, stdout and stderr), without a key."""
    monkeypatch.delenv("STATION_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()
        code = cli.main(["probe", *args])
        out = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out.out, out.err)

    return run


@pytest.mark.timing
def test_figures_match_the_servers_schedule(sim: SimServer) -> None:
    with ApiClient(sim.base_url, timeout=30) as api:
        rep = probe.run_probe(api, None, 32, "auto")
    assert rep.exit_code == EXIT_OK and rep.ok, rep
    assert rep.model == "sim"
    assert rep.completion_tokens == 32, "a fixed length: ignore_eos overrides the server's EOS"
    assert rep.ttft_s is not None and TTFT * 0.8 <= rep.ttft_s <= TTFT + 0.05
    assert rep.itl_s is not None and ITL * 0.8 <= rep.itl_s <= ITL * 1.5
    assert rep.tokens_per_second is not None and 1 / ITL / 1.5 <= rep.tokens_per_second <= 1 / ITL / 0.8
    assert rep.request_tokens_per_second is not None and rep.request_tokens_per_second < rep.tokens_per_second
    assert rep.tool_call == "pass" and "get_weather" in rep.tool_call_reason


def test_a_failing_generation_exports_failure_and_no_rate(
    tmp_path: Path, station: Callable[..., Any]
) -> None:
    with SimServer(SimConfig(model="sim", ttft=0.0, itl=0.0, fail={"5xx": 1.0})) as bad:
        out = station("--base-url", bad.base_url, "--textfile-dir", str(tmp_path), "--json")
    assert out.returncode == EXIT_FAIL, out.stderr
    rep = json.loads(out.stdout)
    assert rep["ok"] is False and "HTTP 500" in rep["reason"] and rep["tool_call"] == "fail"
    got = textfile.read(tmp_path / TEXTFILE)
    assert got["station_probe_success"] == 0 and got["station_probe_tool_call_success"] == 0
    assert math.isnan(got["station_probe_tokens_per_second"]) and math.isnan(
        got["station_probe_ttft_seconds"]
    )


def test_unreachable_is_exit_3_and_still_exported(tmp_path: Path, station: Callable[..., Any]) -> None:
    out = station("--base-url", f"http://127.0.0.1:{free_port()}", "--textfile-dir", str(tmp_path))
    assert out.returncode == EXIT_UNREACHABLE, out.stderr
    assert "connection refused" in out.stderr
    got = textfile.read(tmp_path / TEXTFILE)
    assert got["station_probe_success"] == 0 and math.isnan(got["station_probe_tool_call_success"])


def test_cli_writes_the_textfile_and_the_table(
    sim: SimServer, tmp_path: Path, station: Callable[..., Any]
) -> None:
    out = station("--base-url", sim.base_url, "--max-tokens", "16", "--textfile-dir", str(tmp_path))
    assert out.returncode == EXIT_OK, out.stderr
    assert "generation PASS: 16 tokens" in out.stdout and "tool call PASS" in out.stdout
    got = textfile.read(tmp_path / TEXTFILE)
    assert got["station_probe_success"] == 1 and got["station_probe_completion_tokens"] == 16
    assert got["station_probe_max_tokens"] == 16 and got["station_probe_tool_call_success"] == 1
    # the exported rate is the one the table printed (how close it is to the schedule is the timed test's)
    printed = re.search(r"16 tokens in [0-9.]+ s: ([0-9.]+) tok/s decode", out.stdout)
    assert printed, out.stdout
    assert got["station_probe_tokens_per_second"] == float(printed.group(1)) > 0
    assert got["station_probe_ttft_seconds"] >= TTFT, "a first token cannot come before the server sends it"
    assert [p.name for p in tmp_path.iterdir()] == [TEXTFILE]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--max-tokens", "0"], "--max-tokens: must be a whole number from 1 to"),
        (["--timeout", "-1"], "--timeout"),
        (["--textfile-dir", "/nonexistent/dir"], "not a directory"),
    ],
)
def test_bad_arguments_exit_2(args: list[str], match: str, station: Callable[..., Any]) -> None:
    out = station("--base-url", "http://127.0.0.1:1", *args)
    assert out.returncode == 2 and match in out.stderr and "Traceback" not in out.stderr


def test_real_vllm_probe_passes_with_a_fixed_length_and_a_tool_call(
    tools_server: VllmServer, tmp_path: Path
) -> None:
    with ApiClient(tools_server.base_url, timeout=120) as api:
        rep = probe.run_probe(api, tools_server.served_name, 16, "auto")
    assert rep.exit_code == EXIT_OK, rep
    assert rep.completion_tokens == 16, "vLLM honours ignore_eos"
    assert rep.tokens_per_second is not None and rep.tokens_per_second > 0
    assert rep.ttft_s is not None and 0 < rep.ttft_s < 60
    assert rep.tool_call in ("pass", "warn"), rep.tool_call_reason
    print(f"probe figure (real vLLM CPU, tiny model): {rep.reason}")
