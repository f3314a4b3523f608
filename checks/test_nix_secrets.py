"""Tier `nix_nixos`: the station's secrets from sops-nix and agenix, evaluated with their NixOS modules.

checks/nixos/secrets.nix evaluates the flagship example (with monitoring and golive: every unit that loads
the station's key) as a full NixOS system against NIXOS_TREE, its secrets pointed at sops-nix's
`sops.secrets.<name>.path` (/run/secrets/<name>) or agenix's `age.secrets.<name>.path` (/run/agenix/<name>),
each manager installing them at activation (its default) or in its own unit (with systemd-sysusers).
Each unit that loads a secret requires, and starts after, its check unit (`vllm-station-secrets@<unit>`),
which starts after the manager's unit when there is one; the manifest the check reads is the rendered
one, read by the Python reader, and `station secrets check` on it names the option and the file.

The managers' trees are public repositories, fetched outside this one (docs/testing.md):
SOPS_NIX_TREE (default $STATION_CACHE/trees/sops-nix) and AGENIX_TREE (default $STATION_CACHE/trees/agenix);
without one, its cases skip saying how to fetch it.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from nixenv import CACHE, REPO, eval_json, exposure, require_nix, require_tree, run_nix
from vllm_station.commands import secrets

pytestmark = pytest.mark.nix_nixos

ENTRY = REPO / "checks" / "nixos" / "secrets.nix"
MANAGERS = {
    # manager: (variable, directory under $STATION_CACHE/trees, marker file, repository, its unit)
    "sops": ("SOPS_NIX_TREE", "sops-nix", "modules/sops/default.nix", "Mic92/sops-nix", "sops-install-secrets"),
    "agenix": ("AGENIX_TREE", "agenix", "modules/age.nix", "ryantm/agenix", "agenix-install-secrets"),
}
SECRETS_PATH = {"sops": "/run/secrets", "agenix": "/run/agenix"}
ACTIVATION_SCRIPT = {"sops": "setupSecrets", "agenix": "agenixInstall"}
# The units of the example that load a secret, and what they load.
KEY_OPTION = "services.vllm-station.serve.apiKeyFile"
KEY_UNITS = ["vllm-station", "vllm-station-probe", "vllm-station-watchdog", "vllm-station-golive"]
VARIANTS = [f"{m}-{how}" for m in MANAGERS for how in ("activation", "unit")]


def _tree(manager: str) -> Path | None:
    var, directory, marker, _, _ = MANAGERS[manager]
    path = Path(os.environ.get(var) or CACHE / "trees" / directory)
    return path if (path / marker).exists() else None


def _require_tree(manager: str) -> Path:
    path = _tree(manager)
    if path is None:
        var, directory, marker, repo, _ = MANAGERS[manager]
        pytest.skip(
            f"no {repo} tree (no {marker} under ${var} or {CACHE / 'trees' / directory}): its NixOS module is "
            f"not evaluated with the station's; unpack github:{repo} there (docs/testing.md) or set {var}"
        )
    return path


@functools.cache
def _rendered() -> dict[str, Any]:
    require_nix()
    tree = require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "the secret managers' evaluations")
    args = [str(ENTRY), "--argstr", "nixosTree", str(tree)]
    for manager, name in (("sops", "sopsTree"), ("agenix", "agenixTree")):
        args += ["--argstr", name, str(_tree(manager) or "")]
    out: dict[str, Any] = eval_json(args, timeout=900)
    return out


def _variant(name: str) -> dict[str, Any]:
    manager = name.split("-")[0]
    _require_tree(manager)
    variant: dict[str, Any] = _rendered()["variants"][name]
    return variant


def _values(unit_text: str, key: str) -> list[str]:
    return [v for line in unit_text.splitlines() if line.startswith(f"{key}=") for v in line.split("=", 1)[1].split()]


def test_the_contract_is_one_path_on_both_sides() -> None:
    require_nix()
    expr = "with import ./modules/lib/contract.nix; { inherit secretsDir secretsManifest; check = secretsCheckUnit \"u\"; }"
    proc = run_nix(["nix-instantiate", "--eval", "--strict", "--json", "-E", expr], cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    contract = json.loads(proc.stdout)
    assert contract["secretsManifest"] == str(secrets.DEFAULT_MANIFEST)
    assert contract["secretsDir"] == secrets.SECRETS_DIR
    assert contract["check"] == "vllm-station-secrets@u.service"


@pytest.mark.parametrize("name", VARIANTS)
def test_every_unit_loads_the_managers_file_after_its_check(name: str) -> None:
    v = _variant(name)
    manager = name.split("-")[0]
    assert v["failed"] == [], v["failed"]
    key = f"{SECRETS_PATH[manager]}/vllm-api-key"
    units = v["units"]
    # the serving unit, the gateway's keys, the probe and golive load it as a credential; the
    # watchdog reads the file itself (it re-reads it after a rotation)
    assert _values(units["vllm-station.service"], "LoadCredential") == [f"api-key:{key}"]
    assert f"upstream-key:{key}" in _values(units["vllm-station-gateway-keys.service"], "LoadCredential")
    assert f"key-alice:{SECRETS_PATH[manager]}/gateway-alice" in _values(
        units["vllm-station-gateway-keys.service"], "LoadCredential"
    )
    assert _values(units["vllm-station-probe.service"], "LoadCredential") == [f"api-key:{key}"]
    assert _values(units["vllm-station-golive.service"], "LoadCredential") == [f"api-key:{key}"]
    assert f'"--api-key-file" "{key}"' in units["vllm-station-watchdog.service"]
    # the download unit loads the hub token as a credential, checked the same way
    token = f"{SECRETS_PATH[manager]}/hf-token"
    download = units["vllm-station-download-glm53-flash.service"]
    assert _values(download, "LoadCredential") == [f"hf-token:{token}"]
    for unit in [*KEY_UNITS, "vllm-station-gateway-keys", "vllm-station-download-glm53-flash"]:
        text = units[f"{unit}.service"]
        check = f"vllm-station-secrets@{unit}.service"
        assert check in _values(text, "Requires"), f"{unit} does not require {check}"
        assert check in _values(text, "After"), f"{unit} does not start after {check}"


@pytest.mark.parametrize("name", VARIANTS)
def test_the_check_runs_after_the_managers_install(name: str) -> None:
    v = _variant(name)
    manager, how = name.split("-")
    unit_name = MANAGERS[manager][4]
    template = v["units"]["vllm-station-secrets@.service"]
    # default dependencies (after sysinit.target, where the managers' units install) and no more
    assert "DefaultDependencies=no" not in template
    if how == "activation":
        # activation runs before any unit starts, at boot and at a switch
        assert ACTIVATION_SCRIPT[manager] in v["activationScripts"]
        assert v["managerUnit"] is None
        assert _values(template, "After") == []
    else:
        assert ACTIVATION_SCRIPT[manager] not in v["activationScripts"]
        assert v["managerUnit"] is not None and "sysinit.target" in v["managerUnit"]["wantedBy"]
        assert _values(template, "After") == [f"{unit_name}.service"]
    argv = _values(template, "ExecStart")
    assert argv[1:] == ['"secrets"', '"check"', '"--manifest"', f'"{secrets.DEFAULT_MANIFEST}"', "--unit", "%i"]
    assert _values(template, "Type") == ["oneshot"]
    assert _values(template, "RemainAfterExit") in ([], ["false"])  # checked again at every start
    # the persistent directory is made even when a manager keeps the files elsewhere
    assert v["tmpfiles"] == [f"d {secrets.SECRETS_DIR} 0700 root root -"]


@pytest.mark.parametrize("manager", list(MANAGERS))
def test_the_rendered_manifest_names_the_option_and_the_file_when_one_is_missing(
    manager: str, tmp_path: Path
) -> None:
    v = _variant(f"{manager}-activation")
    manifest = tmp_path / "secrets.json"
    manifest.write_text(v["manifest"])
    read = secrets.read_manifest(manifest)
    assert sorted(read) == sorted([*KEY_UNITS, "vllm-station-gateway-keys", "vllm-station-download-glm53-flash"])
    assert {(s.option, s.path) for s in read["vllm-station-download-glm53-flash"]} == {
        ("services.vllm-station.download.models.glm53-flash.tokenFile", f"{SECRETS_PATH[manager]}/hf-token")
    }
    assert {(s.option, s.path) for s in read["vllm-station"]} == {
        (KEY_OPTION, f"{SECRETS_PATH[manager]}/vllm-api-key")
    }

    def check(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "vllm_station.cli", "secrets", "check", "--manifest", str(manifest), *args],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    # the files are the manager's, under /run (not on this machine): the serving unit's check fails
    out = check("--unit", "vllm-station")
    assert out.returncode == 1, out.stderr
    key = f"{SECRETS_PATH[manager]}/vllm-api-key"
    assert f"vllm-station secrets: {KEY_OPTION}: {key} does not exist." in out.stderr
    assert "/run is emptied at every boot" in out.stderr
    # the same manifest with the files in place (the paths moved under a temporary directory): it passes
    placed = json.loads(v["manifest"])
    for entries in placed["units"].values():
        for entry in entries:
            path = tmp_path / entry["path"].lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("sk-a-key-of-the-right-length-0123\n")
            path.chmod(0o600)
            entry["path"] = str(path)
    manifest.write_text(json.dumps(placed))
    out = check("--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] and len(report["secrets"]) == sum(len(e) for e in placed["units"].values())


def test_the_check_units_exposure(tmp_path: Path) -> None:
    """`systemd-analyze security` of the check unit as rendered (systemd 252: 1.9). It is root, outside a
    user namespace and may read any file (CAP_DAC_READ_SEARCH), as systemd is when it loads the files;
    it has no network and opens no file for writing. A change that loosens it further fails."""
    names = [n for n in VARIANTS if n.endswith("-activation") and _tree(n.split("-")[0]) is not None]
    if not names:
        _require_tree("sops")
    template = _variant(names[0])["units"]["vllm-station-secrets@.service"]
    score = exposure("vllm-station-secrets@vllm-station.service", template, tmp_path)
    print(f"systemd-analyze security exposure of vllm-station-secrets@.service: {score}")
    assert score <= 1.9
