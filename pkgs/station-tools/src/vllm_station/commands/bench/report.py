"""The bench report: one dataclass, rendered as a table, JSON (stable keys) or CSV (one row per level)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from dataclasses import dataclass, field
from typing import Any

from vllm_station.commands.bench.expect import ExpectResult
from vllm_station.commands.bench.metrics import Dist, LevelReport
from vllm_station.report import table

SCHEMA = "station-bench/1"


@dataclass
class BenchReport:
    mode: str
    base_url: str
    model: str
    started_at: str
    finished_at: str
    options: dict[str, Any]
    client: dict[str, Any]
    prompts: dict[str, Any]
    levels: list[LevelReport]
    failures: int
    expect: list[ExpectResult]
    passed: bool
    partial: bool = False  # stopped early (Ctrl-C): `levels` holds what finished
    interrupted_during: str | None = None  # e.g. "c32 repeat 2/3"
    notes: list[str] = field(default_factory=list)
    schema: str = SCHEMA


def to_dict(obj: Any) -> Any:
    """Dataclasses to JSON types, leaving out fields marked `metadata={"json": False}`; NaN → null."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: to_dict(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if f.metadata.get("json", True)
        }
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


def to_json(report: BenchReport) -> str:
    d = to_dict(report)
    d = {"schema": d.pop("schema"), **d}
    return json.dumps(d, indent=2) + "\n"


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000.0


def _range(lo: float | None, hi: float | None, scale: float = 1.0, digits: int = 0) -> str:
    if lo is None or hi is None:
        return "-"
    if abs(hi - lo) * scale < 10 ** (-digits) / 2:
        return f"{lo * scale:,.{digits}f}"
    return f"{lo * scale:,.{digits}f}–{hi * scale:,.{digits}f}"


def render_table(report: BenchReport) -> str:
    prefill = report.mode == "prefill"
    headers = [
        "level",
        "C",
        "ok",
        "fail",
        "tok/s",
        "tok/s min–max",
        "user tok/s",
        "req/s",
        "TTFT p50 ms",
        "p90",
        "p99",
        "ITL p50 ms",
        "p99",
        "E2E p50 s",
        "queue p99 ms",
    ]
    if prefill:
        headers = [
            "level",
            "prompt tok",
            "ok",
            "fail",
            "prefill tok/s",
            "min–max",
            "TTFT p50 ms",
            "p90",
            "p99",
            "E2E p50 s",
        ]
    rows: list[list[Any]] = []
    for lv in report.levels:
        if prefill:
            pf = lv.prefill_tok_s or Dist()
            rows.append(
                [
                    lv.name,
                    lv.prompt_tokens.median,
                    lv.ok,
                    lv.n_failed,
                    pf.median,
                    _range(pf.min, pf.max),
                    _ms(lv.ttft.median),
                    _ms(lv.ttft.p90),
                    _ms(lv.ttft.p99),
                    lv.e2e.median,
                ]
            )
        else:
            rows.append(
                [
                    lv.name,
                    lv.concurrency,
                    lv.ok,
                    lv.n_failed,
                    lv.tok_s.mean,
                    _range(lv.tok_s.min, lv.tok_s.max),
                    lv.user_tok_s.median,
                    lv.req_s.mean,
                    _ms(lv.ttft.median),
                    _ms(lv.ttft.p90),
                    _ms(lv.ttft.p99),
                    _ms(lv.itl.median),
                    _ms(lv.itl.p99),
                    lv.e2e.median,
                    _ms(lv.queue.p99),
                ]
            )
    out = [table(headers, rows)]
    fails = [
        f"  {lv.name}: " + ", ".join(f"{k} {v}" for k, v in sorted(lv.failures.items()))
        for lv in report.levels
        if lv.failures
    ]
    if fails:
        out.append("failures by kind:")
        out.extend(fails)
        for lv in report.levels:
            out.extend(f"    e.g. {ex}" for ex in lv.failure_examples[:2])
    servers = [lv for lv in report.levels if lv.server]
    if servers:
        out.append("server /metrics (max during level; deltas):")
        for lv in servers:
            s = lv.server or {}
            out.append(
                f"  {lv.name}: running≤{s.get('running_max')} waiting≤{s.get('waiting_max')} "
                f"kv≤{s.get('kv_cache_usage_max')} preemptions+{s.get('preemptions_delta')} "
                f"server TTFT mean {s.get('server_ttft_mean')}"
            )
    for note in report.notes:
        out.append(f"note: {note}")
    if report.expect:
        out.append("expectations:")
        out.extend(f"  {'PASS' if e.passed else 'FAIL'} {e.expr}: {e.detail}" for e in report.expect)
    return "\n".join(out)


CSV_COLUMNS = [
    "level",
    "mode",
    "concurrency",
    "prompt_tokens_target",
    "output_tokens_target",
    "requests",
    "ok",
    "failed",
    "failures",
    "token_source",
    "tok_s",
    "tok_s_min",
    "tok_s_max",
    "req_s",
    "user_tok_s_median",
    "ttft_mean",
    "ttft_median",
    "ttft_p90",
    "ttft_p99",
    "itl_mean",
    "itl_median",
    "itl_p90",
    "itl_p99",
    "itl_chunks_median",
    "itl_chunks_p99",
    "e2e_mean",
    "e2e_median",
    "e2e_p90",
    "e2e_p99",
    "queue_p99",
    "prompt_tokens_median",
    "output_tokens_median",
    "prefill_tok_s_median",
]


def to_csv(report: BenchReport) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for lv in report.levels:
        pf = lv.prefill_tok_s
        w.writerow(
            [
                lv.name,
                lv.mode,
                lv.concurrency,
                lv.prompt_tokens_target,
                lv.output_tokens_target,
                lv.requests,
                lv.ok,
                lv.n_failed,
                ";".join(f"{k}={v}" for k, v in sorted(lv.failures.items())),
                lv.token_source,
                lv.tok_s.mean,
                lv.tok_s.min,
                lv.tok_s.max,
                lv.req_s.mean,
                lv.user_tok_s.median,
                lv.ttft.mean,
                lv.ttft.median,
                lv.ttft.p90,
                lv.ttft.p99,
                lv.itl.mean,
                lv.itl.median,
                lv.itl.p90,
                lv.itl.p99,
                lv.itl_chunks.median,
                lv.itl_chunks.p99,
                lv.e2e.mean,
                lv.e2e.median,
                lv.e2e.p90,
                lv.e2e.p99,
                lv.queue.p99,
                lv.prompt_tokens.median,
                lv.output_tokens.median,
                pf.median if pf else None,
            ]
        )
    return buf.getvalue()
