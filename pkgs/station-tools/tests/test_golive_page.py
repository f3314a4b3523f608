"""golive.html's bench section reads the report as bench writes it: failed requests counted from the
level's `failures` (a NO-GO with five HTTP 500s shows them), figures rounded for reading."""

from __future__ import annotations

from vllm_station.gates.page import _bench_section


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
    assert "<td>2,890.3</td>" in page and "<td>0.061</td>" in page and "<td>98.36</td>" in page
    assert "2890.301969505154" not in page and "0.0612345678" not in page


def test_a_level_without_a_failures_record_shows_a_dash() -> None:
    page = _bench_section({"levels": [{"name": "c1", "ok": 1}]}, None)
    assert page.count("<td>-</td>") == 3  # tok/s, TTFT, failed: not in this record
