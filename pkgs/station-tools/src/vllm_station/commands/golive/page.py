"""`station golive`'s report as files: `golive.json` and a self-contained `golive.html` (plots inline)."""

from __future__ import annotations

import base64
import html
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm_station import bounded, output, thresholds
from vllm_station import report as report_mod
from vllm_station.batteries.classes import REQUEST_FAILED
from vllm_station.errors import StationError

# A gate's plots: draws its PNGs into a directory, returns their paths (`plans.Verdict.figures`).
Figures = Callable[[Path], list[Path]]

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f4f4f4}.held{color:#080;font-weight:bold}.failed{color:#b00;font-weight:bold}
.skipped{color:#888}code{background:#f4f4f4;padding:0 3px;word-break:break-all}img{max-width:100%}
.sub{color:#444;margin-top:-.6em}
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


# Each variant has its own column beside its length, so a (length, depth) holds one marker per variant, never
# one on top of another; and whatever did not retrieve is drawn last, larger, over everything else.
_VARIANT_OFFSET = 0.22
_OUTCOMES = (  # (label, marker, colour, size), in drawing order
    ("retrieved", "o", "green", 45),
    ("request failed", "s", "darkorange", 150),
    ("missed", "X", "red", 170),
)


def needle_outcome(r: dict[str, Any]) -> str:
    """retrieved, missed (the model answered wrongly) or request failed (the model was never asked)."""
    if r.get("retrieved"):
        return "retrieved"
    return "request failed" if r.get("cls") == REQUEST_FAILED else "missed"


def _needle_plot(rep: dict[str, Any]) -> str:
    plt = output.pyplot()

    results = rep.get("results") or []
    if not results:
        return ""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    lengths = sorted({r["length"] for r in results})
    variants = sorted({r["variant"] for r in results})
    centre = (len(variants) - 1) / 2

    def x_of(r: dict[str, Any]) -> float:
        return lengths.index(r["length"]) + (variants.index(r["variant"]) - centre) * _VARIANT_OFFSET

    for label, marker, colour, size in _OUTCOMES:
        these = [r for r in results if needle_outcome(r) == label]
        if these:
            a1.scatter([x_of(r) for r in these], [r["depth"] for r in these], marker=marker, s=size,
                       color=colour, label=f"{label} ({len(these)})",
                       zorder=2 if label == "retrieved" else 3)  # fmt: skip
    a1.set_xticks(range(len(lengths)), [f"{n:,}" for n in lengths])
    a1.set_xlim(-0.6, len(lengths) - 0.4)
    a1.set_ylim(-12, 112)
    a1.set_xlabel("prompt tokens (variants side by side: " + ", ".join(variants) + ")")
    a1.set_ylabel("needle depth (%)")
    a1.set_title("one marker per case")
    a1.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
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
    fig.tight_layout()
    try:
        out = _png(fig)
    finally:
        plt.close(fig)
    return out


def _plots(figures: Figures | None) -> str:
    """A gate's own PNG plots (bench's), inlined."""
    if figures is None:
        return ""
    with tempfile.TemporaryDirectory() as tmp:
        paths = figures(Path(tmp))
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
    hats = ", ".join(f"{_e(k)} {_num(v, 2)}" for k, v in (rep.get("pass_hat") or {}).items())
    return f"<p>{hats}</p>" + _table(["task", "domain", "passed", "failures"], rows)


def _needle_section(rep: dict[str, Any]) -> str:
    rows = [
        [_e(r["variant"]), _e(f"{r['length']:,}"), _e(f"{r['depth']}%"), _outcome(r),
         _num(r["prompt_tokens"], 0), _num(r["ttft_s"], 3), _num(r["prefill_tok_s"], 0), _num(r["wall_s"], 2),
         _e(r.get("cls") or "")]
        for r in rep.get("results") or []
    ]  # fmt: skip
    rec = rep.get("record") or {}
    note = (
        f"<p>Prompts counted by the server's /tokenize ({_e(rep.get('tokenize_calls'))} calls). The recipe's "
        f"record: {_num(rec.get('prompt_tokens'), 0)} prompt tokens in {_walls(rec.get('wall_s'))} "
        "per request.</p>"
    )
    head = [
        "variant",
        "length",
        "depth",
        "retrieved",
        "prompt tokens",
        "TTFT (s)",
        "prefill (tok/s)",
        "wall (s)",
        "class",
    ]
    return note + _table(head, rows) + _needle_plot(rep)


def _num(value: Any, digits: int, unit: str = "") -> str:
    """A figure rounded for reading (`2890.301969505154` → `2,890.3`), with its unit; anything else as is."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _e(value)
    return _e(f"{value:,.{digits}f}{' ' + unit if unit else ''}")


def _walls(value: Any) -> str:
    if isinstance(value, list) and len(value) == 2:
        return f"{_num(value[0], 1)}–{_num(value[1], 1)} s"
    return _e(value)


def _outcome(r: dict[str, Any]) -> str:
    what = needle_outcome(r)
    css = {"retrieved": "held", "missed": "failed", "request failed": "failed"}[what]
    return f'<span class="{css}">{_e(what)}</span>'


def _metric_of(expr: Any) -> str:
    try:
        return thresholds.parse_one(str(expr)).metric
    except StationError:
        return ""


def _metric_unit(expr_metric: str) -> tuple[int, str]:
    """Digits and unit of a `--expect` metric's value: tok/s, req/s, seconds, or a count."""
    if expr_metric in ("failures", "ok"):
        return 0, ""
    if "tok_s" in expr_metric:
        return 2, "tok/s"
    if expr_metric.startswith("req_s"):
        return 2, "req/s"
    return 3, "s"


def _failed(level: dict[str, Any]) -> str:
    """A level's failed requests: the count and its kinds (`5 (http 5)`), from the report's `failures`."""
    kinds = level.get("failures")
    if not isinstance(kinds, dict):
        return _e(None)
    total = sum(v for v in kinds.values() if isinstance(v, int))
    detail = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    return _e(f"{total} ({detail})" if total else "0")


def _bench_section(rep: dict[str, Any], figures: Figures | None) -> str:
    rows = [
        [_e(e["expr"]), _e(e["level"]), _num(e["value"], *_metric_unit(_metric_of(e["expr"]))),
         _state(e["passed"])]
        for e in rep.get("expect") or []
    ]  # fmt: skip
    levels = [
        [_e(lv.get("name")), _e(lv.get("ok")), _num((lv.get("tok_s") or {}).get("mean"), 1),
         _num((lv.get("ttft") or {}).get("median"), 3), _failed(lv)]
        for lv in rep.get("levels") or []
    ]  # fmt: skip
    return (
        _table(["threshold", "level", "value", "result"], rows)
        + _table(["level", "ok", "tok/s (mean)", "TTFT median (s)", "failed"], levels)
        + _plots(figures)
    )


SECTIONS = {"tools": _tools_section, "agent": _agent_section, "needle": _needle_section}


def _digest(image: Any) -> str | None:
    """`vllm/vllm-openai@sha256:<64 hex>` → `sha256:<64 hex>`; None when the image is not pinned by digest."""
    if isinstance(image, str) and "@sha256:" in image:
        return "sha256:" + image.rsplit("@sha256:", 1)[1]
    return None


def _date(stamp: Any) -> str:
    """`2026-12-02T01:20:33+00:00` → `2026-12-02 01:20 UTC`."""
    text = str(stamp or "")
    if len(text) >= 16 and text[10] == "T":
        zone = " UTC" if text.endswith(("+00:00", "Z")) else text[19:]
        return f"{text[:10]} {text[11:16]}{zone}"
    return text or "-"


def heading(data: dict[str, Any]) -> dict[str, str]:
    """What the page's heading names: the verdict, the station, the model, the image digest, the date."""
    station = data.get("station") or {}
    digest = _digest(station.get("image"))
    return {
        "verdict": "GO" if data["result"] == "go" else "NO-GO",
        "station": str(station.get("host") or "-"),
        "model": str(data.get("model") or "-"),
        "image": digest or "digest not known (not run from a station's --config)",
        "date": _date(data.get("started_at")),
    }


def _rows(rows: list[tuple[str, str]]) -> str:
    """A two-column table whose first column names each row (no header row)."""
    return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def to_html(rep: Any, figures: dict[str, Figures] | None = None) -> str:
    """The report as one HTML page; `figures` (by gate: what the gate's verdict offers) adds its plots."""
    data = report_mod.to_jsonable(rep)
    gates = data["gates"]
    summary = _table(
        ["gate", "result", "time (s)", "summary"],
        [[_e(g["name"]), _state(g["held"]), _num(float(g["seconds"]), 1), _e(g["summary"])] for g in gates],
    )
    server = data.get("server") or {}
    station = data.get("station") or {}
    tested = [
        ("endpoint", _e(data["base_url"])),
        ("model", _e(data["model"])),
        ("vLLM /version", _e(json.dumps(server.get("version")))),
        ("max_model_len", _num(server.get("max_model_len"), 0, "tokens")),
        *[(k, f"<code>{_e(' '.join(v) if isinstance(v, list) else v)}</code>") for k, v in station.items()],
        ("thresholds", _e(", ".join(data.get("expect") or []))),
        ("run", _e(f"{data['started_at']} – {data['finished_at']}")),
    ]
    h = heading(data)
    verdict_css = "held" if h["verdict"] == "GO" else "failed"
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>station golive: {_e(h['verdict'])} — {_e(h['station'])}, {_e(h['model'])}, "
        f"{_e(h['date'])}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>station golive: <span class='{verdict_css}'>{_e(h['verdict'])}</span>"
        f" (exit {data['exit_code']}) — {_e(h['station'])}</h1>",
        "<p class='sub'>"
        f"model <b>{_e(h['model'])}</b> · image <code>{_e(h['image'])}</code> · {_e(h['date'])}</p>",
        summary,
        "<h2>What was tested</h2>",
        _rows(tested),
    ]
    if data.get("partial"):
        parts.insert(5, f"<p class='failed'>PARTIAL: {_e(data.get('stopped'))}</p>")
    for g in gates:
        if not isinstance(g.get("report"), dict):
            continue
        body = _bench_section(g["report"], (figures or {}).get("bench")) if g["name"] == "bench" else None
        if g["name"] in SECTIONS:
            body = SECTIONS[g["name"]](g["report"])
        if body is not None:
            parts += [f"<h2>{_e(g['name'])}: {_state(g['held'])} — {_e(g['summary'])}</h2>", body]
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_report(rep: Any, out_dir: Path, figures: dict[str, Figures] | None = None) -> list[Path]:
    """golive.json and golive.html in `out_dir` (created), through `vllm_station.output` (redacted).

    The JSON is written first: a page that cannot be drawn still leaves the report (then: OutputError)."""
    output.make_dir("--out", out_dir)
    js = output.write_json(out_dir / "golive.json", rep, option="--out")
    page = output.write_text(out_dir / "golive.html", to_html(rep, figures), option="--out")
    return [js, page]
