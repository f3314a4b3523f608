"""Mutants of `vllm_station.commands.golive.cli` (scripts/bench-mutation): every gate skipped is NO-GO
(nothing was tested), one held gate alone is GO, the plan's defaults and the always-kept expectation, the
rendered verdict, and the exit codes as literals."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import golive_config
import pytest
from simserver import SimServer

from vllm_station.cli import main
from vllm_station.commands.golive import cli as golive
from vllm_station.commands.golive.cli import GateOutcome, GoliveReport, make_plan, render
from vllm_station.errors import UsageError
from vllm_station.sim.config import SimConfig


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(SimConfig(gates="reference", ttft=0.002, itl=0.0005, max_model_len=30_000,
                             model="glm-sim")) as s:  # fmt: skip
        yield s


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["golive", "--json", "--quiet", *argv])
    return code, json.loads(capsys.readouterr().out)


def test_every_gate_skipped_is_no_go(sim: SimServer, capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing was tested: no gate held, none failed — that is not a go-live."""
    code, rep = run(capsys, "--base-url", sim.base_url, "--skip", "smoke,tools,agent,needle,bench")
    assert code == 1
    assert rep["result"] == "no-go" and rep["exit_code"] == 1
    assert [(g["name"], g["held"], g["summary"]) for g in rep["gates"]] == [
        ("smoke", None, "skipped"),
        ("tools", None, "skipped"),
        ("agent", None, "skipped"),
        ("needle", None, "skipped"),
        ("bench", None, "skipped"),
    ]
    assert rep["partial"] is False and rep["stopped"] is None


def test_every_gate_skipped_from_the_config_is_no_go(
    sim: SimServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "golive.json"
    golive_config.write(config, baseUrl=sim.base_url, skip=["smoke", "tools", "agent", "needle", "bench"])
    code, rep = run(capsys, "--config", str(config))
    assert code == 1 and rep["result"] == "no-go"
    assert {g["held"] for g in rep["gates"]} == {None}


def test_one_held_gate_and_the_rest_skipped_is_go(sim: SimServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, rep = run(capsys, "--base-url", sim.base_url, "--skip", " tools, agent ,needle,bench ")
    assert code == 0 and rep["result"] == "go" and rep["exit_code"] == 0
    assert [(g["name"], g["held"]) for g in rep["gates"]] == [
        ("smoke", True), ("tools", None), ("agent", None), ("needle", None), ("bench", None)
    ]  # fmt: skip
    assert rep["server"]["max_model_len"] == 30_000 and rep["model"] == "glm-sim"


def plan_of(*argv: str, cfg: dict[str, Any] | None = None) -> golive.Plan:
    parser = argparse.ArgumentParser()
    golive.configure(parser)
    return make_plan(parser.parse_args(["--base-url", "http://127.0.0.1:9", *argv]), cfg or {})


def test_plan_defaults() -> None:
    p = plan_of("--skip", "bench")
    assert p.expect == ["failures==0"]
    assert p.skip == {"bench"}
    assert (p.agent_repeats, p.needle_lengths, p.needle_depths) == (1, "25%,50%,90%", "0,50,100")
    assert (p.bench_levels, p.bench_requests, p.bench_output_len) == ([1, 32], "2x", 256)
    assert (p.timeout, p.model, p.out, p.needle_cache, p.station) == (None, None, None, None, {})


def test_plan_keeps_failures_zero_once_and_after_the_given_ones() -> None:
    assert plan_of("--expect", "c1.tok_s>=10").expect == ["c1.tok_s>=10", "failures==0"]
    assert plan_of("--expect", "failures==0", "--expect", "c1.tok_s>=10").expect == [
        "failures==0",
        "c1.tok_s>=10",
    ]
    cfg = golive_config.config(expect=["c32.tok_s>=1"])
    got = plan_of("--expect", "c1.tok_s>=10", cfg=cfg).expect
    assert got == ["c32.tok_s>=1", "c1.tok_s>=10", "failures==0"]


def test_command_line_overrides_the_config() -> None:
    cfg = golive_config.config(skip=["needle"], agent={"repeats": 3}, bench={"concurrency": [1, 8]},
                               timeout=900)  # fmt: skip
    p = plan_of(cfg=cfg)
    assert (p.skip, p.agent_repeats, p.bench_levels, p.timeout) == ({"needle"}, 3, [1, 8], 900)
    p = plan_of("--skip", "tools", "--agent-repeats", "2", "--bench-concurrency", "1,4", "--timeout", "60",
                cfg=cfg)  # fmt: skip
    assert (p.skip, p.agent_repeats, p.bench_levels, p.timeout) == ({"tools"}, 2, [1, 4], 60)


def test_unknown_gate_names_every_gate() -> None:
    with pytest.raises(UsageError) as err:
        plan_of("--skip", "smoke,lint,x")
    assert str(err.value) == "--skip lint, x: the gates are smoke, tools, agent, needle, bench"


def test_the_walk_is_each_gates_own_plan_in_order() -> None:
    """golive's plan becomes one plan per gate (each verb's own type): the order, and what each is handed."""
    plans = golive.gate_plans(plan_of("--timeout", "30", "--agent-repeats", "2", "--needle-lengths", "10%",
                                      "--bench-concurrency", "1,4", "--expect", "c4.tok_s>=5"))  # fmt: skip
    assert [p.gate for p in plans] == ["smoke", "tools", "agent", "needle", "bench"]
    _, tools, agent, needle, bench = plans
    assert [p.timeout for p in plans] == [30, 30, 30, 30, 30]
    assert (agent.repeats, needle.lengths, needle.depths) == (2, "10%", "0,50,100")
    assert len(tools.cases) == 40 and agent.stream is True
    assert (bench.levels, bench.requests, bench.output_len) == ((1, 4), "2x", 256)
    assert bench.expect == ("c4.tok_s>=5", "failures==0")
    # no --timeout: smoke's own 120 s, 600 s for the rest
    assert [p.timeout for p in golive.gate_plans(plan_of())] == [120, 600, 600, 600, 600]


def report(result: str, code: int, gates: list[GateOutcome], stopped: str | None = None) -> GoliveReport:
    return GoliveReport(schema=1, started_at="s", finished_at="f", base_url="http://h:8000/v1", model="m",
                        server={"version": {"version": "0.32.0"}}, station={}, expect=[], result=result,
                        exit_code=code, gates=gates, partial=stopped is not None,
                        stopped=stopped)  # fmt: skip


def test_render_names_each_gate_and_the_verdict() -> None:
    text = render(report("no-go", 1, [GateOutcome("smoke", True, "5 pass", 1.26),
                                      GateOutcome("tools", False, "39/40 cases", 10.04),
                                      GateOutcome("agent", None, "skipped", 0.0)]))  # fmt: skip
    assert text == (
        "station golive  http://h:8000/v1  model=m  vLLM 0.32.0\n"
        "gate   result   seconds  summary\n"
        "-----  -------  -------  -----------\n"
        "smoke  held        1.30  5 pass\n"
        "tools  FAILED     10.00  39/40 cases\n"
        "agent  skipped      0.0  skipped\n"
        "NO-GO (exit 1)"
    )
    go = render(report("go", 0, [GateOutcome("smoke", True, "5 pass", 1.0)]))
    assert go.splitlines()[-1] == "GO (exit 0)" and "PARTIAL" not in go
    partial = render(report("no-go", 130, [], stopped="interrupted (Ctrl-C) during tools"))
    assert partial.splitlines()[-2:] == ["PARTIAL: interrupted (Ctrl-C) during tools", "NO-GO (exit 130)"]


def test_every_config_key_reaches_the_plan(tmp_path: Path) -> None:
    cfg = golive_config.config(
        model="glm-x", timeout=120, needle={"lengths": "10%,20%", "depths": "0,100",
                                            "calibrationCache": str(tmp_path / "cal.json")},
        bench={"requests": "3x", "outputLen": 64, "concurrency": [1, 2]},
    )  # fmt: skip
    p = plan_of(cfg=cfg)
    assert (p.model, p.timeout, p.needle_lengths, p.needle_depths) == ("glm-x", 120, "10%,20%", "0,100")
    assert (p.bench_requests, p.bench_output_len, p.bench_levels) == ("3x", 64, [1, 2])
    assert p.needle_cache == tmp_path / "cal.json"
    p = plan_of("--model", "m2", "--bench-requests", "5", "--bench-output-len", "8", cfg=cfg)
    assert (p.model, p.bench_requests, p.bench_output_len) == ("m2", "5", 8)


def test_a_calibration_cache_that_is_a_directory_names_the_key(tmp_path: Path) -> None:
    cfg = golive_config.config(needle={"calibrationCache": str(tmp_path)})
    parser = argparse.ArgumentParser()
    golive.configure(parser)
    args = parser.parse_args(["--base-url", "http://127.0.0.1:9", "--config", str(tmp_path / "golive.json")])
    with pytest.raises(UsageError) as err:
        make_plan(args, cfg)
    where = f"--config {tmp_path / 'golive.json'}: needle.calibrationCache {tmp_path}: "
    assert str(err.value).startswith(where)

