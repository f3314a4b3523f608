"""What NixOS renders for monitoring (checks/monitoring/render.nix), read back as the real programs need it.

The Prometheus configuration is taken from the derivations NixOS would build, not re-assembled here: the
prometheus unit names `prometheus.yml-checkconfig-checked`, whose input `prometheus.yml` carries the
configuration as the JSON that nixpkgs' YAML generator converts (JSON is YAML: Prometheus reads it as is),
and each rule file named there comes from a `prometheus.rules` text derivation. One evaluation per test
session (functools.cache).
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nixenv import REPO, require_nix, require_tree, run_nix

HERE = Path(__file__).resolve().parent
RENDER = HERE / "render.nix"
RULES_TEST = HERE / "rules.test.yml"
PAIR_RULES_TEST = HERE / "rules-pair.test.yml"
WORKER_RULES_TEST = HERE / "rules-worker.test.yml"
DASHBOARD = REPO / "modules" / "monitoring" / "dashboards" / "vllm-station.json"


@dataclass(frozen=True)
class Derivation:
    drv: str
    name: str
    out: str
    env: dict[str, str]
    inputs: list[str]


@dataclass(frozen=True)
class Rendered:
    config: dict[str, Any]  # prometheus.yml as services.prometheus generates it
    rule_files: dict[str, str]  # store path named in rule_files -> the rule file's text
    rules_option: list[str]  # services.prometheus.rules
    units: dict[str, str]
    node_exporter_args: list[str]
    dashboards_path: str
    datasource_uid: str
    pair_rules: dict[str, Any]
    pair_head_watchdog: str  # the pair head's vllm-station-watchdog.service
    worker: dict[str, Any]  # station-b with monitoring on (render.nix `worker`)
    head: dict[str, Any]  # station-a with monitoring on: its node exporter
    textfile_dir: str
    alertmanager_config: str  # alertmanager.yml (JSON) as nixpkgs' module writes it
    warnings: list[str]
    variants: dict[str, dict[str, list[str]]]  # variant -> {"warnings": […], "assertions": […]}

    @property
    def rules_text(self) -> str:
        """The one rule file of the configuration (the station's rules)."""
        (text,) = self.rule_files.values()
        return text

    @property
    def rules(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.rules_text)
        return data

    def unit_argv(self, unit: str) -> list[str]:
        line = next(x for x in self.units[unit].splitlines() if x.startswith("ExecStart="))
        return exec_argv(line.removeprefix("ExecStart="))


def exec_argv(value: str) -> list[str]:
    """An ExecStart value (escapeSystemdExecArgs: "a" "b" …, then unquoted words) split into arguments."""
    pattern = re.compile(r'"((?:[^"\\]|\\.)*)"|(\S+)')
    return [m.group(1) if m.group(1) is not None else m.group(2) for m in pattern.finditer(value)]


def _show(drvs: list[str]) -> dict[str, Derivation]:
    proc = run_nix(["nix", "derivation", "show", *drvs], timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"nix derivation show failed:\n{proc.stderr[-2000:]}")
    out = {}
    for drv, raw in json.loads(proc.stdout).items():
        env = dict(raw["env"])
        out[drv] = Derivation(
            drv,
            env.get("name", ""),
            env.get("out", ""),
            env,
            sorted(raw.get("inputDrvs", {})),
        )
    return out


def _input_named(d: Derivation, name: str) -> Derivation:
    found = [x for x in _show(d.inputs).values() if x.name == name]
    if len(found) != 1:
        raise AssertionError(f"{d.name}: expected one input derivation named {name}, got {len(found)}")
    return found[0]


@functools.cache
def rendered() -> Rendered:
    require_nix()
    tree = require_tree(
        "NIXOS_TREE",
        "nixos/lib/eval-config.nix",
        "the monitoring checks (rendered by NixOS)",
    )
    proc = run_nix(
        ["nix-instantiate", "--eval", "--read-write-mode", "--strict", "--json", str(RENDER),
         "--argstr", "nixosTree", str(tree)],
        timeout=900,
    )  # fmt: skip
    if proc.returncode != 0:
        raise AssertionError(f"rendering monitored-station failed:\n{proc.stderr[-4000:]}")
    data = json.loads(proc.stdout)
    checked = [d for d in _show(data["prometheusDrvs"]).values() if d.name.startswith("prometheus.yml")]
    assert len(checked) == 1, [d.name for d in checked]
    yml = checked[0] if checked[0].name == "prometheus.yml" else _input_named(checked[0], "prometheus.yml")
    config = json.loads(yml.env["value"])
    rule_files: dict[str, str] = {}
    inputs = _show(yml.inputs)
    for path in config["rule_files"]:
        holder = next(d for d in inputs.values() if d.out == path)
        text_drv = holder if "text" in holder.env else _input_named(holder, "prometheus.rules")
        rule_files[path] = text_drv.env["text"]
    return Rendered(
        config=config,
        rule_files=rule_files,
        rules_option=data["rulesOption"],
        units=data["units"],
        node_exporter_args=data["nodeExporterArgs"],
        dashboards_path=data["dashboardsPath"],
        datasource_uid=data["datasourceUid"],
        pair_rules=data["pairRules"],
        pair_head_watchdog=data["pairHeadWatchdog"],
        worker=data["worker"],
        head=data["head"],
        textfile_dir=data["textfileDir"],
        alertmanager_config=data["alertmanagerConfig"],
        warnings=data["warnings"],
        variants=data["variants"],
    )


def local_config(
    r: Rendered,
    work: Path,
    targets: dict[str, str],
    *,
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
) -> Path:
    """The rendered configuration for a Prometheus on this machine. The only differences, each stated:
    rule files are local copies of the rendered texts (no /nix/store here), each job's target is the test's
    server (`targets`: job -> host:port), and the intervals are short (a test cannot wait 15 s a scrape)."""
    config = json.loads(json.dumps(r.config))
    local_rules = []
    for i, text in enumerate(r.rule_files.values()):
        path = work / f"rules-{i}.json"
        path.write_text(text)
        local_rules.append(str(path))
    config["rule_files"] = local_rules
    config.setdefault("global", {})["evaluation_interval"] = evaluation_interval
    jobs = {sc["job_name"] for sc in config["scrape_configs"]}
    assert set(targets) <= jobs, f"no such job: {set(targets) - jobs}"
    for sc in config["scrape_configs"]:
        if sc["job_name"] in targets:
            sc["static_configs"] = [{"targets": [targets[sc["job_name"]]]}]
            sc["scrape_interval"] = scrape_interval
    path = work / "prometheus.yml"
    path.write_text(json.dumps(config, indent=1))
    return path


def env_without_keys() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("STATION_API_KEY", "OPENAI_API_KEY")}


@functools.cache
def node_exporter_args() -> list[str]:
    """Only the node exporter's rendered command line (one lazy evaluation; the system tier needs no more)."""
    require_nix()
    tree = require_tree(
        "NIXOS_TREE",
        "nixos/lib/eval-config.nix",
        "the monitoring checks (rendered by NixOS)",
    )
    proc = run_nix(
        ["nix-instantiate", "--eval", "--strict", "--json", str(RENDER), "--argstr", "nixosTree", str(tree),
         "-A", "nodeExporterArgs"],
        timeout=600,
    )  # fmt: skip
    if proc.returncode != 0:
        raise AssertionError(f"rendering the node exporter failed:\n{proc.stderr[-4000:]}")
    args: list[str] = json.loads(proc.stdout)
    return args
