"""PNG plots (matplotlib Agg, no display needed): throughput and TTFT vs concurrency, latency CDF.

The throughput plot draws the aggregate tok/s on the left axis and the per-user tok/s on its own right
axis, both from 0 with headroom above the highest point (or threshold) and one legend for both. Every
`--expect` threshold on a drawn metric is a dotted line, in its series' colour, at its value on the axis
of that metric (`tok_s` on the aggregate axis, `user_tok_s` on the per-user axis, `ttft` on the TTFT plot,
`prefill_tok_s` on the prefill plot), labelled with its expression in the legend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vllm_station import output
from vllm_station.commands.bench import expect as expect_mod
from vllm_station.commands.bench.report import BenchReport
from vllm_station.errors import UsageError

HEADROOM = 1.15  # the top of an axis, over the highest value drawn on it
THRESHOLD_STYLE: dict[str, Any] = {"linestyle": ":", "linewidth": 1.6}
THRESHOLD_COLOR = {  # the colour of the series the threshold is about
    "tok_s": "tab:blue",
    "user_tok_s": "tab:orange",
    "ttft": "tab:red",
    "prefill_tok_s": "tab:red",
}


def _thresholds(report: BenchReport) -> list[expect_mod.Expectation]:
    """The run's `--expect` thresholds, once each (one over every level gives a result per level)."""
    seen: dict[str, expect_mod.Expectation] = {}
    for r in report.expect:
        if r.expr not in seen:
            try:
                seen[r.expr] = expect_mod.parse_one(r.expr)
            except UsageError:  # not one of ours: draw what parses
                continue
    return list(seen.values())


def _metric_base(metric: str) -> str:
    """`tok_s_min` → `tok_s`, `ttft_p99` → `ttft`, `user_tok_s` → `user_tok_s`."""
    for base in ("user_tok_s", "prefill_tok_s", "tok_s", "ttft"):
        if metric == base or metric.startswith(base + "_"):
            return base
    return metric


def _draw_thresholds(ax: Any, exps: list[expect_mod.Expectation], base: str, top: float) -> float:
    """Dotted lines for the thresholds on `base`; returns the highest value the axis must show."""
    for e in exps:
        if _metric_base(e.metric) == base:
            ax.axhline(e.threshold, label=e.text, color=THRESHOLD_COLOR[base], **THRESHOLD_STYLE)
            top = max(top, e.threshold)
    return top


def _headroom(ax: Any, top: float) -> None:
    ax.set_ylim(0, top * HEADROOM if top > 0 else 1.0)


def throughput_figure(report: BenchReport) -> Any:
    """The throughput/TTFT figure (None without a successful level); the caller saves and closes it."""
    plt = output.pyplot()
    levels = [lv for lv in report.levels if lv.ok]
    if not levels:
        return None
    exps = _thresholds(report)
    if report.mode == "prefill":
        x = [lv.prompt_tokens.median or 0 for lv in levels]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        rates = [(lv.prefill_tok_s.median if lv.prefill_tok_s else 0) or 0 for lv in levels]
        a1.plot(x, rates, "o-", label="prefill tok/s (median)")
        _headroom(a1, _draw_thresholds(a1, exps, "prefill_tok_s", max(rates)))
        a1.set_xscale("log", base=2)
        a1.set_xlabel("prompt tokens")
        a1.set_ylabel("prefill tok/s (median)")
        a1.legend(fontsize="small", loc="lower right")
    else:
        x = [lv.concurrency for lv in levels]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        agg = [lv.tok_s.mean or 0 for lv in levels]
        hi = [lv.tok_s.max or 0 for lv in levels]
        a1.plot(x, agg, "o-", color="tab:blue", label="aggregate tok/s")
        a1.fill_between(x, [lv.tok_s.min or 0 for lv in levels], hi, color="tab:blue", alpha=0.2)
        _headroom(a1, _draw_thresholds(a1, exps, "tok_s", max(agg + hi)))
        a1b = a1.twinx()
        user = [lv.user_tok_s.median or 0 for lv in levels]
        a1b.plot(x, user, "s--", color="tab:orange", label="per-user tok/s (median)")
        _headroom(a1b, _draw_thresholds(a1b, exps, "user_tok_s", max(user)))
        a1b.set_ylabel("per-user tok/s (median)")
        a1.set_xscale("log", base=2)
        a1.set_xlabel("concurrency")
        a1.set_ylabel("output tok/s (aggregate)")
        handles, labels = a1.get_legend_handles_labels()
        h2, l2 = a1b.get_legend_handles_labels()
        a1b.legend(handles + h2, labels + l2, fontsize="small", loc="upper center")
    ttft50 = [lv.ttft.median or 0 for lv in levels]
    a2.plot(x, ttft50, "o-", label="TTFT p50")
    if report.mode != "prefill":
        ttft99 = [lv.ttft.p99 or 0 for lv in levels]
        a2.plot(x, ttft99, "^--", label="TTFT p99")
        ttft50 = ttft50 + ttft99
    _headroom(a2, _draw_thresholds(a2, exps, "ttft", max(ttft50)))
    a2.set_xscale("log", base=2)
    a2.set_xlabel("prompt tokens" if report.mode == "prefill" else "concurrency")
    a2.set_ylabel("TTFT (s)" if report.mode != "prefill" else "TTFT median (s)")
    a2.legend(fontsize="small")
    for a in (a1, a2):
        a.grid(True, alpha=0.3)
        a.set_xticks(x, [f"{v:g}" for v in x])
    fig.suptitle(f"{report.model} — {report.mode}")
    output.plain_figure(fig)
    fig.tight_layout()
    return fig


def write_plots(report: BenchReport, out_dir: Path) -> list[Path]:
    """The PNGs, through `vllm_station.output` (text redacted and plain: a model name is never math)."""
    plt = output.pyplot()
    output.make_dir("--plots", out_dir)
    written: list[Path] = []
    levels = [lv for lv in report.levels if lv.ok]
    if not levels:
        return written
    title = f"{report.model} — {report.mode}"
    fig = throughput_figure(report)
    path = out_dir / "throughput-ttft.png"
    try:
        output.save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)
    written.append(path)

    fig, (b1, b2) = plt.subplots(1, 2, figsize=(11, 4))
    for lv in levels:
        for ax, values in ((b1, lv.raw_ttft), (b2, lv.raw_e2e)):
            if values:
                s = sorted(values)
                ax.step(s, [(i + 1) / len(s) for i in range(len(s))], where="post", label=lv.name)
    b1.set_xlabel("TTFT (s)")
    b2.set_xlabel("end-to-end latency (s)")
    for ax in (b1, b2):
        ax.set_ylabel("fraction of requests")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(f"{title}: latency CDF")
    output.plain_figure(fig)
    fig.tight_layout()
    path = out_dir / "latency-cdf.png"
    try:
        output.save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)
    written.append(path)
    return written
