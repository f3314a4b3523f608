"""`--expect` gates: `[LEVEL.]METRIC OP NUMBER`, e.g. `c1.tok_s>=100`, `c32.ttft_p50<=1.5`, `failures==0`.

LEVEL is `c<N>` (sweep/burst concurrency N) or `p<N>` (prefill prompt tokens; `p8k` = 8192).
Without a level, `failures` and `ok` are totals over the run and every other metric must hold at every level.
Metrics: tok_s, tok_s_min, req_s, failures, ok, and for each of ttft, itl, itl_chunks, e2e, queue,
user_tok_s, prefill_tok_s: `<name>_mean|_p50|_p90|_p99|_max|_min` (`<name>` alone is the median).
Latencies are in seconds.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from vllm_station.commands.bench.metrics import Dist, LevelReport
from vllm_station.errors import UsageError

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}
_RE = re.compile(
    r"^\s*(?:(?P<level>[cp]\d+k?)\.)?(?P<metric>[a-z_0-9]+)\s*(?P<op>>=|<=|==|!=|>|<)\s*(?P<num>[-+0-9.eE]+)\s*$"
)
DISTS = ("ttft", "itl_chunks", "itl", "e2e", "queue", "user_tok_s", "prefill_tok_s")
STATS = {
    "mean": "mean",
    "p50": "median",
    "median": "median",
    "p90": "p90",
    "p99": "p99",
    "max": "max",
    "min": "min",
}


@dataclass
class Expectation:
    text: str
    level: str | None
    metric: str
    op: str
    threshold: float


@dataclass
class ExpectResult:
    expr: str
    level: str | None
    value: float | None
    passed: bool
    detail: str


def level_name(token: str) -> str:
    """`c32` → `c32`; `p8k` → `p8192`."""
    if token.endswith("k"):
        return f"{token[0]}{int(token[1:-1]) * 1024}"
    return token


def parse_one(text: str) -> Expectation:
    m = _RE.match(text)
    if not m:
        raise UsageError(
            f"--expect {text!r}: write [LEVEL.]METRIC OP NUMBER, e.g. c1.tok_s>=100 or failures==0"
        )
    metric = m["metric"]
    if not _known(metric):
        raise UsageError(f"--expect {text!r}: unknown metric {metric!r}; see `station bench --help`")
    try:
        num = float(m["num"])
    except ValueError:
        raise UsageError(f"--expect {text!r}: {m['num']!r} is not a number") from None
    if not math.isfinite(num):
        raise UsageError(f"--expect {text!r}: {m['num']!r} is not a finite number")
    level = level_name(m["level"]) if m["level"] else None
    return Expectation(text.strip(), level, metric, m["op"], num)


def parse(texts: list[str]) -> list[Expectation]:
    out: list[Expectation] = []
    for t in texts:
        out.extend(parse_one(part) for part in t.split(",") if part.strip())
    return out


def _known(metric: str) -> bool:
    if metric in ("tok_s", "tok_s_min", "tok_s_max", "req_s", "failures", "ok"):
        return True
    return _split(metric) is not None


def _split(metric: str) -> tuple[str, str] | None:
    for d in sorted(DISTS, key=len, reverse=True):
        if metric == d:
            return d, "median"
        if metric.startswith(d + "_") and metric[len(d) + 1 :] in STATS:
            return d, STATS[metric[len(d) + 1 :]]
    return None


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
    split = _split(metric)
    assert split is not None
    dist: Dist | None = getattr(level, split[0])
    if dist is None:
        return None
    v: float | None = getattr(dist, split[1])
    return v


def unit_of(metric: str) -> str:
    """The unit a metric's value is in, for messages: `tok/s`, `req/s`, `s`, or none for counts."""
    base = _split(metric)
    name = base[0] if base is not None else metric
    if name in ("tok_s", "tok_s_min", "tok_s_max", "user_tok_s", "prefill_tok_s"):
        return "tok/s"
    if name == "req_s":
        return "req/s"
    if name in ("failures", "ok"):
        return ""
    return "s"


def _figure(value: float, metric: str) -> str:
    """`98.36 tok/s`, `1.007 s`, `0` (a count)."""
    unit = unit_of(metric)
    return f"{value:.4g} {unit}" if unit else f"{value:g}"


def check_levels(exps: list[Expectation], names: list[str]) -> None:
    """Before running: every named level must be in the plan."""
    for e in exps:
        if e.level is not None and e.level not in names:
            raise UsageError(
                f"--expect {e.text!r}: level {e.level} is not in this run (levels: {', '.join(names)})"
            )


def evaluate(exps: list[Expectation], levels: list[LevelReport]) -> list[ExpectResult]:
    """Each threshold against what was measured. Verdicts need evidence: a threshold over the run holds
    only when some request succeeded, and one on a level only when a request of that level did
    (`failures==0` with nothing run is not held)."""
    out: list[ExpectResult] = []
    by_name = {lv.name: lv for lv in levels}
    total_ok = sum(lv.ok for lv in levels)
    for e in exps:
        op = _OPS[e.op]
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
