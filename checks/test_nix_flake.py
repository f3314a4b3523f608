"""Nix tiers `nix_parse` (every .nix file parses) and `nix_flake` (the flake's outputs, offline)."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import tomllib
from typing import Any

import pytest
from nixenv import REPO, flake_snapshot, require_tree, run_nix, store_path

NIX_FILES = sorted(
    p.relative_to(REPO).as_posix()
    for p in REPO.rglob("*.nix")
    if not any(part.startswith(".") for part in p.relative_to(REPO).parts)
)
PYPROJECT = tomllib.loads((REPO / "pkgs/station-tools/pyproject.toml").read_text())
SYSTEMS = ["x86_64-linux", "aarch64-linux"]
APPS = ["smoke", "preflight", "bench", "download"]


@pytest.mark.nix_parse
@pytest.mark.parametrize("path", NIX_FILES)
def test_parses(path: str) -> None:
    proc = run_nix(["nix-instantiate", "--parse", str(REPO / path)], timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.nix_parse
def test_layout() -> None:
    for name in ["flake.nix", "flake.lock", "modules", "pkgs", "scripts", "checks", "README.md", ".ci/run"]:
        assert (REPO / name).exists(), f"{name} missing from the top level"


@pytest.mark.nix_flake
def test_lock_pins_the_declared_input() -> None:
    lock = json.loads((REPO / "flake.lock").read_text())
    node = lock["nodes"][lock["nodes"]["root"]["inputs"]["nixpkgs"]]
    url = re.search(r'inputs\.nixpkgs\.url\s*=\s*"github:([^/]+)/([^/]+)/([^"]+)"', (REPO / "flake.nix").read_text())
    assert url, "flake.nix must declare inputs.nixpkgs.url = github:OWNER/REPO/REF"
    owner, repo, ref = url.groups()
    assert node["original"] == {"owner": owner, "repo": repo, "ref": ref, "type": "github"}
    assert re.fullmatch(r"[0-9a-f]{40}", node["locked"]["rev"])
    assert re.fullmatch(r"sha256-[A-Za-z0-9+/]{43}=", node["locked"]["narHash"])
    assert list(lock["nodes"]["root"]["inputs"]) == ["nixpkgs"], "one public input only"


def _flake_eval(tree: str, attr: str, apply: str | None = None, raw: bool = False) -> str:
    args = ["nix", "eval", "--offline", "--override-input", "nixpkgs", f"path:{store_path(tree)}"]
    args += ["--raw"] if raw else ["--json"]
    args.append(f"path:{flake_snapshot()}#{attr}")
    if apply:
        args += ["--apply", apply]
    proc = run_nix(args, timeout=600)
    assert proc.returncode == 0, f"nix eval .#{attr} failed:\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.nix_flake
def test_outputs_with_lib_tree() -> None:
    lib = require_tree("NIXPKGS_LIB", "lib/default.nix", "flake structure against nixpkgs lib")
    def names(attr: str, apply: str = "builtins.attrNames") -> Any:
        return json.loads(_flake_eval(str(lib), attr, apply=apply))

    out = {
        "modules": names("nixosModules"),
        "apps": names("apps", "builtins.mapAttrs (_: builtins.attrNames)"),
        "packages": names("packages"),
        "configs": names("nixosConfigurations"),
    }
    assert {"default", "serve", "host", "download", "pair"} <= set(out["modules"])
    assert sorted(out["packages"]) == sorted(SYSTEMS)
    for system in SYSTEMS:
        assert set(APPS) <= set(out["apps"][system])
    assert {"flash-station", "station-a", "station-b"} <= set(out["configs"])


@pytest.mark.nix_flake
@pytest.mark.parametrize("system", SYSTEMS)
def test_package_and_apps_with_full_tree(system: str) -> None:
    tree = require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "flake package and apps evaluation")
    meta = json.loads(
        _flake_eval(
            str(tree),
            f"packages.{system}.default",
            apply="p: { inherit (p) version pname; main = p.meta.mainProgram; drv = p.drvPath; }",
        )
    )
    assert meta["main"] == "station"
    assert meta["version"] == PYPROJECT["project"]["version"], "version must come from pyproject.toml"
    assert meta["drv"].endswith(".drv")
    for app in APPS:
        program = _flake_eval(str(tree), f"apps.{system}.{app}.program", raw=True)
        assert re.fullmatch(rf"/nix/store/[a-z0-9]{{32}}-vllm-station-[^/]+/bin/station-{app}", program), program
        # the console script is the generated `main(argv)` of that command (vllm_station.entry)
        script = PYPROJECT["project"]["scripts"][f"station-{app}"]
        assert script == f"vllm_station.entry:{app}", f"console script station-{app}: {script}"


@pytest.mark.nix_flake
def test_devshell_with_full_tree() -> None:
    tree = require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "devShell evaluation")
    drv = json.loads(_flake_eval(str(tree), "devShells.x86_64-linux.default.drvPath"))
    assert drv.endswith(".drv")


def test_git_sees_no_fetched_tree() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    for marker in ["lib/modules.nix", "nixos/modules/module-list.nix", "pkgs/top-level/all-packages.nix"]:
        assert not any(line.endswith(marker) for line in tracked.splitlines()), f"fetched nixpkgs file {marker} is tracked"


@pytest.mark.nix_flake
def test_flake_checks_cover_every_tier() -> None:
    """`checks.<system>` holds the package, its suite, the module tests, the examples and the VM tests."""
    lib = require_tree("NIXPKGS_LIB", "lib/default.nix", "flake checks listing against nixpkgs lib")
    names = json.loads(_flake_eval(str(lib), "checks.x86_64-linux", apply="builtins.attrNames"))
    assert set(names) == {"package", "package-tests", "module-tests", "flash-station", "station-a", "station-b", "vm-serve", "vm-pair"}


@pytest.mark.nix_flake
def test_flake_module_tests_check_passes() -> None:
    """The module-tests check evaluates the same tests as the nix_lib tier, through the flake."""
    tree = require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "flake module-tests check")
    drv = json.loads(_flake_eval(str(tree), "checks.x86_64-linux.module-tests.drvPath"))
    assert drv.endswith("-vllm-station-module-tests.drv")


@pytest.mark.nix_flake
def test_flake_package_tests_check_instantiates() -> None:
    """The suite is its own check (the runtime package's source holds no tests/)."""
    tree = require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "flake package-tests check")
    drv = json.loads(_flake_eval(str(tree), "checks.x86_64-linux.package-tests.drvPath"))
    assert drv.endswith(f"-vllm-station-tests-{PYPROJECT['project']['version']}.drv"), drv


# ---- every nixosConfigurations output: no vLLM port reachable from another host but over TLS from a gateway ----

# What each configuration renders about the network, for both firewall backends (the example as it is:
# iptables; and the same with networking.nftables.enable = true). Nothing is built.
_EXPOSURE = r"""
configs: builtins.mapAttrs (name: c:
  let
    summary = cfg:
      let
        v = cfg.services.vllm-station;
        fw = cfg.networking.firewall;
        nginx = cfg.services.nginx;
        loc = l: (if l.proxyPass != null then l.proxyPass else "") + "\n" + l.extraConfig;
      in {
        failed = map (a: a.message) (builtins.filter (a: !a.assertion) cfg.assertions);
        serve = {
          inherit (v.serve) enable headless port exposeUnauthenticatedVllm;
          args = if v.serve.enable then v.serve.vllmArgs else [ ];
        };
        listener = { inherit (v.stationListener) enable host port gateways; };
        gateway = {
          inherit (v.gateway) enable port;
          stationTls = v.gateway.stationTls.enable;
          upstreams = map (u: u.address) (builtins.attrValues v.gateway.upstreams);
        };
        firewall = {
          inherit (fw) enable allowedTCPPorts allowedTCPPortRanges extraCommands;
          interfaces = builtins.mapAttrs (_: i: { inherit (i) allowedTCPPorts allowedTCPPortRanges; }) fw.interfaces;
          nftables = cfg.networking.nftables.enable;
          ruleset = if cfg.networking.nftables.enable then cfg.networking.nftables.tables.nixos-fw.content else "";
        };
        vhosts = if !nginx.enable then { } else builtins.mapAttrs (_: h: {
          listen = map (l: { inherit (l) addr port; ssl = l.ssl or false; }) h.listen;
          inherit (h) onlySSL forceSSL listenAddresses;
          extraConfig = h.extraConfig;
          proxies = builtins.concatStringsSep "\n" (map loc (builtins.attrValues h.locations));
        }) nginx.virtualHosts;
      };
  in {
    iptables = summary c.config;
    nftables = summary (c.extendModules { modules = [ { networking.nftables.enable = true; } ]; }).config;
  }) configs
"""

_LOOPBACK = re.compile(r"127\.\d+\.\d+\.\d+|::1|\[::1\]|localhost")


def _ports(spec: str) -> set[int]:
    """'8443' / '32768:60999' / '32768-60999' -> the ports."""
    lo, _, hi = spec.replace(":", "-").partition("-")
    return set(range(int(lo), int(hi or lo) + 1))


def _source_rules(fw: dict[str, Any]) -> list[tuple[frozenset[str], set[int]]]:
    """(sources, ports) of every source-restricted accept rule the firewall renders."""
    rules = []
    if fw["nftables"]:
        for line in fw["ruleset"].splitlines():
            m = re.search(r"ip6? saddr (\{[^}]*\}|\S+) tcp dport (\{[^}]*\}|\S+) accept", line)
            if m:
                sources = frozenset(s.strip() for s in m.group(1).strip("{}").split(","))
                ports = set().union(*(_ports(p.strip()) for p in m.group(2).strip("{}").split(",")))
                rules.append((sources, ports))
    else:
        for line in fw["extraCommands"].splitlines():
            if "nixos-fw-accept" in line and " -s " in line:
                m = re.search(r" -s (\S+) .*--dport (\S+)", line)
                assert m, f"an accept rule with a source this test does not read: {line}"
                rules.append((frozenset([m.group(1)]), _ports(m.group(2))))
    return rules


def _open_to_all(fw: dict[str, Any]) -> set[int]:
    ports = set(fw["allowedTCPPorts"])
    for r in fw["allowedTCPPortRanges"]:
        ports |= set(range(r["from"], r["to"] + 1))
    for i in fw["interfaces"].values():
        ports |= set(i["allowedTCPPorts"])
        for r in i["allowedTCPPortRanges"]:
            ports |= set(range(r["from"], r["to"] + 1))
    return ports


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def _check_exposure(name: str, s: dict[str, Any]) -> list[str]:
    problems = [f"failed assertion: {m}" for m in s["failed"]]
    serve, listener, gw, fw = s["serve"], s["listener"], s["gateway"], s["firewall"]
    if s["serve"]["exposeUnauthenticatedVllm"]:
        problems.append("serve.exposeUnauthenticatedVllm is set")
    if not fw["enable"]:
        problems.append("networking.firewall.enable is false")
    open_all = _open_to_all(fw)
    rules = _source_rules(fw)
    restricted = set().union(*(p for _, p in rules)) if rules else set()
    if serve["enable"] and not serve["headless"]:
        host = _flag(serve["args"], "--host")
        if host is None or not _LOOPBACK.fullmatch(host):
            problems.append(f"vLLM's --host is {host}, not loopback")
        if serve["port"] in open_all | restricted:
            problems.append(f"vLLM's port {serve['port']} is open in the firewall")
    # Every port open to all that nginx listens on is TLS (a plain port 80 only to redirect to it).
    for vname, vh in s["vhosts"].items():
        for listen in vh["listen"]:
            if listen["port"] in open_all and not listen["ssl"] and not (listen["port"] == 80 and vh["forceSSL"]):
                problems.append(f"nginx {vname} serves plain HTTP on open port {listen['port']}")
    # The listener: TLS with client certificates, its port open to exactly the gateways.
    if listener["enable"]:
        vh = s["vhosts"]["vllm-station-listener"]
        if not vh["onlySSL"] or "ssl_verify_client on;" not in vh["extraConfig"]:
            problems.append("the station listener is not mutual TLS")
        if listener["port"] in open_all:
            problems.append(f"the station listener's port {listener['port']} is open to every host")
        sources = set().union(*(src for src, ports in rules if listener["port"] in ports))
        remote = not _LOOPBACK.fullmatch(listener["host"])
        if remote and sources != set(listener["gateways"]):
            problems.append(f"port {listener['port']} is open to {sorted(sources)}, not exactly the gateways {listener['gateways']}")
    # A gateway reaches another host's station over TLS only.
    remote_upstreams = [u for u in gw["upstreams"] if not _LOOPBACK.fullmatch(u.rsplit(":", 1)[0])]
    if gw["enable"] and remote_upstreams and not gw["stationTls"]:
        problems.append(f"the gateway reaches {remote_upstreams} in plain HTTP")
    if gw["enable"] and gw["stationTls"] and "proxy_pass https://" not in "".join(v["proxies"] for v in s["vhosts"].values()):
        problems.append("stationTls is on but the gateway does not proxy over https")
    return [f"{name}: {p}" for p in problems]


@functools.cache
def _exposures() -> dict[str, Any]:
    tree = require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "every nixosConfigurations output")
    result: dict[str, Any] = json.loads(_flake_eval(str(tree), "nixosConfigurations", apply=_EXPOSURE))
    return result


@pytest.mark.nix_flake
def test_no_configuration_lets_another_host_reach_vllm_but_a_gateway_over_tls() -> None:
    """Every nixosConfigurations output, rendered for iptables and for nftables: vLLM on loopback and not
    exposed, its port closed; every open port nginx serves is TLS; a station listener is mutual TLS and
    open to exactly its gateways; a gateway reaches other hosts over TLS only."""
    out = _exposures()
    assert set(out) >= {"flash-station", "station-a", "station-b", "gateway-station", "remote-station"}
    problems = [p for name, both in out.items() for backend, s in both.items()
                for p in _check_exposure(f"{name} ({backend})", s)]  # fmt: skip
    assert problems == [], "\n".join(problems)


@pytest.mark.nix_flake
def test_the_examples_put_the_gateway_in_front_and_reach_remote_stations_over_tls() -> None:
    """What makes the walk above bite: the flagship and station A serve through their gateway, the
    gateway example reaches 10.10.0.2/3 over TLS, and remote-station's port is opened to its gateway by
    a rule of each backend."""
    out = _exposures()
    for name in ("flash-station", "station-a", "gateway-station", "monitored-station"):
        gw = out[name]["iptables"]["gateway"]
        assert gw["enable"], f"{name}: no gateway in front"
        assert 443 in _open_to_all(out[name]["iptables"]["firewall"]), f"{name}: the gateway's port is closed"
    gw = out["gateway-station"]["iptables"]["gateway"]
    assert gw["stationTls"] and {"10.10.0.2:8443", "10.10.0.3:8443"} <= set(gw["upstreams"])
    for backend in ("iptables", "nftables"):
        rules = _source_rules(out["remote-station"][backend]["firewall"])
        assert rules == [(frozenset({"10.10.0.1"}), {8443})], (backend, rules)


def test_the_exposure_walk_catches_what_it_guards() -> None:
    """The checker itself, on summaries that break each rule (no Nix needed)."""
    good = {
        "failed": [],
        "serve": {"enable": True, "headless": False, "port": 8888, "exposeUnauthenticatedVllm": False,
                  "args": ["m", "--host", "127.0.0.1", "--port", "8888"]},
        "listener": {"enable": True, "host": "10.10.0.2", "port": 8443, "gateways": ["10.10.0.1"]},
        "gateway": {"enable": False, "port": 443, "stationTls": False, "upstreams": []},
        "firewall": {"enable": True, "allowedTCPPorts": [], "allowedTCPPortRanges": [], "interfaces": {},
                     "nftables": False, "ruleset": "",
                     "extraCommands": "iptables -w -A nixos-fw -p tcp -s 10.10.0.1 --dport 8443 -j nixos-fw-accept\n"},
        "vhosts": {"vllm-station-listener": {"listen": [{"addr": "10.10.0.2", "port": 8443, "ssl": True}],
                                             "onlySSL": True, "forceSSL": False, "listenAddresses": [],
                                             "extraConfig": "ssl_verify_client on;", "proxies": ""}},
    }  # fmt: skip
    assert _check_exposure("good", good) == []

    def broken(path: str, value: Any) -> list[str]:
        s = json.loads(json.dumps(good))
        *parents, last = path.split(".")
        node = s
        for p in parents:
            node = node[p]
        node[last] = value
        return _check_exposure("bad", s)

    assert broken("serve.args", ["m", "--host", "0.0.0.0"])
    assert broken("serve.exposeUnauthenticatedVllm", True)
    assert broken("firewall.allowedTCPPorts", [8888])
    assert broken("firewall.allowedTCPPorts", [8443])
    assert broken("firewall.extraCommands", "iptables -w -A nixos-fw -p tcp -s 10.0.0.0/8 --dport 8443 -j nixos-fw-accept\n")
    assert broken("vhosts.vllm-station-listener.extraConfig", "")
    assert broken("gateway", {"enable": True, "port": 443, "stationTls": False, "upstreams": ["10.10.0.2:8443"]})
