"""Mutants of `vllm_station.commands.gates.agent` (scripts/bench-mutation): a flaky task (passes in some
trials, fails in others) fails the gate — pass^k over k trials, not "passed once" —, pass^k's figures exactly,
the report's counts per domain and class, and the rendered verdict."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from faultserver import FaultServer, Reply, Request, chat_completion
from simserver import SimServer

from vllm_station.api import ApiClient
from vllm_station.batteries.tasks import load_agent_tasks
from vllm_station.commands.gates.agent import AgentReport, pass_hat, render, run_battery
from vllm_station.commands.gates.common import Sampling
from vllm_station.sim.config import SimConfig

TASKS = {t.id: t for t in load_agent_tasks()}


class Flaky:
    """The reference model (`station simulate --gates reference`) behind a proxy that, in the trials `fail`
    names (1-based, counted by the requests that start a conversation), answers "Done." at once without
    calling a tool: the state stays as it was, so that trial fails on the state."""

    def __init__(self, sim: SimServer, fail: set[int]) -> None:
        self.sim, self.fail = sim, fail
        self.trial = 0
        self.lock = threading.Lock()
        self.srv = FaultServer({("POST", "/v1/chat/completions"): self._answer})
        self.srv.route("GET", "/v1/models", self._forward_get)

    def _forward_get(self, req: Request) -> Reply:
        r = httpx.get(self.sim.base_url + req.path, timeout=30)
        return Reply(status=r.status_code, json=r.json())

    def _answer(self, req: Request) -> Reply:
        body = json.loads(req.body)
        with self.lock:
            if len(body["messages"]) == 2:  # system + user: a new trial
                self.trial += 1
            trial = self.trial
        if trial in self.fail:
            return Reply(json=chat_completion(model=body["model"], content="Done."))
        r = httpx.post(self.sim.base_url + "/v1/chat/completions", json=body, timeout=30)
        return Reply(status=r.status_code, json=r.json())


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(SimConfig(gates="reference", ttft=0, itl=0, model="glm-sim")) as s:
        yield s


def battery(sim: SimServer, fail: set[int], ids: list[str], repeats: int) -> AgentReport:
    flaky = Flaky(sim, fail)
    flaky.srv.start()
    try:
        with ApiClient(flaky.srv.url, timeout=30) as api:
            return run_battery(api, "glm-sim", [TASKS[i] for i in ids], Sampling(), repeats=repeats,
                               stream=False, quiet=True)  # fmt: skip
    finally:
        flaky.srv.stop()


def test_a_flaky_task_fails_the_gate(sim: SimServer) -> None:
    """Trials 1 and 3 pass, 2 fails: passed once (or most times) is not held — pass^3 is 0."""
    rep = battery(sim, {2}, ["files-clean-tmp"], 3)
    res = rep.results[0]
    assert [t.passed for t in res.trials] == [True, False, True]
    assert res.trials[1].classes == ["state_mismatch", "answer_missing_facts"]
    assert res.passed == 2
    assert rep.passed == 0 and rep.tasks == 1
    assert rep.result == "fail"
    assert rep.pass_hat == {"pass^1": 0.6667, "pass^2": 0.3333, "pass^3": 0.0}
    assert rep.by_domain == {"files": {"tasks": 1, "passed": 0}}
    assert rep.by_class == {"answer_missing_facts": 1, "state_mismatch": 1}
    text = render(rep)
    assert text.splitlines()[0] == "FAIL  files-clean-tmp (files) 2/3"
    assert text.splitlines()[-1] == "FAIL: agent battery 0/1 (glm-sim, non-streamed, k=3)"
    assert "  pass^1 0.667, pass^2 0.333, pass^3 0.000" in text.splitlines()


def test_one_flaky_task_among_steady_ones(sim: SimServer) -> None:
    """Two tasks, 2 trials each; only the second task's second trial (trial 4) fails."""
    rep = battery(sim, {4}, ["files-clean-tmp", "inventory-record-sale"], 2)
    assert [r.passed for r in rep.results] == [2, 1]
    assert rep.passed == 1 and rep.result == "fail"
    assert rep.pass_hat == {"pass^1": 0.75, "pass^2": 0.5}
    assert rep.by_domain == {"files": {"tasks": 1, "passed": 1}, "inventory": {"tasks": 1, "passed": 0}}
    assert render(rep).splitlines()[:2] == [
        "pass  files-clean-tmp (files) 2/2",
        "FAIL  inventory-record-sale (inventory) 1/2",
    ]


def test_every_trial_passing_is_held(sim: SimServer) -> None:
    rep = battery(sim, set(), ["files-clean-tmp"], 2)
    assert rep.result == "pass" and rep.passed == 1 and rep.pass_hat == {"pass^1": 1.0, "pass^2": 1.0}
    assert render(rep).splitlines()[-1] == "PASS: agent battery 1/1 (glm-sim, non-streamed, k=2)"


def test_no_task_run_is_not_held(sim: SimServer) -> None:
    rep = battery(sim, set(), [], 1)
    assert rep.result == "fail" and rep.tasks == 0 and rep.pass_hat == {}


@pytest.mark.parametrize(
    ("successes", "n", "expected"),
    [
        ([1], 1, {"pass^1": 1.0}),
        ([0], 1, {"pass^1": 0.0}),
        ([2], 3, {"pass^1": 0.6667, "pass^2": 0.3333, "pass^3": 0.0}),
        ([3, 0], 3, {"pass^1": 0.5, "pass^2": 0.5, "pass^3": 0.5}),
        ([5, 4, 1], 5,
         {"pass^1": 0.6667, "pass^2": 0.5333, "pass^3": 0.4667, "pass^4": 0.4, "pass^5": 0.3333}),
        ([], 3, {}),
    ],
)
def test_pass_hat_exactly(successes: list[int], n: int, expected: dict[str, Any]) -> None:
    assert pass_hat(successes, n) == expected


def test_the_progress_lines_name_each_trial(sim: SimServer, capsys: pytest.CaptureFixture[str]) -> None:
    flaky = Flaky(sim, {2})
    flaky.srv.start()
    try:
        with ApiClient(flaky.srv.url, timeout=30) as api:
            capsys.readouterr()
            run_battery(api, "glm-sim", [TASKS["files-clean-tmp"]], Sampling(), repeats=3, stream=False)
    finally:
        flaky.srv.stop()
    assert capsys.readouterr().err.splitlines() == [
        "agent [1/3] files-clean-tmp #1: pass",
        "agent [2/3] files-clean-tmp #2: FAIL state_mismatch, answer_missing_facts",
        "agent [3/3] files-clean-tmp #3: pass",
    ]


def test_one_trial_has_no_trial_number(sim: SimServer, capsys: pytest.CaptureFixture[str]) -> None:
    with ApiClient(sim.base_url, timeout=30) as api:
        capsys.readouterr()
        rep = run_battery(api, "glm-sim", [TASKS["files-clean-tmp"], TASKS["inventory-record-sale"]],
                          Sampling(), repeats=1, stream=True)  # fmt: skip
    assert capsys.readouterr().err.splitlines() == [
        "agent [1/2] files-clean-tmp: pass",
        "agent [2/2] inventory-record-sale: pass",
    ]
    assert (rep.stream, rep.repeats, rep.model, rep.gate, rep.schema) == (True, 1, "glm-sim", "agent", 1)
    assert rep.base_url == sim.base_url + "/v1" and rep.max_turns == 8


def test_a_server_gone_is_a_partial_failing_report(sim: SimServer) -> None:
    """Nothing listens any more (the proxy stopped): the battery stops at once, says why, and fails."""
    flaky = Flaky(sim, set())
    flaky.srv.start()
    with ApiClient(flaky.srv.url, timeout=5) as api:
        first = run_battery(api, "glm-sim", [TASKS["files-clean-tmp"]], Sampling(), stream=False, quiet=True)
        flaky.srv.stop()
        rep = run_battery(api, "glm-sim", [TASKS["files-clean-tmp"], TASKS["inventory-record-sale"]],
                          Sampling(), stream=False, quiet=True)  # fmt: skip
    assert first.result == "pass" and first.partial is False and first.stopped is None
    assert (rep.partial, rep.result, rep.tasks, rep.results) == (True, "fail", 0, [])
    assert rep.stopped is not None and rep.stopped.startswith("server fault: ")


def test_two_trials_two_tasks_of_one_domain_and_a_quiet_battery(
    sim: SimServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two trials are numbered (#1, #2); two calendar tasks count as two in their domain; quiet prints
    nothing."""
    ids = [t.id for t in TASKS.values() if t.domain == "calendar"][:2]
    with ApiClient(sim.base_url, timeout=30) as api:
        capsys.readouterr()
        rep = run_battery(api, "glm-sim", [TASKS[i] for i in ids], Sampling(), repeats=2, stream=False)
        assert capsys.readouterr().err.splitlines() == [
            f"agent [1/4] {ids[0]} #1: pass", f"agent [2/4] {ids[0]} #2: pass",
            f"agent [3/4] {ids[1]} #1: pass", f"agent [4/4] {ids[1]} #2: pass",
        ]  # fmt: skip
        assert rep.by_domain == {"calendar": {"tasks": 2, "passed": 2}}
        run_battery(api, "glm-sim", [TASKS[ids[0]]], Sampling(), stream=False, quiet=True)
        assert capsys.readouterr().err == ""
