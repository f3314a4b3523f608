"""`station gates needle` against `station simulate --gates reference|long_context`: exact prompt lengths from
/tokenize in few calls, retrieval per length and depth, and the long-context class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from simserver import SimServer

from vllm_station.api import ApiClient
from vllm_station.batteries import classes as C
from vllm_station.batteries.needles import find_answer, parse_depths, parse_lengths
from vllm_station.cli import main
from vllm_station.commands.gates.common import Sampling
from vllm_station.commands.gates.needle import (
    Needle,
    NeedleResult,
    PromptBuilder,
    classify,
    plan,
    run_battery,
)
from vllm_station.errors import UsageError
from vllm_station.sim.config import SimConfig

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
QUESTION = (
    "What is the special magic number for {key} mentioned in the text above? Answer with the number only."
)

MML = 20_000


def sim(mode: str) -> SimServer:
    return SimServer(SimConfig(gates=mode, ttft=0, itl=0, max_model_len=MML, model="glm-sim"))


def test_reference_retrieves_every_needle_at_exact_lengths(tmp_path: Path) -> None:
    cases = plan(parse_lengths("25%,50%,90%", MML), [0, 50, 100], ["single", "multikey", "tool"])
    assert len(cases) == 15
    with sim("reference") as s, ApiClient(s.base_url, timeout=60) as api:
        rep = run_battery(api, "glm-sim", cases, Sampling(max_tokens=64), max_model_len=MML,
                          cache=tmp_path / "cal.json", quiet=True)  # fmt: skip
        # a second run on the same server reads the calibration from the file: no calibration calls
        again = run_battery(api, "glm-sim", cases[:1], Sampling(max_tokens=64), max_model_len=MML,
                            cache=tmp_path / "cal.json", quiet=True)  # fmt: skip
    assert again.calibration["source"] == "cached" and again.tokenize_calls <= 2
    assert rep.result == "pass" and rep.passed == 15, [r.detail for r in rep.results if not r.retrieved]
    assert [r.length for r in rep.results][:5] == [5000] * 5 and {r.length for r in rep.results} == {
        5000,
        10000,
        18000,
    }
    # the server counted what /tokenize counted: exactly the target, every time
    assert all(r.exact and r.prompt_tokens == r.length for r in rep.results)
    assert rep.calibration["source"] == "measured"
    # the first prompt: calibration (2 calls, once) + measure + fix; then at most measure + fix each, and
    # another depth of a length built before reuses its fit: 1 call
    calls = [r.tokenize_calls for r in rep.results]
    assert calls[0] <= 4 and sum(calls) == rep.tokenize_calls <= 2 + 2 * len(cases)
    assert all(
        c == 1
        for r, c in zip(rep.results, calls, strict=True)
        if r.id.endswith(("d50", "d100")) and r.variant == "single"
    )
    assert all(r.ttft_s is not None and r.wall_s is not None and r.prefill_tok_s for r in rep.results)


def test_long_context_fault_fails_only_the_long_prompts() -> None:
    """Above half of max_model_len the faulty server answers wrong: those cases, and only those, fail —
    named long_context because the same variant and depth pass at a shorter length."""
    cases = plan([4000, 9000, 15000], [0, 100], ["single", "multikey", "tool"])
    with sim(C.LONG_CONTEXT) as s, ApiClient(s.base_url, timeout=60) as api:
        rep = run_battery(
            api, "glm-sim", cases, Sampling(max_tokens=64), max_model_len=MML, cache=None, quiet=True
        )
    failed = sorted(r.id for r in rep.results if not r.retrieved)
    assert failed == sorted(c.id for c in cases if c.length > MML / 2)
    assert rep.by_class == {C.LONG_CONTEXT: len(failed)}
    tool = next(r for r in rep.results if r.id == "tool-15000-d50")
    assert "expected record_number" in tool.detail


def test_classify() -> None:
    def res(length: int, ok: bool, depth: int = 50) -> NeedleResult:
        cls = None if ok else C.NEEDLE_MISSED
        return NeedleResult(f"single-{length}-d{depth}", "single", length, depth, ok, cls, "", length, True,
                            1, 0.0, 1.0, 1.0, 1.0)  # fmt: skip

    rs = [res(1000, True), res(8000, False), res(8000, False, depth=0)]
    classify(rs)
    assert [r.cls for r in rs] == [
        None,
        C.LONG_CONTEXT,
        C.NEEDLE_MISSED,
    ]  # depth 0 never passed: a plain miss


def test_find_answer_and_parsers() -> None:
    text = "Filler. The special magic number for amber-river is 1234567. More.\n\n" + QUESTION.format(
        key="amber-river"
    )
    assert find_answer(text) == ("amber-river", "1234567", False)
    assert find_answer("no question here") is None
    assert parse_lengths("90%,8k,1000,1000", 10_000) == [1000, 8192, 9000]
    for bad in ("110%", "x", "10"):
        with pytest.raises(UsageError):
            parse_lengths(bad, 10_000)
    assert parse_depths("100,0,50%") == [0, 50, 100]
    with pytest.raises(UsageError, match="between 0 and 100"):
        parse_depths("101")


def test_builder_exact_and_counted() -> None:
    with sim("reference") as s, ApiClient(s.base_url, timeout=60) as api:
        b = PromptBuilder(api, "glm-sim", None)
        messages, n = b.build(
            12_345, [Needle("amber-river", "7654321")], 0.3, QUESTION.format(key="amber-river")
        )
        assert n == 12_345 and b.count(messages) == 12_345 and b.calls <= 5
        text = messages[0]["content"]
        assert find_answer(text) == ("amber-river", "7654321", False)
        assert 0.25 < text.index("7654321") / len(text) < 0.35  # at the depth asked for


def test_cli_needle_json_and_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with sim("reference") as s:
        code = main(["gates", "needle", "--base-url", s.base_url, "--json", "--quiet", "--lengths", "2000",
                     "--depths", "50", "--variants", "single", "--no-calibration-cache"])  # fmt: skip
        out = json.loads(capsys.readouterr().out)
        assert code == 0 and out["gate"] == "needle" and out["max_model_len"] == MML and out["passed"] == 1
        assert out["record"] == {"prompt_tokens": 968377, "wall_s": [33.5, 37.0]}
        assert main(["gates", "needle", "--base-url", s.base_url, "--variants", "haystack"]) == 2
        assert "--variants 'haystack'" in capsys.readouterr().err
        assert main(["gates", "needle", "--base-url", s.base_url, "--lengths", "30000"]) == 2
        assert "below max_model_len 20000" in capsys.readouterr().err


def test_a_failed_request_is_reported_as_such_not_as_a_miss(capsys: pytest.CaptureFixture[str]) -> None:
    """HTTP 500 on every chat: the progress says "request failed" with the reason, never MISSED (the model
    was never asked), and the class is request_failed."""
    cases = plan([4000], [50], ["single"])
    config = SimConfig(gates="reference", ttft=0, itl=0, max_model_len=MML, model="glm-sim")
    config.fail = {"5xx": 1.0}
    with SimServer(config) as s, ApiClient(s.base_url, timeout=60) as api:
        rep = run_battery(api, "glm-sim", cases, Sampling(max_tokens=64), max_model_len=MML, cache=None)
    err = capsys.readouterr().err
    assert rep.by_class == {C.REQUEST_FAILED: 1} and not rep.results[0].retrieved
    assert "single-4000-d50: request failed: " in err and "HTTP 500" in err, err
    assert "MISSED" not in err
