"""Tier `realvllm`: a real Prometheus (Debian's) runs the configuration and rules NixOS renders for
checks/examples/monitored-station.nix, scraping a real vLLM (CPU) and a real node_exporter whose textfile
directory the real `station` tools filled: the probe and the watchdog (their rendered command lines,
against the real vLLM), prestart, preflight and nccl-check.

Every metric a rule or the dashboard names must exist in what Prometheus scraped — vLLM renames metrics
between releases (the KV-cache gauge was `vllm:gpu_cache_usage_perc`), and a rule on a name the server
does not expose never fires. The systemd collector's metrics need a running systemd: the system tier
(checks/test_system_monitoring.py) checks those names against a booted one.

Differences from the rendered configuration, each because the test's servers run here: the targets (the
test's ports), 1-second scrape and evaluation intervals, rule files copied out of the store; the tools'
`--base-url`, `--model` and `--textfile-dir` point at the test's server and directory and carry no key.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from monitoring import promql
from monitoring.rendered import (
    DASHBOARD,
    Rendered,
    env_without_keys,
    local_config,
    rendered,
)
from nixenv import REPO

pytestmark = pytest.mark.realvllm

TESTS = REPO / "pkgs" / "station-tools" / "tests"
NEED_DEBIAN = "apt-get install -y prometheus prometheus-node-exporter (scripts/check installs them)"
# Names only a running systemd gives (node_exporter's systemd collector, the watchdog's unit state).
SYSTEM_TIER = {
    "node_systemd_unit_state",
    "node_systemd_service_restart_total",
    "station_watchdog_unit_start_limit_hit",
}
# Exposed only on a pair's worker, by its rejoin unit's textfile (tests/test_pair_engine.py checks it).
PAIR_WORKER = {"station_pair_rejoin_restarts_total"}
STATION = [sys.executable, "-m", "vllm_station"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 5) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


@contextlib.contextmanager
def _process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _vllm(request: pytest.FixtureRequest, stack: contextlib.ExitStack, logs: Path) -> Any:
    """The tests' session vLLM when this session already runs it (scripts/check), else one of our own."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    import conftest as realvllm  # the package tests' fixtures: their lock and server

    # pytest keeps a session fixture's value on its definition (private, by pytest version): share it
    manager = request.session._fixturemanager
    for attr in ("_arg2fixturedefs", "_arg2node2fixturedefs", "_arg2nodeid2fixturedefs"):
        entry = (getattr(manager, attr, None) or {}).get("tools_server")
        defs = entry if isinstance(entry, list) else [d for ds in (entry or {}).values() for d in ds]
        for fixturedef in defs:
            cached = getattr(fixturedef, "cached_result", None)
            if cached and cached[0] is not None and cached[0].alive():
                return cached[0]
    reason = realvllm.missing_realvllm("tools")
    if reason:
        if os.environ.get("STATION_REQUIRE_REALVLLM") == "1":
            pytest.fail(f"{reason} (STATION_REQUIRE_REALVLLM=1)", pytrace=False)
        pytest.skip(f"real vLLM unavailable: {reason}")
    realvllm._LOCK.acquire(realvllm.LOCK_TIMEOUT_S)
    stack.callback(realvllm._LOCK.release)
    srv = realvllm.start_server("tools", logs, "tiny-tools", realvllm.TOOL_FLAGS)
    stack.callback(srv.stop)
    return srv


def _replace(argv: list[str], values: dict[str, str], drop: tuple[str, ...] = ()) -> list[str]:
    out, i = [], 0
    while i < len(argv):
        if argv[i] in drop:
            i += 2
            continue
        out.append(argv[i])
        if argv[i] in values:
            out.append(values[argv[i]])
            i += 1
        i += 1
    return out


@dataclass
class Stack:
    r: Rendered
    prometheus: str  # http://127.0.0.1:PORT
    textfiles: Path
    logs: Path

    def api(self, path: str, **query: str) -> Any:
        url = f"{self.prometheus}/api/v1/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = _get(url)
        assert data["status"] == "success", data
        return data["data"]

    def has_series(self, name: str) -> bool:
        return bool(self.api("series", **{"match[]": f'{{__name__="{name}"}}'}))

    def missing(self, names: set[str]) -> set[str]:
        return {n for n in names if not self.has_series(n)}


def _run_tools(r: Rendered, base_url: str, d: Path, logs: Path) -> None:
    env = {**env_without_keys(), "STATION_TEXTFILE_DIR": str(d)}
    values = {"--base-url": base_url, "--model": "tiny-tools", "--textfile-dir": str(d)}
    probe = _replace(
        r.unit_argv("vllm-station-probe.service")[1:], {**values, "--max-tokens": "8"}, ("--api-key-file",)
    )
    watchdog = _replace(
        r.unit_argv("vllm-station-watchdog.service")[1:],
        {
            **values,
            "--interval": "5",
            "--probe-timeout": "5",
            "--systemctl": shutil.which("systemctl") or "systemctl",
        },
        ("--api-key-file",),
    )
    sys.path.insert(0, str(TESTS))
    from sysfs_fixtures import gb300_root

    root = gb300_root(logs / "root", file_pages_gib=2.5)  # page cache left in HBM: an alert fires
    data = TESTS / "data" / "nccl"
    runs = [
        (probe, (0,)),
        ([*watchdog, "--cycles", "1"], (0,)),
        (["prestart", "--root", str(root), "--no-drop"], (0,)),
        (["preflight", "--root", str(root), "--only", "page-cache"], (0,)),
        (["nccl-check", "--log", str(data / "socket.log")], (1,)),
    ]
    for args, codes in runs:
        proc = subprocess.run(
            [*STATION, *args], capture_output=True, text=True, timeout=300, env=env, check=False
        )
        assert proc.returncode in codes, (
            f"station {' '.join(args)}: {proc.returncode}\n{proc.stdout}{proc.stderr}"
        )
    names = sorted(p.name for p in d.iterdir())
    assert names == sorted(
        ["station-probe.prom", "station-watchdog.prom", "station-page-cache-prestart.prom",
         "station-page-cache-preflight.prom", "station-nccl.prom"]
    ), names  # fmt: skip


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus, node_exporter = shutil.which("prometheus"), shutil.which("prometheus-node-exporter")
    if prometheus is None or node_exporter is None:
        pytest.skip(f"no prometheus / node_exporter: {NEED_DEBIAN}")
    r = rendered()
    work = tmp_path_factory.mktemp("monitoring")
    textfiles = work / "textfiles"
    textfiles.mkdir()
    with contextlib.ExitStack() as es:
        srv = _vllm(request, es, work)
        _run_tools(r, srv.base_url, textfiles, work)
        node_port, prom_port = _free_port(), _free_port()
        node_args = _replace(r.node_exporter_args[1:], {"--web.listen-address": f"127.0.0.1:{node_port}"})
        node_args = [f"--collector.textfile.directory={textfiles}" if a.startswith("--collector.textfile.directory=")
                     else a for a in node_args]  # fmt: skip
        es.enter_context(_process([node_exporter, *node_args], work / "node_exporter.log"))
        config = local_config(
            r, work, {"vllm-station": f"127.0.0.1:{srv.port}", "node": f"127.0.0.1:{node_port}"}
        )
        es.enter_context(
            _process(
                [prometheus, f"--config.file={config}", f"--storage.tsdb.path={work / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                work / "prometheus.log",
            )
        )  # fmt: skip
        st = Stack(r, f"http://127.0.0.1:{prom_port}", textfiles, work)
        deadline = time.monotonic() + 60
        while True:
            try:
                targets = st.api("targets")["activeTargets"]
                rules = st.api("rules")["groups"]
                # the two jobs this stack serves (the station's gateway job has no exporter here)
                scraped = {t["labels"]["job"] for t in targets if t["health"] == "up"} >= {"vllm-station", "node"}
                evaluated = rules and all(
                    rule.get("lastEvaluation", "").startswith("20") for g in rules for rule in g["rules"]
                )
                if scraped and evaluated and st.has_series("station_probe_success"):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"Prometheus never scraped both targets:\n{(work / 'prometheus.log').read_text()[-3000:]}"
                )
            time.sleep(0.5)
        yield st


def _names(rules: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for group in rules["groups"]:
        for rule in group["rules"]:
            names |= promql.metric_names(rule["expr"])
            for text in rule.get("annotations", {}).values():
                for query in promql.template_queries(text):
                    names |= promql.metric_names(query)
    return names


def _dashboard_names() -> set[str]:
    names: set[str] = set()
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            names |= promql.metric_names(target["expr"])
    return names


def test_prometheus_scrapes_real_vllm_and_node_exporter(stack: Stack) -> None:
    jobs = {t["labels"]["job"]: t["health"] for t in stack.api("targets")["activeTargets"]}
    # the gateway's nginx exporter is rendered too (the station has the gateway in front), not run here
    assert jobs.pop("vllm-station-gateway") in ("unknown", "down")
    assert jobs == {"vllm-station": "up", "node": "up"}


def test_every_metric_a_rule_or_the_dashboard_names_exists(stack: Stack) -> None:
    names = _names(stack.r.rules) | _names(stack.r.pair_rules) | _dashboard_names()
    assert {
        "vllm:kv_cache_usage_perc",
        "station_probe_tokens_per_second",
        "node_memory_numa_FilePages",
    } <= names
    assert stack.missing(names - SYSTEM_TIER - PAIR_WORKER) == set(), "named by a rule or the dashboard, exposed by nothing"
    assert stack.missing(PAIR_WORKER) == PAIR_WORKER and PAIR_WORKER <= names
    assert stack.missing(SYSTEM_TIER) == SYSTEM_TIER, "these need systemd: the system tier checks them"


def test_every_metric_of_the_list_is_scraped(stack: Stack) -> None:
    """modules/monitoring/metrics.json, vLLM's metric names in one home, against a real vLLM's /metrics (the
    fast tier, checks/test_metric_names.py, checks the list against a fixture of the names)."""
    entries = json.loads((REPO / "modules" / "monitoring" / "metrics.json").read_text())["vllm"].values()
    samples = {e["name"] + ("_count" if e["type"] == "histogram" else "") for e in entries}
    assert len(samples) >= 10 and "vllm:iteration_tokens_total_count" in samples
    assert stack.missing(samples) == set(), "listed in metrics.json, not exposed by this vLLM"


def test_a_renamed_metric_is_caught(stack: Stack) -> None:
    """The check above can fail: vLLM's old name of the KV-cache gauge is not exposed by 0.32."""
    renamed = stack.r.rules_text.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    assert stack.missing(_names(json.loads(renamed))) == {"vllm:gpu_cache_usage_perc"} | SYSTEM_TIER | PAIR_WORKER


def test_every_rule_evaluates_without_error(stack: Stack) -> None:
    rules = [rule for g in stack.api("rules")["groups"] for rule in g["rules"]]
    assert len(rules) == 22
    bad = {rule["name"]: rule.get("lastError") for rule in rules if rule["health"] != "ok"}
    assert bad == {}


def test_prestarts_page_cache_figure_fires_its_alert_end_to_end(stack: Stack) -> None:
    """prestart wrote 2.5 GiB (the test's sysfs), node_exporter served it, the rendered rule fired."""
    deadline = time.monotonic() + 20
    while True:
        alerts = [
            a for a in stack.api("alerts")["alerts"] if a["labels"]["alertname"] == "VllmStationPageCacheHigh"
        ]
        if alerts or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert {(a["labels"]["source"], a["state"]) for a in alerts} == {
        ("prestart", "firing"),
        ("preflight", "firing"),
    }
    probe = stack.api("query", query="station_probe_tokens_per_second")["result"]
    assert probe and float(probe[0]["value"][1]) > 0, "the probe's real-vLLM figure reached Prometheus"
