"""`station golive` against `station simulate --gates …`: every gate in order, one JSON + HTML report, exit 0
only when every gate holds; a serving fault, a missed threshold or an unreachable server is a no-go."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import golive_config
import pytest
from faultserver import free_port
from simserver import SimServer

from vllm_station.batteries import classes as C
from vllm_station.cli import main
from vllm_station.sim.config import SimConfig

FAST = ["--bench-output-len", "8", "--bench-requests", "1x", "--bench-concurrency", "1,4", "--needle-lengths",
        "30%,85%", "--needle-depths", "50", "--quiet"]  # fmt: skip


def sim(mode: str) -> SimServer:
    return SimServer(SimConfig(gates=mode, ttft=0.002, itl=0.0005, max_model_len=30_000, model="glm-sim"))


def golive(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code = main(["golive", "--json", *argv])
    cap = capsys.readouterr()
    return code, json.loads(cap.out), cap.err


def test_go_against_a_correct_deployment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "golive.json"
    station = {"preset": "glm53-flash", "image": "vllm/vllm-openai@sha256:" + "a" * 64,
               "revision": "0123456789abcdef0123456789abcdef01234567",
               "vllmArgs": ["/m", "--max-model-len", "30000"]}  # fmt: skip
    with sim("reference") as s:
        golive_config.write(config, baseUrl=s.base_url, model="glm-sim", expect=["c1.tok_s>=10"],
                            station=station, outDir=str(tmp_path / "out"))  # fmt: skip
        code, rep, err = golive(capsys, "--config", str(config), *FAST)
    assert code == 0, err
    assert rep["result"] == "go" and [g["name"] for g in rep["gates"]] == [
        "smoke",
        "tools",
        "agent",
        "needle",
        "bench",
    ]
    assert all(g["held"] for g in rep["gates"])
    summaries = {g["name"]: g["summary"] for g in rep["gates"]}
    assert summaries["tools"] == "40/40 cases" and summaries["agent"].startswith("15/15 tasks")
    assert summaries["needle"].startswith("6/6 retrieved")  # 2 lengths x (single, multikey, tool)
    # what was tested: the server's own word and the station's record from the module's config
    assert rep["server"] == {"max_model_len": 30_000, "version": {"version": "station-simulate"}}
    assert rep["station"]["image"] == station["image"] and rep["station"]["vllmArgs"] == station["vllmArgs"]
    assert rep["expect"] == ["c1.tok_s>=10", "failures==0"]
    bench = next(g for g in rep["gates"] if g["name"] == "bench")["report"]
    assert [e["expr"] for e in bench["expect"]] == ["c1.tok_s>=10", "failures==0"]
    # the files: the same JSON, and one self-contained page (plots inline, nothing fetched)
    out = tmp_path / "out"
    assert json.loads((out / "golive.json").read_text())["gates"][1]["summary"] == "40/40 cases"
    page = (out / "golive.html").read_text()
    assert "station golive: GO" in page and station["revision"] in page
    assert len(re.findall(r'<img alt="[^"]*" src="data:image/png;base64,', page)) >= 2  # needle + bench plots
    assert not re.search(r'(src|href)="(https?:)?//', page)


def test_a_serving_fault_is_a_no_go_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with sim(C.ZERO_ARG_DROPPED) as s:
        code, rep, _ = golive(capsys, "--base-url", s.base_url, "--skip", "needle", *FAST)
    assert code == 1 and rep["result"] == "no-go"
    held = {g["name"]: g["held"] for g in rep["gates"]}
    assert held == {"smoke": True, "tools": False, "agent": False, "needle": None, "bench": True}
    tools = next(g for g in rep["gates"] if g["name"] == "tools")["report"]
    assert tools["by_class"] == {C.ZERO_ARG_DROPPED: 5}


def test_a_missed_threshold_is_a_no_go(capsys: pytest.CaptureFixture[str]) -> None:
    with sim("reference") as s:
        code, rep, _ = golive(capsys, "--base-url", s.base_url, "--skip", "tools,agent,needle",
                              "--expect", "c1.tok_s>=1e9", *FAST)  # fmt: skip
    assert code == 1
    bench = rep["gates"][-1]
    assert (
        bench["name"] == "bench"
        and bench["held"] is False
        and bench["summary"].startswith("not held: c1.tok_s")
    )


def test_unreachable_stops_at_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    code, rep, _ = golive(capsys, "--base-url", f"http://127.0.0.1:{free_port()}", "--timeout", "5", *FAST)
    assert code == 3 and [g["name"] for g in rep["gates"]] == ["smoke"] and rep["gates"][0]["held"] is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--base-url", "http://127.0.0.1:9", "--skip", "smoke,lint"], "--skip lint: the gates are"),
        (["--base-url", "http://127.0.0.1:9", "--expect", "c64.tok_s>=1"], "level c64 is not in this run"),
        (["--base-url", "http://127.0.0.1:9", "--expect", "speed>=1"], "unknown metric"),
        (["--config", "/nonexistent/golive.json"], "not found"),
    ],
)
def test_usage_errors_before_any_request(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["golive", *argv]) == 2
    assert message in capsys.readouterr().err
