"""Tier `nix_nixos`: what services.vllm-station.monitoring renders, run by the real programs.

The rule file and the Prometheus configuration are taken from NixOS's evaluation of
checks/examples/monitored-station.nix (checks/monitoring/rendered.py reads them out of the derivations
services.prometheus builds); Debian's promtool checks them and runs checks/monitoring/rules*.test.yml —
a test where each alert fires and one where it stays quiet. The units' command lines are parsed by the
real `station` argument parser, and the textfile directory is pinned on both sides of the contract.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from monitoring import promql
from monitoring.rendered import (
    DASHBOARD,
    PAIR_RULES_TEST,
    RULES_TEST,
    WORKER_RULES_TEST,
    Rendered,
    exec_argv,
    local_config,
    rendered,
)
from nixenv import REPO, exposure, require_tree
from test_nix_flake import _flake_eval
from vllm_station import cli, textfile
from vllm_station.commands import watchdog

pytestmark = pytest.mark.nix_nixos
NEED_DEBIAN = "apt-get install -y prometheus prometheus-node-exporter (scripts/check installs them)"
NEED_AMTOOL = "apt-get install -y prometheus-alertmanager (scripts/check installs it)"


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip(f"no promtool: {NEED_DEBIAN}")
    return path


def _alerts(rules: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for g in rules["groups"] for r in g["rules"] if "alert" in r]


def _run_tests(rules_text: str, test_file: Path, work: Path) -> subprocess.CompletedProcess[str]:
    (work / "rules.json").write_text(rules_text)
    shutil.copy(test_file, work / test_file.name)
    return subprocess.run(
        [_promtool(), "test", "rules", test_file.name],
        cwd=work,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def r() -> Rendered:
    return rendered()


def test_promtool_checks_the_rendered_rule_file(r: Rendered, tmp_path: Path) -> None:
    path = tmp_path / "rules.json"
    path.write_text(r.rules_text)
    proc = subprocess.run(
        [_promtool(), "check", "rules", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_alerts(r.rules))} rules found" in proc.stdout


def test_promtool_unit_tests_pass(r: Rendered, tmp_path: Path) -> None:
    station = _run_tests(r.rules_text, RULES_TEST, tmp_path)
    assert station.returncode == 0, station.stdout + station.stderr
    pair = _run_tests(json.dumps(r.pair_rules), PAIR_RULES_TEST, tmp_path)
    assert pair.returncode == 0, pair.stdout + pair.stderr
    worker = _run_tests(json.dumps(r.worker["rules"]), WORKER_RULES_TEST, tmp_path)
    assert worker.returncode == 0, worker.stdout + worker.stderr


def test_the_pair_worker_is_monitored_through_the_same_module(r: Rendered, tmp_path: Path) -> None:
    """Station B (headless: no API) with monitoring on: node_exporter exactly as the head's, the unit's,
    restart, page-cache and exporter alerts and rank 1's weights check; no probe, watchdog or vLLM job."""
    w = r.worker
    assert w["warnings"] == [] or all("alertmanagers is empty" in x for x in w["warnings"]), w["warnings"]
    assert w["nodeExporter"] is True
    assert (w["nodeExporterFlags"], w["nodeExporterCollectors"]) == (
        r.head["nodeExporterFlags"],
        r.head["nodeExporterCollectors"],
    ), "the same module's node_exporter on both stations"
    assert f"--collector.textfile.directory={r.textfile_dir}" in w["nodeExporterFlags"]
    assert "--collector.systemd.enable-restarts-metrics" in w["nodeExporterFlags"]
    assert w["scrapeJobs"] == ["node"]
    assert "vllm-station-probe.service" not in w["units"] and "vllm-station-watchdog.service" not in w["units"]
    assert "vllm-station-weights-check.service" in w["units"]
    names = {a["alert"] for a in _alerts(w["rules"])}
    assert {"VllmStationUnitFailed", "VllmStationStartLimitHit", "VllmStationRestarts",
            "VllmStationPageCacheHigh", "VllmStationWeightsCheckFailed", "VllmStationScrapeDown",
            "VllmStationScrapeMissing"} == names, names  # fmt: skip
    path = tmp_path / "worker-rules.json"
    path.write_text(json.dumps(w["rules"]))
    proc = subprocess.run([_promtool(), "check", "rules", str(path)], check=False, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0 and f"SUCCESS: {len(names)} rules found" in proc.stdout, proc.stdout + proc.stderr

    # rank 1's weights check: the real CLI parses its command; it waits as long as a start may take
    line = next(x for x in w["weightsCheck"].splitlines() if x.startswith("ExecStart="))
    argv = exec_argv(line.removeprefix("ExecStart="))
    args = cli.build_parser("weights-check").parse_args(argv[1:])
    assert args.unit == "vllm-station.service" and args.tensor_parallel_size == 2 and args.wait == 1800
    text = w["weightsCheck"]
    assert "BindsTo=vllm-station.service" in text and "After=vllm-station.service" in text
    assert "SuccessExitStatus=4" in text, "PENDING (the head never joined) is no verdict on the weights"

    # the rejoin loop's restarts reach the restart alert through the textfile directory
    line = next(x for x in w["rejoin"].splitlines() if x.startswith("ExecStart="))
    rejoin = cli.build_parser("pair").parse_args(exec_argv(line.removeprefix("ExecStart="))[1:])
    assert rejoin.verb == "rejoin" and str(rejoin.textfile_dir) == r.textfile_dir
    assert f"ReadWritePaths=-{r.textfile_dir}" in w["rejoin"]
    restarts = next(a for a in _alerts(w["rules"]) if a["alert"] == "VllmStationRestarts")
    assert "station_pair_rejoin_restarts_total" in restarts["expr"]


def test_a_broken_threshold_fails_the_unit_tests(r: Rendered, tmp_path: Path) -> None:
    """The promtool tests can fail: the throughput alert at 50 tok/s no longer fires at 80 tok/s."""
    broken = r.rules_text.replace(
        "station_probe_tokens_per_second < 100", "station_probe_tokens_per_second < 50"
    )
    assert broken != r.rules_text
    proc = _run_tests(broken, RULES_TEST, tmp_path)
    assert proc.returncode != 0 and "VllmStationThroughputLow" in proc.stdout + proc.stderr


def test_the_throughput_alert_judges_only_an_idle_engine(r: Rendered, tmp_path: Path) -> None:
    """The promtool tests can fail: without the idle gate, the busy station's 55.6 tok/s fires."""
    gate = next(a["expr"] for a in _alerts(r.rules) if a["alert"] == "VllmStationThroughputLow")
    gate = gate.removeprefix("station_probe_tokens_per_second < 100")
    assert gate.startswith(" and on() max(max_over_time(vllm:num_requests_running[300s])) <= 1"), gate
    broken = r.rules_text.replace(gate, "")
    assert broken != r.rules_text
    proc = _run_tests(broken, RULES_TEST, tmp_path)
    assert proc.returncode != 0 and "busy station" in proc.stdout + proc.stderr


def test_ttft_is_judged_on_the_probes_short_prompt_not_on_every_length(
    r: Rendered,
) -> None:
    exprs = {a["alert"]: a["expr"] for a in _alerts(r.rules)}
    assert exprs["VllmStationTtftHigh"] == "station_probe_ttft_seconds > 5.0"
    assert not any("time_to_first_token" in e for e in exprs.values())


def test_every_watchdog_verdict_a_rule_selects_is_one_the_watchdog_exports(
    r: Rendered,
) -> None:
    """The verdict labels are a contract: the rules (Nix) select what watchdog.VERDICTS (Python) exports."""
    selected = {
        m
        for a in _alerts(r.rules)
        for m in re.findall(r'station_watchdog_verdict\{verdict="([^"]+)"\}', a["expr"])
    }
    assert selected == {"wedged", "misconfigured", "overloaded"}
    assert selected <= set(watchdog.VERDICTS)


def test_the_staleness_rules_cover_the_declared_scrape_jobs(r: Rendered) -> None:
    exprs = {a["alert"]: a["expr"] for a in _alerts(r.rules)}
    jobs = {sc["job_name"] for sc in r.config["scrape_configs"]}
    assert set(re.findall(r'absent\(up\{job="([^"]+)"\}\)', exprs["VllmStationScrapeMissing"])) == jobs
    # every job but vLLM's own (EngineDown judges that one); the monitored station has the gateway in front
    assert exprs["VllmStationScrapeDown"] == 'up{job=~"node|vllm-station-gateway"} == 0'
    assert exprs["VllmStationWatchdogStale"] == "time() - station_watchdog_last_look_timestamp_seconds > 90"


# ---- the Alertmanager ---------------------------------------------------------------------------------


def _amtool() -> str:
    path = shutil.which("amtool")
    if path is None:
        pytest.skip(f"no amtool: {NEED_AMTOOL}")
    return path


def _amtool_check(config: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "alertmanager.yml"
    path.write_text(config)
    return subprocess.run(
        [_amtool(), "check-config", str(path)], check=False, capture_output=True, text=True, timeout=60
    )


def test_amtool_checks_the_rendered_alertmanager_config(r: Rendered, tmp_path: Path) -> None:
    proc = _amtool_check(r.alertmanager_config, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 receivers" in proc.stdout
    config = json.loads(r.alertmanager_config)
    (receiver,) = config["receivers"]
    assert config["route"]["receiver"] == receiver["name"]
    assert [w["url"] for w in receiver["webhook_configs"]] == ["https://hooks.example.com/vllm-station"]
    (email,) = receiver["email_configs"]
    assert (email["to"], email["smarthost"]) == (
        "oncall@example.com",
        "smtp.example.com:587",
    )
    # the password: a variable of nixpkgs' environmentFile, put in at start; never its value in the config
    assert email["auth_password"] == "${VLLM_STATION_SMTP_PASSWORD}"
    assert "auth_password_file" not in email
    unit = r.units["alertmanager.service"]
    assert "EnvironmentFile=/var/lib/vllm-station-secrets/alertmanager-smtp.env" in unit.splitlines()
    assert not any(line.startswith("LoadCredential") for line in unit.splitlines())  # nixpkgs' unit, not edited
    assert "--web.listen-address 127.0.0.1:9093" in unit


def test_a_broken_alertmanager_config_fails_amtool(r: Rendered, tmp_path: Path) -> None:
    """The check above can fail: a route to a receiver that does not exist."""
    config = json.loads(r.alertmanager_config)
    config["route"]["receiver"] = "nobody"
    proc = _amtool_check(json.dumps(config), tmp_path)
    assert proc.returncode != 0 and "nobody" in proc.stdout + proc.stderr


def test_prometheus_sends_its_alerts_to_the_alertmanager(r: Rendered) -> None:
    assert r.config["alerting"]["alertmanagers"] == [{"static_configs": [{"targets": ["127.0.0.1:9093"]}]}]


def test_alertmanager_warnings_and_assertions(r: Rendered) -> None:
    assert r.warnings == []
    v = r.variants
    assert v["alertmanager-off"]["assertions"] == []
    (warning,) = v["alertmanager-off"]["warnings"]
    assert warning.startswith("services.vllm-station.monitoring: the alert rules reach no one")
    assert "alertmanager.enable = true" in warning
    assert v["own-alertmanager"] == {"warnings": [], "assertions": []}
    assert v["webhook-only"] == {"warnings": [], "assertions": []}
    (no_receiver,) = v["no-receiver"]["assertions"]
    assert no_receiver.startswith("services.vllm-station.monitoring.alertmanager: enabled without a receiver")
    (smarthost,) = v["email-without-smarthost"]["assertions"]
    assert smarthost.startswith("services.vllm-station.monitoring.alertmanager.receivers.email:")
    (store,) = v["password-in-store"]["assertions"]
    assert store.startswith(
        "services.vllm-station.monitoring.alertmanager.receivers.email.authPasswordEnvironmentFile:"
    )


def test_every_alert_has_a_firing_and_a_quiet_test(r: Rendered) -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in (RULES_TEST, PAIR_RULES_TEST, WORKER_RULES_TEST):
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    alerts = {a["alert"] for rules in (r.rules, r.pair_rules, r.worker["rules"]) for a in _alerts(rules)}
    assert alerts - fired == set(), "alerts without a test where they fire"
    assert alerts - quiet == set(), "alerts without a test where they stay quiet"
    assert len(alerts) == 24


def test_the_rule_file_in_the_config_is_what_the_module_gave_services_prometheus(
    r: Rendered,
) -> None:
    assert len(r.rule_files) == 1
    assert json.loads(r.rules_text) == json.loads("\n".join(r.rules_option))
    assert "VllmStationNcclTransport" not in r.rules_text, "a single station has no NCCL alert"


def test_the_rendered_config_passes_promtool(r: Rendered, tmp_path: Path) -> None:
    """Only the rule paths differ from what NixOS renders (no /nix/store here)."""
    targets = {sc["job_name"]: sc["static_configs"][0]["targets"][0] for sc in r.config["scrape_configs"]}
    assert targets == {
        "vllm-station": "127.0.0.1:8888",
        "node": "127.0.0.1:9100",
        "vllm-station-gateway": "127.0.0.1:9113",  # nginx's exporter: the station has the gateway in front
    }
    path = local_config(r, tmp_path, targets, scrape_interval="15s", evaluation_interval="1m")
    proc = subprocess.run(
        [_promtool(), "check", "config", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_rule_and_panel_names_a_metric(r: Rendered) -> None:
    """The extractor the metric-name test relies on finds a metric in every expression."""
    for rule in _alerts(r.rules) + _alerts(r.pair_rules) + _alerts(r.worker["rules"]):
        assert promql.metric_names(rule["expr"]), rule["alert"]
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            assert promql.metric_names(target["expr"]), (panel["title"], target["expr"])
    assert promql.metric_names('sum by (le) (rate(a_bucket{le="1"}[5m])) > 2 * 2^30 and on() b == 1') == {
        "a_bucket",
        "b",
    }


def test_the_units_command_lines_parse_with_the_real_station_cli(r: Rendered) -> None:
    for unit, command, key in (
        # the probe loads the key at each run (a credential); the watchdog reads the file itself, again
        # when it changes: a rotation needs no restart of it (docs/secrets.md)
        ("vllm-station-probe.service", "probe", "%d/api-key"),
        ("vllm-station-watchdog.service", "watchdog", "/var/lib/vllm-station-secrets/vllm-api-key"),
    ):
        argv = r.unit_argv(unit)
        assert argv[0].endswith("/bin/station") and argv[1] == command
        args = cli.build_parser(command).parse_args(argv[1:])
        assert args.base_url == "http://127.0.0.1:8888" and args.model == "glm-5.3-flash"
        assert args.api_key_file == key
        assert str(args.textfile_dir) == r.textfile_dir
        assert f"vllm-station-secrets@{unit}" in r.units[unit], "the key is checked before the unit starts"
    watchdog = cli.build_parser("watchdog").parse_args(r.unit_argv("vllm-station-watchdog.service")[1:])
    assert watchdog.unit == "vllm-station.service" and watchdog.systemctl.endswith("/bin/systemctl")
    # a wedge restart kills the container (the graceful stop would wait out --shutdown-timeout)
    assert watchdog.runtime.endswith("/bin/docker") and watchdog.container == "vllm-station"
    assert (watchdog.interval, watchdog.probe_timeout, watchdog.wedge_verdicts) == (
        30,
        20,
        3,
    )
    timer = r.units["vllm-station-probe.timer"]
    assert "OnUnitActiveSec=300" in timer and "WantedBy=timers.target" in timer
    assert watchdog.pair_worker is None, "a station that is no pair's head restarts its unit alone"


def test_the_pair_heads_watchdog_restarts_the_pair_in_order(r: Rendered) -> None:
    """On the pair's head the watchdog knows the worker's beacon (the one the head's start waits for) and
    waits for the worker as long as that start does (pair.workerWaitSeconds)."""
    line = next(x for x in r.pair_head_watchdog.splitlines() if x.startswith("ExecStart="))
    argv = exec_argv(line.removeprefix("ExecStart="))
    args = cli.build_parser("watchdog").parse_args(argv[1:])
    assert args.pair_worker == "http://192.168.100.2:29510/ready"
    assert args.pair_wait == 300 and args.unit == "vllm-station.service"


# `systemd-analyze security` exposure (0 best, 10 worst) of the units monitoring renders, as measured on
# systemd 252: a change that loosens a sandbox fails.
MAX_EXPOSURE = {
    "vllm-station-probe.service": 1.4,
    "vllm-station-watchdog.service": 1.7,  # root: restarting the serving unit is a call only root may make
}


@pytest.mark.parametrize("unit", sorted(MAX_EXPOSURE))
def test_unit_exposure(r: Rendered, unit: str, tmp_path: Path) -> None:
    score = exposure(unit, r.units[unit], tmp_path)
    print(f"systemd-analyze security exposure of {unit}: {score}")
    assert score <= MAX_EXPOSURE[unit], f"exposure {score} > {MAX_EXPOSURE[unit]} for {unit}"


def test_the_textfile_directory_is_one_contract(r: Rendered) -> None:
    assert r.textfile_dir == str(textfile.DEFAULT_DIR)
    assert f"--collector.textfile.directory={textfile.DEFAULT_DIR}" in r.node_exporter_args
    assert {
        "--collector.systemd",
        "--collector.systemd.enable-restarts-metrics",
    } <= set(r.node_exporter_args)
    watchdog = r.units["vllm-station-watchdog.service"]
    assert f"ReadWritePaths=-{textfile.DEFAULT_DIR}" in watchdog


def test_the_dashboard_is_provisioned_with_its_data_source(r: Rendered) -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "vllm-station"
    sources = {t["datasource"]["uid"] for p in dash["panels"] for t in p.get("targets", [])}
    assert sources == {r.datasource_uid}
    assert re.fullmatch(r"/nix/store/[0-9a-z]{32}-dashboards", r.dashboards_path), r.dashboards_path
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for word in (
        "tokens per second",
        "ttft",
        "inter-token",
        "waiting",
        "kv cache",
        "restarts",
        "probe",
    ):
        assert word in titles, word


@pytest.mark.nix_flake
def test_the_flake_output_is_the_rule_file_any_prometheus_loads(tmp_path: Path) -> None:
    lib = require_tree("NIXPKGS_LIB", "lib/default.nix", "the flake's prometheusRules")
    rules = _flake_eval(str(lib), "prometheusRules")
    assert {a["alert"] for a in _alerts(json.loads(rules))} >= {
        "VllmStationNcclTransport",
        "VllmStationThroughputLow",
    }
    for test_file in (RULES_TEST, PAIR_RULES_TEST):
        proc = _run_tests(rules, test_file, tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (REPO / "modules/monitoring/rules.nix").exists()


# ---- end to end: Prometheus -> Alertmanager -> a webhook ------------------------------------------------


class _Exporter(http.server.BaseHTTPRequestHandler):
    """node_exporter's stand-in: a textfile figure whose rule fires at once (prestart's 2 GiB on node 1)."""

    body = (
        b"# TYPE station_page_cache_file_pages_bytes gauge\n"
        b'station_page_cache_file_pages_bytes{node="1",source="prestart"} 2147483648\n'
    )

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Webhook(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        type(self).received.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> http.server.ThreadingHTTPServer:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    return srv


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_firing_rule_reaches_the_webhook_through_the_rendered_alertmanager(
    r: Rendered, tmp_path: Path
) -> None:
    """Debian's Prometheus (the rendered configuration and rules) and Alertmanager (the rendered
    alertmanager.yml) deliver a firing alert to a webhook. Differences, each because the test runs here: the
    targets and the webhook URL are the test's servers, the e-mail receiver is left out (no SMTP server),
    intervals are 1 s and group_wait 1 s (the rendered 30 s would only slow the test)."""
    prometheus, alertmanager = shutil.which("prometheus"), shutil.which("prometheus-alertmanager")
    if prometheus is None or alertmanager is None:
        pytest.skip(f"no prometheus / alertmanager: {NEED_DEBIAN}; {NEED_AMTOOL}")
    _Webhook.received = []
    exporter, webhook = _serve(_Exporter), _serve(_Webhook)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        am_config = json.loads(r.alertmanager_config)
        (receiver,) = am_config["receivers"]
        receiver.pop("email_configs")
        (hook,) = receiver["webhook_configs"]
        hook["url"] = f"http://127.0.0.1:{webhook.server_address[1]}/alerts"
        am_config["route"]["group_wait"] = "1s"
        (tmp_path / "alertmanager.yml").write_text(json.dumps(am_config))
        am_port, prom_port = _port(), _port()
        config_path = local_config(
            r, tmp_path, {"node": f"127.0.0.1:{exporter.server_address[1]}"}, evaluation_interval="1s"
        )
        config = json.loads(config_path.read_text())
        assert config["alerting"]["alertmanagers"][0]["static_configs"] == [{"targets": ["127.0.0.1:9093"]}]
        config["alerting"]["alertmanagers"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{am_port}"]}]
        config_path.write_text(json.dumps(config))
        for argv, log in (
            ([alertmanager, f"--config.file={tmp_path / 'alertmanager.yml'}",
              f"--storage.path={tmp_path / 'am'}", f"--web.listen-address=127.0.0.1:{am_port}",
              "--cluster.listen-address="], "alertmanager.log"),
            ([prometheus, f"--config.file={config_path}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
              f"--web.listen-address=127.0.0.1:{prom_port}"], "prometheus.log"),
        ):  # fmt: skip
            with open(tmp_path / log, "wb") as out:
                procs.append(
                    subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
                )
        deadline = time.monotonic() + 60
        firing: list[dict[str, Any]] = []
        while not firing and time.monotonic() < deadline:
            firing = [
                a for msg in _Webhook.received for a in msg["alerts"]
                if a["labels"]["alertname"] == "VllmStationPageCacheHigh"
            ]  # fmt: skip
            time.sleep(0.5)
        logs = "".join((tmp_path / n).read_text()[-2000:] for n in ("alertmanager.log", "prometheus.log"))
        assert firing, f"no alert reached the webhook:\n{logs}"
        assert firing[0]["status"] == "firing"
        assert firing[0]["labels"]["source"] == "prestart" and firing[0]["labels"]["severity"] == "warning"
        assert _Webhook.received[0]["receiver"] == "vllm-station"
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        exporter.shutdown()
        webhook.shutdown()
