"""Each serving fault the gates exist for, reproduced by `station simulate --gates FAULT`: exactly the cases
the fault touches fail, and each names the fault's class (and only that class).

Which cases a fault touches is read from the battery's data (what each case expects), not from the gate's
results: a zero-argument call dropped from streams must fail exactly the cases that expect a call without
arguments, and so on.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from simserver import SimServer

from vllm_station.api import ApiClient
from vllm_station.batteries import classes as C
from vllm_station.batteries.cases import ToolCase, load_tool_cases
from vllm_station.commands.gates.common import Sampling
from vllm_station.commands.gates.tools import run_battery
from vllm_station.sim.config import SimConfig

CASES = load_tool_cases()


def _has_call(c: ToolCase) -> bool:
    return bool(c.calls)


def _zero_arg(c: ToolCase) -> bool:
    return any(not e.reference_arguments() for e in c.calls)


def _with_args(c: ToolCase) -> bool:
    return any(e.reference_arguments() for e in c.calls)


def _text_answer(c: ToolCase) -> bool:
    return not c.calls or c.multi_turn


def _string_arg(c: ToolCase) -> bool:
    return any(isinstance(v, str) for e in c.calls for v in e.reference_arguments().values())


AFFECTED: dict[str, Callable[[ToolCase], bool]] = {
    C.ZERO_ARG_DROPPED: _zero_arg,
    C.EMPTY_ARGS_FLUSHED: _with_args,
    C.CUMULATIVE_DELTA: _with_args,
    C.WRONG_STREAM_NAME: _has_call,
    C.REASONING_IN_CONTENT: _text_answer,
    C.REASONING_IN_ARGUMENTS: _string_arg,
    C.LONG_CONTEXT: lambda c: False,  # the battery's prompts are short: only the needle gate sees it
}


def test_every_serving_fault_has_a_mode() -> None:
    assert set(AFFECTED) == set(C.SERVING_FAULTS)


@pytest.mark.parametrize("fault", C.SERVING_FAULTS)
def test_fault_fails_exactly_the_affected_cases(fault: str) -> None:
    want = sorted(c.id for c in CASES if AFFECTED[fault](c))
    with (
        SimServer(SimConfig(gates=fault, ttft=0, itl=0, model="glm-sim")) as sim,
        ApiClient(sim.base_url, timeout=30) as api,
    ):
        rep = run_battery(api, "glm-sim", CASES, Sampling(), quiet=True)
    failed = {r.id: r for r in rep.results if not r.passed}
    print(f"\n{fault}: {len(failed)}/{rep.cases} fail: {', '.join(sorted(failed))}")
    assert sorted(failed) == want
    for r in failed.values():
        assert r.classes == [fault], json.dumps([f.__dict__ for f in r.failures], indent=1)
        assert all(f.cls == fault for f in r.failures)
    assert rep.by_class == ({fault: len(want)} if want else {})
    # the streaming faults break only the streamed answer; the reasoning one in arguments breaks both
    variants = {f.variant for r in failed.values() for f in r.failures}
    assert variants == (
        set() if not want else {"plain", "stream"} if fault == C.REASONING_IN_ARGUMENTS else {"stream"}
    )
