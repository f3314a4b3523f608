"""`station bench` end to end against `station simulate` in a subprocess (its own process: real timing).

The simulator's schedule is the ground truth: TTFT, ITL and throughput must come out within tolerance of it
at C=1 and C=64; injected failures must be counted by kind; --expect must gate the exit code; the JSON
report's keys are golden. Schedules are short (a few seconds per test) so CI on 2 cores stays fast.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from vllm_station.cli import main
from vllm_station.sim.process import SimProcess

GOLDEN_KEYS = Path(__file__).parent / "data" / "bench-report-keys.txt"
TTFT, ITL = 0.05, 0.01


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(["--ttft", str(TTFT), "--itl", str(ITL), "--model", "sim-model"]) as s:
        yield s


def _bench(tmp_path: Path, base_url: str, *args: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "report.json"
    rc = main(["bench", *args, "--base-url", base_url, "--output", str(out), "--no-progress"])
    return rc, (json.loads(out.read_text()) if out.exists() else {})


def _level(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(lv for lv in report["levels"] if lv["name"] == name)


def settled(run: Callable[[Path], None], tmp_path: Path, tries: int = 3) -> None:
    """Timing bounds on a shared 2-core machine (scripts/check runs 3 workers beside a Nix-build suite): the
    schedule must come out in one of `tries` runs. A run disturbed by other work is measured again; a
    wrong figure fails every run."""
    for n in range(tries):
        out = tmp_path / f"run{n}"
        out.mkdir()
        try:
            run(out)
            return
        except AssertionError:
            if n == tries - 1:
                raise


@pytest.mark.timing
def test_c1_metrics_match_the_schedule(sim: SimProcess, tmp_path: Path) -> None:
    def run(tmp_path: Path) -> None:
        sim.reset()
        rc, rep = _bench(tmp_path, sim.base_url, "sweep", "-c", "1", "--requests", "4", "--output-len", "20")
        assert rc == 0
        lv = _level(rep, "c1")
        assert lv["ok"] == 4 and lv["failures"] == {}
        emitted = sim.stats()["emitted"]
        # the client's TTFT is the server's emitted TTFT plus loopback transfer both ways (about 1 ms idle;
        # the bounds leave room for a busy shared 2-core machine)
        # (the simulator's median also covers the warm-up request, hence the small slack below)
        assert emitted["ttft"]["median"] - 0.002 <= lv["ttft"]["median"] <= emitted["ttft"]["median"] + 0.01
        assert TTFT <= lv["ttft"]["median"] <= TTFT + 0.015
        assert lv["itl"]["median"] == pytest.approx(ITL, abs=0.001)
        assert lv["itl_chunks"]["median"] == pytest.approx(ITL, abs=0.002)
        assert lv["e2e"]["median"] == pytest.approx(TTFT + 19 * ITL, abs=0.015)
        assert lv["user_tok_s"]["median"] == pytest.approx(1 / ITL, rel=0.05)
        assert lv["output_tokens"]["min"] == lv["output_tokens"]["max"] == 20
        assert lv["token_source"] == "usage"
        # one user, back to back: tok/s = 20 tokens per (TTFT + 19 ITL)
        assert lv["tok_s"]["mean"] == pytest.approx(20 / (TTFT + 19 * ITL), rel=0.08)
        assert lv["prompt_tokens"]["median"] == 128  # exact via the simulator's /tokenize
        assert rep["prompts"]["counted_by"] == "server /tokenize" and rep["prompts"]["exact"] is True

    settled(run, tmp_path)


@pytest.mark.timing
def test_c64_metrics_match_the_schedule(sim: SimProcess, tmp_path: Path) -> None:
    def run(tmp_path: Path) -> None:
        rc, rep = _bench(
            tmp_path,
            sim.base_url,
            "sweep",
            "-c",
            "64",
            "--warmup",
            "1x",
            "--requests",
            "1x",
            "--output-len",
            "16",
        )
        assert rc == 0
        lv = _level(rep, "c64")
        assert lv["ok"] == 64 and lv["failures"] == {}
        # 64 streams released together on a shared 2-core machine: the server parses 64 requests in turn,
        # so TTFT may exceed the schedule by some ms; the decode rhythm must hold
        assert TTFT <= lv["ttft"]["median"] <= TTFT + 0.04
        assert lv["itl"]["median"] == pytest.approx(ITL, rel=0.15)
        assert lv["output_tokens"]["min"] == lv["output_tokens"]["max"] == 16
        ideal = 64 * 16 / (TTFT + 15 * ITL)
        assert 0.7 * ideal <= lv["tok_s"]["mean"] <= 1.02 * ideal
        assert lv["queue"]["p99"] < 0.05

    settled(run, tmp_path)


def test_burst_and_repeats(sim: SimProcess, tmp_path: Path) -> None:
    rc, rep = _bench(tmp_path, sim.base_url, "burst", "-c", "1,8", "--repeats", "2", "--output-len", "8")
    assert rc == 0
    lv = _level(rep, "c8")
    assert lv["requests"] == 16 and len(lv["repeats"]) == 2
    assert all(r["requests"] == 8 and r["ok"] == 8 for r in lv["repeats"])
    assert lv["tok_s"]["min"] <= lv["tok_s"]["mean"] <= lv["tok_s"]["max"]
    assert lv["ttft"]["repeat_median_min"] <= lv["ttft"]["repeat_median_max"]


@pytest.mark.timing
def test_prefill_rate_from_prompt_tokens_over_ttft(tmp_path: Path) -> None:
    def run(tmp_path: Path) -> None:
        per_token = 2e-5
        with SimProcess(["--ttft", "0.01", "--itl", "0.001", "--prefill-per-token", str(per_token)]) as s:
            rc, rep = _bench(tmp_path, s.base_url, "prefill", "--lengths", "1k,4k", "--requests", "2")
        assert rc == 0
        for name, n in (("p1024", 1024), ("p4096", 4096)):
            lv = _level(rep, name)
            assert lv["prompt_tokens"]["min"] == lv["prompt_tokens"]["max"] == n  # exact length via /tokenize
            expected_ttft = 0.01 + per_token * n
            # + request transfer and parse; generous for a busy shared machine
            assert expected_ttft <= lv["ttft"]["median"] <= expected_ttft + 0.03
            assert lv["prefill_tok_s"]["median"] == pytest.approx(n / lv["ttft"]["median"], rel=0.02)
            assert lv["prefill_tok_s"]["median"] == pytest.approx(n / expected_ttft, rel=0.25)
            assert lv["output_tokens"]["max"] == 1

    settled(run, tmp_path)


def test_failures_counted_by_kind(tmp_path: Path) -> None:
    fail = "5xx=0.15,4xx=0.05,truncate=0.15,stall=0.1,error_event=0.1"
    with SimProcess(["--ttft", "0.005", "--itl", "0.002", "--fail", fail, "--seed", "3"]) as s:
        rc, rep = _bench(
            tmp_path, s.base_url, "sweep", "-c", "8", "--warmup", "0", "--requests", "40",
            "--output-len", "8", "--timeout", "1",
        )  # fmt: skip
        injected = s.stats()["injected"]
    assert rc == 0  # failures alone do not fail the run without --expect
    lv = _level(rep, "c8")
    mapping = {"5xx": "http_5xx", "4xx": "http_4xx", "truncate": "truncated", "stall": "timeout",
               "error_event": "stream_error"}  # fmt: skip
    assert lv["failures"] == {mapping[k]: v for k, v in injected.items()}
    assert sum(injected.values()) >= 5  # the seed injects a good mix
    assert lv["ok"] == 40 - sum(injected.values())
    assert rep["failures"] == sum(injected.values())


def test_expect_gates_exit_code(sim: SimProcess, tmp_path: Path) -> None:
    common = ["sweep", "-c", "1", "--warmup", "0", "--requests", "2", "--output-len", "4"]
    rc, rep = _bench(tmp_path, sim.base_url, *common, "--expect", "c1.tok_s>=1", "--expect", "failures==0")
    assert rc == 0 and rep["passed"] is True
    rc, rep = _bench(tmp_path, sim.base_url, *common, "--expect", "c1.ttft_p50<=0.001")
    assert rc == 1 and rep["passed"] is False
    assert rep["expect"][0]["passed"] is False and rep["expect"][0]["value"] > 0.001
    assert main(["bench", *common, "--base-url", sim.base_url, "--expect", "c8.tok_s>=1"]) == 2
    assert main(["bench", *common, "--base-url", sim.base_url, "--expect", "c1.tok_s>>1"]) == 2


def test_json_keys_are_golden_and_csv_and_plots(
    sim: SimProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv_path, plots = tmp_path / "r.csv", tmp_path / "plots"
    rc, rep = _bench(
        tmp_path, sim.base_url, "sweep", "-c", "1,2", "--warmup", "0", "--requests", "2", "--output-len", "4",
        "--scrape-metrics", "--csv", str(csv_path), "--plots", str(plots), "--expect", "failures==0",
    )  # fmt: skip
    assert rc == 0
    assert _key_paths(rep) == GOLDEN_KEYS.read_text().split()
    assert rep["schema"] == "station-bench/1"
    rows = csv_path.read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("level,mode,concurrency")
    assert {p.name for p in plots.iterdir()} == {"throughput-ttft.png", "latency-cdf.png"}
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in plots.iterdir())
    # where every file went, in one line (the operator should not have to guess)
    err = capsys.readouterr().err.splitlines()
    wrote = next(line for line in err if line.startswith("station bench: wrote "))
    for path in (tmp_path / "report.json", csv_path, *plots.iterdir()):
        assert str(path) in wrote, wrote
    server = _level(rep, "c2")["server"]
    assert server["generation_tokens_delta"] == 8 and server["running_max"] is not None


def _key_paths(obj: Any, prefix: str = "") -> list[str]:
    """Sorted key paths; lists contribute their first element as `[]`; option/plot-free values."""
    out: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{prefix}.{k}" if prefix else k
            out.append(p)
            out.extend(_key_paths(v, p))
    elif isinstance(obj, list) and obj and isinstance(obj[0], dict | list):
        out.extend(_key_paths(obj[0], prefix + "[]"))
    return sorted(set(out))


def test_unreachable_server_exits_3(tmp_path: Path) -> None:
    rc = main(["bench", "--base-url", "http://127.0.0.1:9", "-c", "1", "--requests", "1", "--no-progress"])
    assert rc == 3
    # with --model there is no discovery call: every measured request fails to connect → still exit 3
    rc = main(["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "-c", "1", "--requests", "1",
               "--warmup", "0", "--no-progress"])  # fmt: skip
    assert rc == 3


def test_no_tokenize_falls_back_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with SimProcess(["--ttft", "0", "--itl", "0.001", "--no-tokenize"]) as s:
        rc, rep = _bench(tmp_path, s.base_url, "sweep", "-c", "1", "--warmup", "0", "--requests", "1",
                         "--output-len", "2", "--input-len", "50")  # fmt: skip
    assert rc == 0
    assert any("approximate" in n for n in rep["notes"])
    assert "approximate" in capsys.readouterr().out
    assert _level(rep, "c1")["prompt_tokens"]["median"] > 50  # usage counts the template too


def test_an_unknown_model_is_a_404_as_vllm_answers_it(sim: SimProcess, tmp_path: Path) -> None:
    """The simulator serves one model; another name gets vLLM's 404, so `bench --model wrong` fails there
    as it would against the station, and the right name still runs."""
    body = {"model": "wrong", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = httpx.post(f"{sim.base_url}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 404 and "The model `wrong` does not exist." in r.text
    args = ["sweep", "-c", "1", "--warmup", "0", "--requests", "1", "--output-len", "4"]
    rc, rep = _bench(tmp_path, sim.base_url, *args, "--model", "wrong")
    assert rc != 0 and _level(rep, "c1")["ok"] == 0
    rc, rep = _bench(tmp_path, sim.base_url, *args, "--model", "sim-model")
    assert rc == 0 and _level(rep, "c1")["ok"] == 1
