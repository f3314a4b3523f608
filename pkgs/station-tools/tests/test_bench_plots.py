"""bench's plots, read back from the figure matplotlib (Agg) drew: each series on its own axis with headroom
and a legend, and every `--expect` threshold a line at its value on the axis of its metric."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vllm_station.commands.bench import expect as expect_mod
from vllm_station.commands.bench.metrics import Dist, LevelReport, Span
from vllm_station.commands.bench.plots import throughput_figure, write_plots
from vllm_station.commands.bench.report import BenchReport

# (concurrency, aggregate tok/s, per-user tok/s, TTFT p50, TTFT p99): the shape of the seed's record
FIGURES = [(1, 141.0, 145.9, 0.061, 0.07), (32, 1355.0, 57.0, 1.0, 1.9), (256, 2517.0, 16.4, 7.8, 15.5)]


def _level(c: int, agg: float, user: float, p50: float, p99: float) -> LevelReport:
    d = Dist(n=c, median=p50, p99=p99, mean=p50, min=p50, max=p99)
    return LevelReport(
        name=f"c{c}", mode="burst", concurrency=c, prompt_tokens_target=128, output_tokens_target=256,
        requests=c, ok=c, failures={}, failure_examples=[], token_source="usage",
        tok_s=Span(agg, agg * 0.98, agg * 1.01), req_s=Span(1.0, 1.0, 1.0), ttft=d, itl=Dist(),
        itl_chunks=Dist(), e2e=Dist(), user_tok_s=Dist(n=c, median=user), queue=Dist(),
        prompt_tokens=Dist(n=c, median=128), output_tokens=Dist(n=c, median=256), prefill_tok_s=None,
        repeats=[], raw_ttft=[p50, p99], raw_e2e=[p50 + 1, p99 + 2],
    )  # fmt: skip


def _report(*exprs: str) -> BenchReport:
    levels = [_level(*f) for f in FIGURES]
    exps = expect_mod.parse(list(exprs))
    return BenchReport(
        mode="burst", base_url="http://127.0.0.1:8888", model="glm-5.3-flash", started_at="", finished_at="",
        options={}, client={}, prompts={}, levels=levels, failures=0,
        expect=expect_mod.evaluate(exps, levels), passed=True,
    )  # fmt: skip


def _axis(fig: Any, ylabel: str) -> Any:
    return next(a for a in fig.axes if a.get_ylabel() == ylabel)


def _hlines(ax: Any) -> dict[str, float]:
    """Horizontal lines drawn on `ax`, by label: their y."""
    out = {}
    for line in ax.get_lines():
        y = list(line.get_ydata())
        if len(set(y)) == 1 and not line.get_label().startswith("_"):
            out[line.get_label()] = float(y[0])
    return out


@pytest.fixture
def fig() -> Any:
    from vllm_station import output

    f = throughput_figure(
        _report("c1.tok_s>=100", "user_tok_s_min>=10", "c32.ttft_p50<=1.5", "failures==0", "c256.tok_s>=3000")
    )
    yield f
    output.pyplot().close(f)


def test_per_user_rate_has_its_own_axis_with_headroom(fig: Any) -> None:
    user = _axis(fig, "per-user tok/s (median)")
    agg = _axis(fig, "output tok/s (aggregate)")
    assert user is not agg and user.get_shared_x_axes().joined(user, agg)
    lo, hi = user.get_ylim()
    assert lo == 0 and hi >= 145.9 * 1.1  # the 1-user point is not on the top edge
    (series,) = [ln for ln in user.get_lines() if ln.get_label() == "per-user tok/s (median)"]
    assert list(series.get_ydata()) == [145.9, 57.0, 16.4]


def test_one_legend_names_both_series_and_the_thresholds(fig: Any) -> None:
    legends = [a.get_legend() for a in fig.axes if a.get_legend() is not None]
    texts = {t.get_text() for lg in legends for t in lg.get_texts()}
    assert {"aggregate tok/s", "per-user tok/s (median)", "TTFT p50", "TTFT p99"} <= texts
    assert {"c1.tok_s>=100", "user_tok_s_min>=10", "c32.ttft_p50<=1.5", "c256.tok_s>=3000"} <= texts
    assert "failures==0" not in texts  # not a drawn metric


def test_thresholds_are_lines_at_their_value_on_their_axis(fig: Any) -> None:
    agg = _axis(fig, "output tok/s (aggregate)")
    assert _hlines(agg) == {"c1.tok_s>=100": 100.0, "c256.tok_s>=3000": 3000.0}
    assert agg.get_ylim()[1] > 3000  # a threshold above the data is inside the plot
    assert _hlines(_axis(fig, "per-user tok/s (median)")) == {"user_tok_s_min>=10": 10.0}
    ttft = _axis(fig, "TTFT (s)")
    assert _hlines(ttft) == {"c32.ttft_p50<=1.5": 1.5}
    assert ttft.get_ylim()[1] > 15.5


def test_without_thresholds_the_axes_still_have_headroom_and_files_are_written(tmp_path: Path) -> None:
    from vllm_station import output

    f = throughput_figure(_report())
    try:
        agg = _axis(f, "output tok/s (aggregate)")
        assert agg.get_ylim()[1] > 2517 * 1.01 * 1.1 and _hlines(agg) == {}
    finally:
        output.pyplot().close(f)
    paths = write_plots(_report("c1.tok_s>=100"), tmp_path)
    assert [p.name for p in paths] == ["throughput-ttft.png", "latency-cdf.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)
