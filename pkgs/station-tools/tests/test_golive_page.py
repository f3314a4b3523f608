"""golive.html's bench section reads the report as bench writes it: failed requests counted from the
level's `failures` (a NO-GO with five HTTP 500s shows them), figures rounded for reading."""

from __future__ import annotations

import base64
import io
import re
from html.parser import HTMLParser
from typing import Any

from vllm_station.commands.golive.page import _agent_section, _bench_section, to_html


def test_failed_requests_and_rounded_figures() -> None:
    rep = {
        "expect": [{"expr": "c1.tok_s>=100", "level": "c1", "value": 98.36123456, "passed": False}],
        "levels": [
            {"name": "c1", "ok": 3, "tok_s": {"mean": 2890.301969505154}, "ttft": {"median": 0.0612345678},
             "failures": {"http": 5, "timeout": 1}},
            {"name": "c32", "ok": 32, "tok_s": {"mean": 55.6}, "ttft": {"median": 0.5}, "failures": {}},
        ],
    }  # fmt: skip
    page = _bench_section(rep, None)
    assert "<td>6 (http 5, timeout 1)</td>" in page and "<td>0</td>" in page
    assert "<td>2,890.3</td>" in page and "<td>0.061</td>" in page and "<td>98.36 tok/s</td>" in page
    assert "2890.301969505154" not in page and "0.0612345678" not in page


def test_a_level_without_a_failures_record_shows_a_dash() -> None:
    page = _bench_section({"levels": [{"name": "c1", "ok": 1}]}, None)
    assert page.count("<td>-</td>") == 3  # tok/s, TTFT, failed: not in this record


# --- the whole page, parsed: heading, rounding, no empty header row, a miss that cannot hide ---

DIGEST = "sha256:" + "ab" * 32


class _Page(HTMLParser):
    """The page as text: the h1, the line under it, every table's rows (th/td texts), the images."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.h1 = ""
        self.sub = ""
        self.title = ""
        self.tables: list[list[list[tuple[str, str]]]] = []  # table → rows → (tag, text)
        self.images: dict[str, bytes] = {}
        self._in: list[str] = []
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "p" and a.get("class") == "sub":
            tag = "sub"
        self._in.append(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self._in.pop()
            src = a.get("src") or ""
            self.images[a.get("alt") or ""] = base64.b64decode(src.split(",", 1)[1])

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append((tag, "".join(self._cell).strip()))
            self._cell = None
        while self._in:
            if self._in.pop() in (tag, "sub"):
                break

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if "h1" in self._in:
            self.h1 += data
        if "sub" in self._in:
            self.sub += data
        if "title" in self._in:
            self.title += data


def _needle(variant: str, depth: int, retrieved: bool, cls: str | None = None) -> dict[str, Any]:
    return {"id": f"{variant}-1000-d{depth}", "variant": variant, "length": 1000, "depth": depth,
            "retrieved": retrieved, "cls": None if retrieved else (cls or "missed_needle"), "detail": "",
            "prompt_tokens": 1000, "ttft_s": 0.061234567, "prefill_tok_s": 16330.912345,
            "wall_s": 0.25123}  # fmt: skip


IMAGE = "vllm/vllm-openai@" + DIGEST


def _report(needles: list[dict[str, Any]], *, image: str | None = IMAGE) -> dict[str, Any]:
    station: dict[str, Any] = {"host": "gb300-lab-7"}
    if image:
        station |= {"preset": "glm53-flash", "image": image}
    passed = all(n["retrieved"] for n in needles)
    return {
        "schema": 1, "started_at": "2026-12-02T01:20:33+00:00", "finished_at": "2026-12-02T01:24:10+00:00",
        "base_url": "http://127.0.0.1:8888/v1", "model": "glm-5.3-flash",
        "server": {"version": {"version": "0.19.0"}, "max_model_len": 1048576}, "station": station,
        "expect": ["c1.tok_s>=100", "failures==0"], "result": "go" if passed else "no-go",
        "exit_code": 0 if passed else 1, "partial": False, "stopped": None,
        "gates": [
            {"name": "smoke", "held": True, "summary": "4 pass", "seconds": 0.80123456, "report": None},
            {"name": "needle", "held": passed, "summary": "needles", "seconds": 4.1234567,
             "report": {"results": needles, "tokenize_calls": 3,
                        "record": {"prompt_tokens": 968377, "wall_s": [33.5, 37.0]}}},
            {"name": "bench", "held": True, "summary": "held", "seconds": 11.5,
             "report": {"expect": [
                 {"expr": "c1.tok_s>=100", "level": "c1", "value": 145.912345, "passed": True},
                 {"expr": "c32.ttft_p50<=1.5", "level": "c32", "value": 0.98456, "passed": True},
                 {"expr": "failures==0", "level": None, "value": 0.0, "passed": True}],
                        "levels": [{"name": "c1", "ok": 2, "tok_s": {"mean": 145.912345},
                                    "ttft": {"median": 0.061234}, "failures": {}}]}},
        ],
    }  # fmt: skip


def test_heading_names_station_model_digest_and_date() -> None:
    page = _Page(to_html(_report([_needle("single", 50, True)])))
    assert re.fullmatch(r"station golive: GO \(exit 0\) — gb300-lab-7", page.h1.strip()), page.h1
    assert "glm-5.3-flash" in page.sub and DIGEST in page.sub and "2026-12-02 01:20 UTC" in page.sub, page.sub
    assert "gb300-lab-7" in page.title and "2026-12-02 01:20 UTC" in page.title
    # without a station's --config the digest is not known, and the page says so instead of leaving a gap
    bare = _Page(to_html(_report([_needle("single", 50, True)], image=None)))
    assert "digest not known" in bare.sub and "sha256:" not in bare.sub


def test_figures_rounded_with_units_and_no_empty_header_row() -> None:
    page = _Page(to_html(_report([_needle("single", 50, True)])))
    for table in page.tables:
        for row in table:
            if all(tag == "th" for tag, _ in row):
                assert all(text for _, text in row), f"a header row with an empty cell: {row}"
    cells = [text for table in page.tables for row in table for _, text in row]
    # the gates' times, the thresholds' values with their units, the needle figures
    assert "0.8" in cells and "4.1" in cells and "0.80123456" not in " ".join(cells)
    assert {"145.91 tok/s", "0.985 s", "0"} <= set(cells), cells
    assert {"0.061", "16,331", "0.25", "1,048,576 tokens"} <= set(cells), cells
    assert not [c for c in cells if re.search(r"\d\.\d{4,}", c)], "an unrounded figure"
    tested = next(t for t in page.tables if ("th", "endpoint") in t[0])  # "What was tested": rows named by th
    assert all(len(row) == 2 and row[0][0] == "th" for row in tested)


def _red_pixels(png: bytes) -> int:
    from matplotlib import image

    px = image.imread(io.BytesIO(png), format="png")
    return int(((px[..., 0] > 0.8) & (px[..., 1] < 0.25) & (px[..., 2] < 0.25)).sum())


def test_a_missed_needle_is_never_hidden_by_other_variants_at_the_same_place() -> None:
    alone = [_needle("single", 50, False)]
    # the miss first, then two variants retrieved at the same (length, depth): drawn in that order before,
    # their markers covered the miss
    crowded = [_needle("single", 50, False), _needle("multikey", 50, True), _needle("tool", 50, True)]
    crowded += [_needle(v, d, True) for v in ("single",) for d in (0, 100)]
    red_alone = _red_pixels(_Page(to_html(_report(alone))).images["needle plot"])
    red_crowded = _red_pixels(_Page(to_html(_report(crowded))).images["needle plot"])
    assert red_alone > 50, red_alone
    assert red_crowded >= 0.9 * red_alone, (red_crowded, red_alone)
    none_missed = [_needle(v, 50, True) for v in ("single", "multikey", "tool")]
    assert _red_pixels(_Page(to_html(_report(none_missed))).images["needle plot"]) == 0


def test_agent_pass_hat_rounded() -> None:
    page = _agent_section({"repeats": 3, "pass_hat": {"pass^1": 0.9333333333333333, "pass^3": 0.8},
                           "results": []})  # fmt: skip
    assert "<p>pass^1 0.93, pass^3 0.80</p>" in page, page


def test_needle_rows_say_missed_or_request_failed() -> None:
    rows = [_needle("single", 0, False), _needle("tool", 50, False, cls="request_failed"),
            _needle("multikey", 50, True)]  # fmt: skip
    page = _Page(to_html(_report(rows)))
    needle = next(t for t in page.tables if ("th", "variant") in t[0])
    assert [r[3][1] for r in needle[1:]] == ["missed", "request failed", "retrieved"]
