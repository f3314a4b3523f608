"""`--expect` gates: `[LEVEL.]METRIC OP NUMBER`, e.g. `c1.tok_s>=100`, `c32.ttft_p50<=1.5`, `failures==0`.

LEVEL is `c<N>` (sweep/burst concurrency N) or `p<N>` (prefill prompt tokens; `p8k` = 8192).
Without a level, `failures` and `ok` are totals over the run and every other metric must hold at every level.
Metrics: tok_s, tok_s_min, req_s, failures, ok, and for each of ttft, itl, itl_chunks, e2e, queue,
user_tok_s, prefill_tok_s: `<name>_mean|_p50|_p90|_p99|_max|_min` (`<name>` alone is the median).
Latencies are in seconds.
"""

# (Printed by `station bench --help`.) The grammar is a contract of its own: `station bench --expect`,
# golive's `--expect` and golive.json's `expect` are read here, before anything is sent; what a threshold
# says of a run is bench's (commands/bench/expect.py evaluates it against the levels it measured).

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from vllm_station.errors import UsageError

OPS: dict[str, Callable[[float, float], bool]] = {
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
    if not known(metric):
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


def known(metric: str) -> bool:
    if metric in ("tok_s", "tok_s_min", "tok_s_max", "req_s", "failures", "ok"):
        return True
    return split_metric(metric) is not None


def split_metric(metric: str) -> tuple[str, str] | None:
    for d in sorted(DISTS, key=len, reverse=True):
        if metric == d:
            return d, "median"
        if metric.startswith(d + "_") and metric[len(d) + 1 :] in STATS:
            return d, STATS[metric[len(d) + 1 :]]
    return None


def unit_of(metric: str) -> str:
    """The unit a metric's value is in, for messages: `tok/s`, `req/s`, `s`, or none for counts."""
    base = split_metric(metric)
    name = base[0] if base is not None else metric
    if name in ("tok_s", "tok_s_min", "tok_s_max", "user_tok_s", "prefill_tok_s"):
        return "tok/s"
    if name == "req_s":
        return "req/s"
    if name in ("failures", "ok"):
        return ""
    return "s"


def check_levels(exps: list[Expectation], names: list[str]) -> None:
    """Before running: every named level must be in the plan."""
    for e in exps:
        if e.level is not None and e.level not in names:
            raise UsageError(
                f"--expect {e.text!r}: level {e.level} is not in this run (levels: {', '.join(names)})"
            )
