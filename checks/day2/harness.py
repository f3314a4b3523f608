"""The day2 tier's instruments: a webhook receiver that records alerts, a client that keeps traffic on the
engine and counts what each step costs, and the station's monitoring run with the real programs.

- `Webhook`: a small HTTP server on 127.0.0.1 that Alertmanager posts to (its JSON webhook format);
  every alert is kept with the time it arrived, so a step reports which alerts it delivered and their
  latency from the fault.
- `Traffic`: one client thread sending short streamed completions back to back, with the station's key;
  each request is `ok`, `aborted` (sent, then lost: the connection reset, the stream cut, no answer within
  30 s), or `refused` (never taken: connection refused, or an HTTP error status). Downtime is the longest
  stretch without a successful request.
- `Monitoring`: Debian's Prometheus, Alertmanager and node_exporter inside the station's machine, as
  transient units, with what NixOS renders for the station (checks/day2/monitoring.nix): the rendered
  prometheus.yml (the derivation nixpkgs' module generates, read as checks/monitoring/rendered.py
  reads monitored-station's), its rule file, alertmanager.yml, node_exporter's flags. The stated
  differences: each program listens on a free port (the test machine shares the host's network), the
  targets and the webhook URL point there, scrapes and rule evaluation run every second, and
  Alertmanager's group_wait / group_interval are 1 s (a test cannot wait 30 s and 5 min).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import httpx
from monitoring.rendered import _input_named, _show
from nixenv import REPO, run_nix
from system.common import free_port
from system.machine import Machine

RENDER = REPO / "checks" / "day2" / "monitoring.nix"


# ---- alerts -----------------------------------------------------------------------------------------


@dataclass
class Alert:
    name: str
    status: str  # firing | resolved
    received: float  # time.monotonic() when it arrived
    labels: dict[str, str]


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        now = time.monotonic()
        hook: Webhook = self.server.hook  # type: ignore[attr-defined]
        with hook.lock:
            for a in body.get("alerts", []):
                labels = dict(a.get("labels", {}))
                hook.alerts.append(Alert(labels.get("alertname", "?"), a.get("status", "?"), now, labels))
        self.send_response(200)
        self.end_headers()


class Webhook:
    """`with Webhook() as hook: hook.url` — the receiver Alertmanager posts to."""

    def __init__(self) -> None:
        self.alerts: list[Alert] = []
        self.lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.hook = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/day2-webhook"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def since(self, t: float, status: str = "firing") -> list[Alert]:
        with self.lock:
            return [a for a in self.alerts if a.received >= t and a.status == status]

    def wait_for(self, name: str, since: float, timeout: float) -> Alert:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [a for a in self.since(since) if a.name == name]
            if found:
                return found[0]
            time.sleep(0.5)
        got = sorted({a.name for a in self.since(since)})
        raise AssertionError(f"no {name} alert reached the webhook within {timeout:.0f} s (got: {got})")


# ---- traffic ----------------------------------------------------------------------------------------


@dataclass
class Outcome:
    start: float
    end: float
    kind: str  # ok | aborted | refused
    detail: str = ""


@dataclass
class Traffic:
    """Short streamed chat completions back to back against `base_url` with `key`."""

    base_url: str
    key: str
    model: str
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _run(self) -> None:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8,
            "stream": True,
        }
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(timeout=httpx.Timeout(30, connect=2)) as client:
            while not self._stop.is_set():
                t0 = time.monotonic()
                began = False
                try:
                    with client.stream("POST", f"{self.base_url}/v1/chat/completions", json=body,
                                       headers=headers) as r:  # fmt: skip
                        if r.status_code != 200:
                            kind, detail = "refused", f"HTTP {r.status_code}"
                        else:
                            done = False
                            for line in r.iter_lines():
                                began = True
                                if line.strip() == "data: [DONE]":
                                    done = True
                            kind, detail = ("ok", "") if done else ("aborted", "stream ended without [DONE]")
                except (httpx.ConnectError, httpx.ConnectTimeout) as err:
                    kind, detail = "refused", type(err).__name__
                except httpx.HTTPError as err:  # sent, then lost: a reset, a cut stream, no answer in time
                    kind, detail = "aborted", f"{type(err).__name__}{' mid-stream' if began else ''}"
                self.outcomes.append(Outcome(t0, time.monotonic(), kind, detail))
                if kind != "ok":
                    time.sleep(0.5)

    def window(self, t0: float, t1: float) -> list[Outcome]:
        return [o for o in list(self.outcomes) if o.start >= t0 and o.start < t1]

    def figures(self, t0: float, t1: float) -> dict[str, float]:
        """Requests in [t0, t1): how many of each kind, and the downtime (s): the longest stretch between
        two successful requests' ends that holds a failed one (0 when none failed)."""
        seen = self.window(t0, t1)
        downtime = 0.0
        last_ok = t0
        failing_since: float | None = None
        for o in seen:
            if o.kind == "ok":
                if failing_since is not None:
                    downtime = max(downtime, o.end - last_ok)
                    failing_since = None
                last_ok = o.end
            elif failing_since is None:
                failing_since = o.start
        if failing_since is not None:
            downtime = max(downtime, t1 - last_ok)
        return {
            "requests": len(seen),
            "ok": sum(o.kind == "ok" for o in seen),
            "aborted": sum(o.kind == "aborted" for o in seen),
            "refused": sum(o.kind == "refused" for o in seen),
            "downtime_s": round(downtime, 1),
        }


# ---- monitoring -------------------------------------------------------------------------------------


@dataclass
class RenderedMonitoring:
    prometheus: dict[str, Any]  # prometheus.yml as nixpkgs' module generates it
    rule_files: dict[str, str]  # store path -> rule file text
    alertmanager: dict[str, Any]
    node_exporter_args: list[str]
    units: dict[str, str]


def render_monitoring(tree: Path) -> RenderedMonitoring:
    proc = run_nix(
        ["nix-instantiate", "--eval", "--read-write-mode", "--strict", "--json", str(RENDER),
         "--argstr", "nixosTree", str(tree)],
        timeout=900,
    )  # fmt: skip
    if proc.returncode != 0:
        raise AssertionError(f"rendering the day2 station's monitoring failed:\n{proc.stderr[-4000:]}")
    data = json.loads(proc.stdout)
    checked = [d for d in _show(data["prometheusDrvs"]).values() if d.name.startswith("prometheus.yml")]
    assert len(checked) == 1, [d.name for d in checked]
    yml = checked[0] if checked[0].name == "prometheus.yml" else _input_named(checked[0], "prometheus.yml")
    config = json.loads(yml.env["value"])
    inputs = _show(yml.inputs)
    rule_files = {}
    for path in config["rule_files"]:
        holder = next(d for d in inputs.values() if d.out == path)
        text_drv = holder if "text" in holder.env else _input_named(holder, "prometheus.rules")
        rule_files[path] = text_drv.env["text"]
    return RenderedMonitoring(
        config, rule_files, json.loads(data["alertmanagerConfig"]), data["nodeExporterArgs"], data["units"]
    )


@dataclass
class Monitoring:
    """Prometheus, Alertmanager and node_exporter in `machine` (transient units), wired as rendered."""

    rendered: RenderedMonitoring
    machine: Machine
    webhook_url: str
    ports: dict[str, int] = field(default_factory=dict)
    etc = "/run/day2-monitoring"

    UNITS = ("day2-node-exporter", "day2-alertmanager", "day2-prometheus")

    def start(self) -> None:
        m = self.machine
        self.ports = {name: free_port() for name in ("node", "alertmanager", "prometheus")}
        r = self.rendered
        # node_exporter: the rendered flags, its own port
        args = list(r.node_exporter_args[1:])
        i = args.index("--web.listen-address")
        args[i + 1] = f"127.0.0.1:{self.ports['node']}"
        # alertmanager.yml: the rendered receivers and route; the webhook is the test's, the waits 1 s
        am = json.loads(json.dumps(r.alertmanager))
        hooks = [w for rec in am["receivers"] for w in rec.get("webhook_configs", [])]
        assert hooks, f"the rendered alertmanager.yml has no webhook receiver: {am}"
        for w in hooks:
            w["url"] = self.webhook_url
        am["route"].update(group_wait="1s", group_interval="1s")
        # prometheus.yml: the rendered one; targets are this machine's ports, intervals 1 s
        prom = json.loads(json.dumps(r.prometheus))
        rules = []
        for n, text in enumerate(r.rule_files.values()):
            path = f"{self.etc}/rules-{n}.json"
            m.write(path, text)
            rules.append(path)
        prom["rule_files"] = rules
        prom.setdefault("global", {}).update(scrape_interval="1s", evaluation_interval="1s")
        for sc in prom["scrape_configs"]:
            sc["scrape_interval"] = "1s"
            sc.pop("scrape_timeout", None)
            if sc["job_name"].startswith("node"):
                sc["static_configs"] = [{"targets": [f"127.0.0.1:{self.ports['node']}"]}]
        for amc in prom.get("alerting", {}).get("alertmanagers", []):
            amc["static_configs"] = [{"targets": [f"127.0.0.1:{self.ports['alertmanager']}"]}]
        m.write(f"{self.etc}/alertmanager.yml", json.dumps(am, indent=1))
        m.write(f"{self.etc}/prometheus.yml", json.dumps(prom, indent=1))
        m.run(["mkdir", "-p", "/var/lib/day2-prometheus", "/var/lib/day2-alertmanager"])
        run = ["systemd-run", "--collect", "-p", "MemoryMax=1G"]
        m.run([*run, "--unit=day2-node-exporter", "/usr/bin/prometheus-node-exporter", *args])
        m.run([*run, "--unit=day2-alertmanager", "/usr/bin/prometheus-alertmanager",
               f"--config.file={self.etc}/alertmanager.yml", "--storage.path=/var/lib/day2-alertmanager",
               f"--web.listen-address=127.0.0.1:{self.ports['alertmanager']}", "--cluster.listen-address="])  # fmt: skip
        m.run([*run, "--unit=day2-prometheus", "/usr/bin/prometheus",
               f"--config.file={self.etc}/prometheus.yml", "--storage.tsdb.path=/var/lib/day2-prometheus",
               f"--web.listen-address=127.0.0.1:{self.ports['prometheus']}"])  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._ready():
                return
            time.sleep(1)
        raise AssertionError("Prometheus, Alertmanager or node_exporter did not answer within 60 s:\n" + "\n".join(
            m.journal(u + ".service")[-1500:] for u in self.UNITS
        ))  # fmt: skip

    def _ready(self) -> bool:
        urls = [f"http://127.0.0.1:{self.ports['node']}/metrics",
                f"http://127.0.0.1:{self.ports['alertmanager']}/-/ready",
                f"http://127.0.0.1:{self.ports['prometheus']}/-/ready"]  # fmt: skip
        try:
            return all(httpx.get(u, timeout=2).status_code == 200 for u in urls)
        except httpx.HTTPError:
            return False

    def firing(self) -> set[str]:
        """Alerts Prometheus has firing now."""
        r = httpx.get(f"http://127.0.0.1:{self.ports['prometheus']}/api/v1/alerts", timeout=5)
        return {a["labels"]["alertname"] for a in r.json()["data"]["alerts"] if a["state"] == "firing"}

    def query(self, expr: str) -> list[dict[str, Any]]:
        r = httpx.get(f"http://127.0.0.1:{self.ports['prometheus']}/api/v1/query", params={"query": expr},
                      timeout=5)  # fmt: skip
        result: list[dict[str, Any]] = r.json()["data"]["result"]
        return result

    def stop(self) -> None:
        for unit in self.UNITS:
            self.machine.systemctl("stop", unit + ".service", check=False)


def write_figures(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps(rows, indent=1))
