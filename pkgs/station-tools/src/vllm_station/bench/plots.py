"""PNG plots (matplotlib Agg, no display needed): throughput and TTFT vs concurrency, latency CDF."""

from __future__ import annotations

from pathlib import Path

from vllm_station import output
from vllm_station.bench.report import BenchReport


def write_plots(report: BenchReport, out_dir: Path) -> list[Path]:
    """The PNGs, through `vllm_station.output` (text redacted and plain: a model name is never math)."""
    plt = output.pyplot()
    output.make_dir("--plots", out_dir)
    written: list[Path] = []
    levels = [lv for lv in report.levels if lv.ok]
    if not levels:
        return written
    title = f"{report.model} — {report.mode}"
    if report.mode == "prefill":
        x = [lv.prompt_tokens.median or 0 for lv in levels]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        a1.plot(x, [(lv.prefill_tok_s.median if lv.prefill_tok_s else 0) for lv in levels], "o-")
        a1.set_xscale("log", base=2)
        a1.set_xlabel("prompt tokens")
        a1.set_ylabel("prefill tok/s (median)")
        a2.plot(x, [lv.ttft.median or 0 for lv in levels], "o-")
        a2.set_xscale("log", base=2)
        a2.set_xlabel("prompt tokens")
        a2.set_ylabel("TTFT median (s)")
    else:
        x = [lv.concurrency for lv in levels]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        a1.plot(x, [lv.tok_s.mean or 0 for lv in levels], "o-", label="aggregate")
        lo = [lv.tok_s.min or 0 for lv in levels]
        hi = [lv.tok_s.max or 0 for lv in levels]
        a1.fill_between(x, lo, hi, alpha=0.2)
        a1b = a1.twinx()
        a1b.plot(x, [lv.user_tok_s.median or 0 for lv in levels], "s--", color="tab:orange", label="per user")
        a1b.set_ylabel("per-user tok/s (median)")
        a1b.set_ylim(bottom=0)
        a1.set_ylim(bottom=0)
        a1.set_xscale("log", base=2)
        a1.set_xlabel("concurrency")
        a1.set_ylabel("output tok/s (aggregate)")
        a2.plot(x, [lv.ttft.median or 0 for lv in levels], "o-", label="p50")
        a2.plot(x, [lv.ttft.p99 or 0 for lv in levels], "^--", label="p99")
        a2.set_xscale("log", base=2)
        a2.set_xlabel("concurrency")
        a2.set_ylabel("TTFT (s)")
        a2.legend()
    for a in (a1, a2):
        a.grid(True, alpha=0.3)
        a.set_xticks(x, [f"{v:g}" for v in x])
    fig.suptitle(title)
    output.plain_figure(fig)
    fig.tight_layout()
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
