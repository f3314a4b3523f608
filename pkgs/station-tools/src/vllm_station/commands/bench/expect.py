"""`station bench --expect`: the thresholds (their grammar is the layer `vllm_station.thresholds`)
evaluated against the levels a run measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_station.commands.bench.metrics import Dist, LevelReport
from vllm_station.thresholds import (
    OPS,
    Expectation,
    check_levels,
    parse,
    parse_one,
    split_metric,
    unit_of,
)

__all__ = ["ExpectResult", "Expectation", "check_levels", "evaluate", "parse", "parse_one", "value_of"]


@dataclass
class ExpectResult:
    expr: str
    level: str | None
    value: float | None
    passed: bool
    detail: str


def value_of(level: LevelReport, metric: str) -> float | None:
    if metric == "tok_s":
        return level.tok_s.mean
    if metric == "tok_s_min":
        return level.tok_s.min
    if metric == "tok_s_max":
        return level.tok_s.max
    if metric == "req_s":
        return level.req_s.mean
    if metric == "failures":
        return float(level.n_failed)
    if metric == "ok":
        return float(level.ok)
    parts = split_metric(metric)
    assert parts is not None
    dist: Dist | None = getattr(level, parts[0])
    if dist is None:
        return None
    v: float | None = getattr(dist, parts[1])
    return v


def _figure(value: float, metric: str) -> str:
    """`98.36 tok/s`, `1.007 s`, `0` (a count)."""
    unit = unit_of(metric)
    return f"{value:.4g} {unit}" if unit else f"{value:g}"


def evaluate(exps: list[Expectation], levels: list[LevelReport]) -> list[ExpectResult]:
    """Each threshold against what was measured. Verdicts need evidence: a threshold over the run holds
    only when some request succeeded, and one on a level only when a request of that level did
    (`failures==0` with nothing run is not held)."""
    out: list[ExpectResult] = []
    by_name = {lv.name: lv for lv in levels}
    total_ok = sum(lv.ok for lv in levels)
    for e in exps:
        op = OPS[e.op]
        if e.level is None and e.metric in ("failures", "ok"):
            total = float(sum(value_of(lv, e.metric) or 0.0 for lv in levels))
            if total_ok == 0:
                out.append(ExpectResult(e.text, None, total, False,
                                        f"{e.metric} = {total:g} over the run, but no request succeeded: "
                                        "nothing was measured"))  # fmt: skip
                continue
            ok = op(total, e.threshold)
            detail = f"{e.metric} = {total:g} over the run, needs {e.op} {e.threshold:g}"
            out.append(ExpectResult(e.text, None, total, ok, detail))
            continue
        targets = [by_name[e.level]] if e.level is not None else levels
        if not targets:
            out.append(ExpectResult(e.text, None, None, False, f"{e.metric}: no level ran, nothing measured"))
        for lv in targets:
            if lv.ok == 0:
                out.append(ExpectResult(e.text, lv.name, None, False, f"{lv.name}: {e.metric} not measured"))
                continue
            v = value_of(lv, e.metric)
            if v is None:
                out.append(ExpectResult(e.text, lv.name, None, False, f"{lv.name}: {e.metric} not measured"))
                continue
            ok = op(v, e.threshold)
            out.append(
                ExpectResult(
                    e.text,
                    lv.name,
                    v,
                    ok,
                    f"{lv.name}.{e.metric} = {_figure(v, e.metric)}, needs {e.op} {e.threshold:g}",
                )
            )
    return out
