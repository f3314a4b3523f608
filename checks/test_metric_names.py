"""Tier `nix_parse` (fast: no nixpkgs tree, no server): vLLM's metric names have one home,
modules/monitoring/metrics.json, and every reader keeps to it.

- the alert rules (modules/monitoring/rules.nix renders them from the list; evaluated here with Nix's
  builtins only) name exactly the entries marked `rules`;
- the Grafana dashboard names exactly the entries marked `dashboard`;
- the `station` tools (watchdog, bench and its simulator: every `"vllm:…"` string in vllm_station,
  wherever a module lives) name only listed names or their `legacy` fallbacks, and every entry marked
  `watchdog` or `bench`;
- every entry exists, with its type, in the exposition of the vLLM release the presets were checked
  against. The realvllm tier scrapes a real vLLM but keeps no copy, so this is checked against a committed
  fixture of that release's metric families (checks/monitoring/vllm-metrics.txt);
  checks/test_monitoring_realvllm.py checks the list against the real scrape.
"""

from __future__ import annotations

import ast
import json
import re
from functools import cache
from typing import Any

import pytest
from monitoring import promql
from nixenv import REPO, eval_json

pytestmark = pytest.mark.nix_parse

LIST = REPO / "modules" / "monitoring" / "metrics.json"
RULES = REPO / "modules" / "monitoring" / "rules.nix"
DASHBOARD = REPO / "modules" / "monitoring" / "dashboards" / "vllm-station.json"
FIXTURE = REPO / "checks" / "monitoring" / "vllm-metrics.txt"
PACKAGE = REPO / "pkgs" / "station-tools" / "src" / "vllm_station"
HISTOGRAM_SAMPLES = ("_bucket", "_sum", "_count")
METRIC = re.compile(r"vllm:[a-z_:]+")


@cache
def _list() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(LIST.read_text())
    return data


def _entries() -> dict[str, dict[str, Any]]:
    entries: dict[str, dict[str, Any]] = _list()["vllm"]
    return entries


def _samples(name: str) -> set[str]:
    """The sample names an entry stands for (a histogram: its family's _bucket, _sum and _count)."""
    kind = next(e["type"] for e in _entries().values() if e["name"] == name)
    return {name + s for s in HISTOGRAM_SAMPLES} if kind == "histogram" else {name}


def _entry_of(sample: str) -> str | None:
    for entry in _entries().values():
        if sample in _samples(entry["name"]):
            return str(entry["name"])
    return None


def _used_by(reader: str) -> set[str]:
    return {e["name"] for e in _entries().values() if reader in e["usedBy"]}


def _vllm_names(exprs: list[str]) -> set[str]:
    return {n for e in exprs for n in promql.metric_names(e) if n.startswith("vllm:")}


@cache
def _rules_exprs() -> list[str]:
    rules = eval_json(["--expr", f"(import {RULES}).render {{ pair = true; }}"], timeout=120)
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def _dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", [])]


def _python_names() -> dict[str, set[str]]:
    """Every `"vllm:…"` string constant in the package, with the files that hold it."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in METRIC.findall(node.value):
                    if node.value.startswith(name):  # a metric name (a sample line: "vllm:x{…} 1"), not prose
                        found.setdefault(name, set()).add(path.relative_to(PACKAGE).as_posix())
    return found


@cache
def _fixture() -> dict[str, str]:
    """family -> type, from the fixture of vLLM's exposition."""
    lines = [ln.split() for ln in FIXTURE.read_text().splitlines() if ln and not ln.startswith("#")]
    return {family: kind for family, kind in lines}


def _family(entry: dict[str, Any]) -> str:
    """The `# TYPE` family of an entry: a counter's sample is <family>_total."""
    name = str(entry["name"])
    return name.removesuffix("_total") if entry["type"] == "counter" else name


def test_the_list_is_well_formed() -> None:
    names = [e["name"] for e in _entries().values()]
    assert len(names) == len(set(names)) and names, names
    for key, e in _entries().items():
        assert METRIC.fullmatch(e["name"]), key
        assert e["type"] in ("gauge", "counter", "histogram"), key
        assert e["type"] != "counter" or e["name"].endswith("_total"), f"{key}: a counter is selected as *_total"
        assert set(e["usedBy"]) <= {"rules", "dashboard", "watchdog", "bench"} and e["usedBy"], key
    assert not set(_list()["legacy"]) & set(names)


def test_the_rules_name_exactly_the_listed_rule_metrics() -> None:
    assert _vllm_names(_rules_exprs()) == _used_by("rules")
    text = RULES.read_text()
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    assert METRIC.findall(code) == [], "rules.nix writes a vLLM name itself: take it from metrics.json"


def test_the_dashboard_names_exactly_the_listed_dashboard_metrics() -> None:
    used = _vllm_names(_dashboard_exprs())
    unlisted = {n for n in used if _entry_of(n) is None}
    assert unlisted == set(), f"the dashboard names metrics missing from {LIST.name}"
    assert {_entry_of(n) for n in used} == _used_by("dashboard")


def test_the_station_tools_name_only_listed_metrics() -> None:
    found = _python_names()
    legacy = set(_list()["legacy"])
    unlisted = {n: sorted(files) for n, files in found.items() if _entry_of(n) is None and n not in legacy}
    assert unlisted == {}, f"vllm_station names metrics missing from {LIST}"
    listed = {_entry_of(n) for n in found} - {None}
    assert _used_by("watchdog") | _used_by("bench") <= listed, "an entry marked watchdog/bench is read by neither"
    assert legacy <= set(found), "a legacy name no reader accepts any more: remove it from the list"


def test_every_listed_metric_is_in_vllms_exposition_with_its_type() -> None:
    exposed = _fixture()
    assert len(exposed) > 30 and "vllm:num_requests_running" in exposed
    wrong = {
        e["name"]: exposed.get(_family(e), "absent")
        for e in _entries().values()
        if exposed.get(_family(e)) != e["type"]
    }
    assert wrong == {}, f"listed but not exposed as that type by vLLM (checks/monitoring/{FIXTURE.name})"


def test_a_renamed_metric_is_caught() -> None:
    """The checks above can fail: the legacy names are what older vLLM exposed, and the fixture has none."""
    samples = set()
    for family, kind in _fixture().items():
        samples |= {family + "_total"} if kind == "counter" else {family + s for s in HISTOGRAM_SAMPLES}
        samples |= {family} if kind == "gauge" else set()
    assert "vllm:num_preemptions_total" in samples and "vllm:time_to_first_token_seconds_sum" in samples
    for old in _list()["legacy"]:
        assert old not in samples, f"{old}: a legacy name vLLM still exposes"
    renamed = [e.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc") for e in _dashboard_exprs()]
    assert {n for n in _vllm_names(renamed) if _entry_of(n) is None} == {"vllm:gpu_cache_usage_perc"}


def test_a_listed_metric_that_a_reader_drops_is_caught() -> None:
    without = [e for e in _rules_exprs() if "vllm:num_preemptions_total" not in e]
    assert _vllm_names(without) != _used_by("rules")
