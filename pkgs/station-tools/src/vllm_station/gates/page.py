"""`station golive`'s report as files: `golive.json` and a self-contained `golive.html` (plots inline)."""

from __future__ import annotations

import base64
import html
import json
import tempfile
from pathlib import Path
from typing import Any

from vllm_station import bounded, output
from vllm_station import report as report_mod
from vllm_station.bench.report import BenchReport

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f4f4f4}.held{color:#080;font-weight:bold}.failed{color:#b00;font-weight:bold}
.skipped{color:#888}code{background:#f4f4f4;padding:0 3px}img{max-width:100%}
"""


def _e(value: Any) -> str:
    return html.escape("-" if value is None else str(value))


def _table(head: list[str], rows: list[list[Any]]) -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _state(held: bool | None) -> str:
    if held is None:
        return '<span class="skipped">skipped</span>'
    return '<span class="held">held</span>' if held else '<span class="failed">FAILED</span>'


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _png(fig: Any) -> str:
    return _img(output.save_figure(fig, option="--out", dpi=90, bbox_inches="tight"), "needle plot")


def _needle_plot(rep: dict[str, Any]) -> str:
    plt = output.pyplot()

    results = rep.get("results") or []
    if not results:
        return ""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    for r in results:
        a1.scatter(r["length"], r["depth"], marker="o" if r["retrieved"] else "x", s=70,
                   color="green" if r["retrieved"] else "red")  # fmt: skip
    a1.set_xlabel("prompt tokens")
    a1.set_ylabel("needle depth (%)")
    a1.set_title("retrieved (o) / missed (x)")
    timed = [r for r in results if r.get("wall_s") is not None]
    a2.plot([r["prompt_tokens"] for r in timed], [r["wall_s"] for r in timed], "o", label="wall")
    a2.plot([r["prompt_tokens"] for r in timed], [r["ttft_s"] for r in timed], ".", label="TTFT")
    rec = rep.get("record") or {}
    if rec.get("wall_s"):
        lo, hi = rec["wall_s"]
        a2.errorbar([rec["prompt_tokens"]], [(lo + hi) / 2], yerr=[[(hi - lo) / 2]], fmt="s", color="grey",
                    label="recipe record")  # fmt: skip
    a2.set_xlabel("prompt tokens")
    a2.set_ylabel("seconds")
    a2.legend()
    try:
        out = _png(fig)
    finally:
        plt.close(fig)
    return out


def _bench_plots(bench: BenchReport | None) -> str:
    """bench's own PNG plots, inlined."""
    if bench is None:
        return ""
    from vllm_station.bench.plots import write_plots

    with tempfile.TemporaryDirectory() as tmp:
        paths = write_plots(bench, Path(tmp))
        return "".join(_img(bounded.read_bytes(p, limit=bounded.CONFIG_LIMIT), p.name) for p in paths)


def _tools_section(rep: dict[str, Any]) -> str:
    cats = [[_e(k), f"{v['passed']}/{v['cases']}"] for k, v in (rep.get("by_category") or {}).items()]
    fails = [
        [_e(r["id"]), _e(r["category"]), _e(", ".join(r["classes"])),
         "<br>".join(_e(f"[{f['variant']}] {f['detail']}") for f in r["failures"])]
        for r in rep.get("results") or [] if not r["passed"]
    ]  # fmt: skip
    out = _table(["category", "passed"], cats)
    if fails:
        out += _table(["case", "category", "classes", "details"], fails)
    return out


def _agent_section(rep: dict[str, Any]) -> str:
    rows = [
        [_e(r["id"]), _e(r["domain"]), f"{r['passed']}/{rep.get('repeats')}",
         "<br>".join(_e(f"{f['class']}: {f['detail']}") for t in r["trials"] for f in t["failures"])]
        for r in rep.get("results") or []
    ]  # fmt: skip
    hats = ", ".join(f"{k} {v}" for k, v in (rep.get("pass_hat") or {}).items())
    return f"<p>{_e(hats)}</p>" + _table(["task", "domain", "passed", "failures"], rows)


def _needle_section(rep: dict[str, Any]) -> str:
    rows = [
        [_e(r["variant"]), _e(f"{r['length']:,}"), _e(f"{r['depth']}%"), _state(r["retrieved"]),
         _e(r["prompt_tokens"]), _e(r["ttft_s"]), _e(r["prefill_tok_s"]), _e(r["wall_s"]),
         _e(r.get("cls") or "")]
        for r in rep.get("results") or []
    ]  # fmt: skip
    rec = rep.get("record") or {}
    note = (
        f"<p>Prompts counted by the server's /tokenize ({_e(rep.get('tokenize_calls'))} calls). The recipe's "
        f"record: {_e(rec.get('prompt_tokens'))} prompt tokens in {_e(rec.get('wall_s'))} s per request.</p>"
    )
    head = [
        "variant",
        "length",
        "depth",
        "retrieved",
        "prompt tokens",
        "TTFT s",
        "prefill tok/s",
        "wall s",
        "class",
    ]
    return note + _table(head, rows) + _needle_plot(rep)


def _num(value: Any, digits: int) -> str:
    """A figure rounded for reading (`2890.301969505154` → `2890.3`); anything else as it is."""
    if isinstance(value, float):
        return _e(f"{value:,.{digits}f}")
    return _e(value)


def _failed(level: dict[str, Any]) -> str:
    """A level's failed requests: the count and its kinds (`5 (http 5)`), from the report's `failures`."""
    kinds = level.get("failures")
    if not isinstance(kinds, dict):
        return _e(None)
    total = sum(v for v in kinds.values() if isinstance(v, int))
    detail = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    return _e(f"{total} ({detail})" if total else "0")


def _bench_section(rep: dict[str, Any], bench: BenchReport | None) -> str:
    rows = [
        [_e(e["expr"]), _e(e["level"]), _num(e["value"], 2), _state(e["passed"])]
        for e in rep.get("expect") or []
    ]
    levels = [
        [_e(lv.get("name")), _e(lv.get("ok")), _num((lv.get("tok_s") or {}).get("mean"), 1),
         _num((lv.get("ttft") or {}).get("median"), 3), _failed(lv)]
        for lv in rep.get("levels") or []
    ]  # fmt: skip
    return (
        _table(["threshold", "level", "value", "result"], rows)
        + _table(["level", "ok", "tok/s (mean)", "TTFT median s", "failed"], levels)
        + _bench_plots(bench)
    )


SECTIONS = {"tools": _tools_section, "agent": _agent_section, "needle": _needle_section}


def to_html(rep: Any, bench: BenchReport | None = None) -> str:
    """The report as one HTML page; `bench` (the bench gate's report object) adds bench's plots."""
    data = report_mod.to_jsonable(rep)
    gates = data["gates"]
    summary = _table(
        ["gate", "result", "seconds", "summary"],
        [[_e(g["name"]), _state(g["held"]), _e(round(g["seconds"], 1)), _e(g["summary"])] for g in gates],
    )
    server = data.get("server") or {}
    station = data.get("station") or {}
    tested = [
        ["endpoint", _e(data["base_url"])],
        ["model", _e(data["model"])],
        ["vLLM /version", _e(json.dumps(server.get("version")))],
        ["max_model_len", _e(server.get("max_model_len"))],
        *[
            [_e(k), f"<code>{_e(' '.join(v) if isinstance(v, list) else v)}</code>"]
            for k, v in station.items()
        ],
        ["thresholds", _e(", ".join(data.get("expect") or []))],
        ["run", _e(f"{data['started_at']} – {data['finished_at']}")],
    ]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>station golive: {_e(data['result'])}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>station golive: {'GO' if data['result'] == 'go' else 'NO-GO'} (exit {data['exit_code']})</h1>",
        summary,
        "<h2>What was tested</h2>",
        _table(["", ""], tested),
    ]
    for g in gates:
        if not isinstance(g.get("report"), dict):
            continue
        body = _bench_section(g["report"], bench) if g["name"] == "bench" else None
        if g["name"] in SECTIONS:
            body = SECTIONS[g["name"]](g["report"])
        if body is not None:
            parts += [f"<h2>{_e(g['name'])}: {_state(g['held'])} — {_e(g['summary'])}</h2>", body]
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_report(rep: Any, out_dir: Path, bench: BenchReport | None = None) -> list[Path]:
    """golive.json and golive.html in `out_dir` (created), through `vllm_station.output` (redacted).

    The JSON is written first: a page that cannot be drawn still leaves the report (then: OutputError)."""
    output.make_dir("--out", out_dir)
    js = output.write_json(out_dir / "golive.json", rep, option="--out")
    page = output.write_text(out_dir / "golive.html", to_html(rep, bench), option="--out")
    return [js, page]
