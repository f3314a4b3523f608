"""Nix tiers `nix_parse` (every .nix file parses) and `nix_flake` (the flake's outputs, offline)."""

from __future__ import annotations

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
    """`checks.<system>` holds the package, the module tests, the examples and the VM tests."""
    lib = require_tree("NIXPKGS_LIB", "lib/default.nix", "flake checks listing against nixpkgs lib")
    names = json.loads(_flake_eval(str(lib), "checks.x86_64-linux", apply="builtins.attrNames"))
    assert set(names) == {"package", "module-tests", "flash-station", "station-a", "station-b", "vm-serve", "vm-pair"}


@pytest.mark.nix_flake
def test_flake_module_tests_check_passes() -> None:
    """The module-tests check evaluates the same tests as the nix_lib tier, through the flake."""
    tree = require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "flake module-tests check")
    drv = json.loads(_flake_eval(str(tree), "checks.x86_64-linux.module-tests.drvPath"))
    assert drv.endswith("-vllm-station-module-tests.drv")
