"""`station gates agent` against `station simulate --gates reference|FAULT`, and the environment itself."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from simserver import SimServer

from vllm_station.api import ApiClient
from vllm_station.batteries import classes as C
from vllm_station.batteries.env import Environment
from vllm_station.batteries.tasks import AgentTask, load_agent_tasks
from vllm_station.cli import main
from vllm_station.commands.gates.agent import pass_hat, run_battery
from vllm_station.commands.gates.common import Sampling
from vllm_station.errors import UsageError
from vllm_station.sim.config import SimConfig

TASKS = load_agent_tasks()


def test_battery_has_fifteen_multi_step_tasks() -> None:
    assert len(TASKS) == 15  # the recipe's go-live agent battery: 15 of 15
    assert Counter(t.domain for t in TASKS) == {"calendar": 5, "inventory": 5, "files": 5}
    assert all(len(t.reference) >= 2 for t in TASKS)  # look first, then act


def run(mode: str, tasks: list[AgentTask], **kw: Any) -> Any:
    with (
        SimServer(SimConfig(gates=mode, ttft=0, itl=0, model="glm-sim")) as sim,
        ApiClient(sim.base_url, timeout=30) as api,
    ):
        return run_battery(api, "glm-sim", tasks, Sampling(), quiet=True, **kw)


def test_reference_path_passes_every_task_streamed_and_not() -> None:
    for stream in (True, False):
        rep = run("reference", TASKS, stream=stream, repeats=2)
        bad = {r.id: [f for t in r.trials for f in t.failures] for r in rep.results if r.passed != 2}
        assert bad == {} and rep.passed == rep.tasks == 15 and rep.result == "pass"
        assert rep.pass_hat == {"pass^1": 1.0, "pass^2": 1.0}
        trial = rep.results[0].trials[0]
        assert trial.turns == 3 and trial.calls == ["list_events", "move_event"]


@pytest.mark.parametrize(
    ("fault", "affected"),
    [
        (C.ZERO_ARG_DROPPED, lambda t: t.zero_arg_calls),
        (C.CUMULATIVE_DELTA, lambda t: True),
        (C.REASONING_IN_CONTENT, lambda t: True),  # every trial ends with a text answer
    ],
)
def test_serving_fault_names_its_class(fault: str, affected: Any) -> None:
    rep = run(fault, TASKS)
    failed = sorted(r.id for r in rep.results if r.passed == 0)
    assert failed == sorted(t.id for t in TASKS if affected(t))
    assert rep.by_class == {fault: len(failed)}
    # the faulty stream was compared with a non-streamed ask: the exact class, not a guess
    assert all(t.classes == [fault] for r in rep.results for t in r.trials if not t.passed)


def test_wrong_path_fails_on_state_and_names_the_difference() -> None:
    env = Environment("inventory", TASKS[10].initial)
    task = next(t for t in TASKS if t.id == "inventory-record-sale")
    env.call("adjust_stock", json.dumps({"sku": "SKU-400", "delta": -2}))
    assert env.canonical() != task.expected
    ok = Environment("inventory", task.initial)
    ok.call("get_item", json.dumps({"sku": "SKU-400"}))  # another path: look it up, then adjust
    ok.call("adjust_stock", json.dumps({"sku": "SKU-400", "delta": -3}))
    assert ok.canonical() == task.expected


def test_environment_refuses_bad_calls_with_a_result() -> None:
    env = Environment("calendar", TASKS[0].initial)
    out, ok = env.call("nope", "{}")
    assert not ok and json.loads(out) == {
        "error": "unknown tool 'nope'; the tools are get_current_date, list_events, create_event, "
        "delete_event, move_event"
    }
    out, ok = env.call("delete_event", '{"event_id": "ev-99"}')
    assert not ok and "no event with id 'ev-99'" in out
    out, ok = env.call(
        "create_event", '{"title": "x", "date": "2026-03-02", "start": "09:00", "duration_minutes": "1"}'
    )
    assert not ok and "invalid arguments for create_event" in out
    out, ok = env.call("list_events", "{bad")
    assert not ok and "not JSON" in out
    out, ok = env.call("get_current_date", '{"unit": "celsius"}')  # a made-up argument (GLM tiny model did)
    assert not ok and "get_current_date has no parameter 'unit'" in out


def test_pass_hat() -> None:
    # 2 tasks, 4 trials: one passes 4/4, one 2/4 -> pass^1 = (1 + .5)/2, pass^2 = (1 + 1/6)/2, pass^4 = .5
    assert pass_hat([4, 2], 4) == {"pass^1": 0.75, "pass^2": 0.5833, "pass^3": 0.5, "pass^4": 0.5}


def test_task_file_validation(tmp_path: Path) -> None:
    data = Path(__file__).parents[1] / "src/vllm_station/batteries/data"
    src = json.loads((data / "agent/files.json").read_text())
    task = dict(src["tasks"][0], id="mine", instruction="Delete tmp/old.log please.")
    task["reference"] = [[{"name": "delete_file", "arguments": {"path": "tmp/nope"}}]]
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({**src, "tasks": [task]}))
    with pytest.raises(
        UsageError, match=r"mine\.json: task 'mine': turn 1: the reference call delete_file fails"
    ):
        load_agent_tasks([path], builtin=False)
    task["reference"] = [[{"name": "delete_file", "arguments": {"path": "tmp/old.log"}}]]
    task["reference_answer"] = "Done."
    path.write_text(json.dumps({**src, "tasks": [task]}))
    with pytest.raises(UsageError, match="does not state the fact"):
        load_agent_tasks([path], builtin=False)
    task["answer"] = [["Done"]]
    path.write_text(json.dumps({**src, "tasks": [task]}))
    assert [t.id for t in load_agent_tasks([path], builtin=False)] == ["mine"]


def test_cli_agent_json(capsys: pytest.CaptureFixture[str]) -> None:
    with SimServer(SimConfig(gates="reference", ttft=0, itl=0, model="glm-sim")) as sim:
        code = main(["gates", "agent", "--base-url", sim.base_url, "--json", "--quiet",
                     "--task", "files-clean-tmp", "--repeats", "3"])  # fmt: skip
    out = capsys.readouterr().out
    rep = json.loads(out)
    assert code == 0 and rep["gate"] == "agent" and rep["tasks"] == 1 and rep["pass_hat"]["pass^3"] == 1.0
    assert rep["results"][0]["trials"][0]["calls"] == ["list_files", "delete_file", "delete_file"]
