"""Tier `nix_nixos`: the release path, evaluated offline (docs/release.md, docs/install.md).

- The station images, `packages.aarch64-linux.<station>-<format>`: each evaluates to a derivation through the
  flake's own `outputs` (checks/images), and the system inside the image renders the station's serving
  configuration unchanged (every vllm-station unit and /etc file, byte for byte, store paths included).
- The install path (install/flake.nix): each nixos-anywhere target's disko scripts evaluate to derivations, the
  model directory is a filesystem of its own, and the target serves exactly what the station does.
- install/flake.lock pins the disko tree the tests evaluate (its narHash is that tree's), and the install flake
  resolves through Nix's real flake machinery offline.

Needs NIXOS_TREE (a full nixpkgs tree) and a disko tree (DISKO_TREE, default $STATION_CACHE/trees/disko). One
Nix process per image or station, so the cases spread over pytest workers; each runs on a snapshot of the
repository (what `git add -A` would commit), so edits made while it runs cannot mix two versions.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from nixenv import (
    CACHE,
    REPO,
    eval_json,
    flake_snapshot,
    nix_bin,
    require_nix,
    require_tree,
    run_nix,
    store_path,
)

pytestmark = pytest.mark.nix_nixos

TREE_VAR = "NIXOS_TREE"
TREE_MARKER = "nixos/lib/eval-config.nix"
STATIONS = ["flash-station", "station-a", "station-b"]  # the flake's aarch64 examples
FORMATS = {"raw-efi": (".raw", ".img"), "iso-installer": (".iso",)}  # file suffixes: nixpkgs', the stand-in's
IMAGES = [f"{station}-{fmt}" for station in STATIONS for fmt in FORMATS]
MODELS_ROOT = "/var/lib/vllm-station-models"  # modules/lib/contract.nix modelsRoot (checked below)
# install/flake.nix's example disks: flash-station has one NVMe, the pair's stations a second one for the weights
MODELS_DISK = {"flash-station": False, "station-a": True, "station-b": True}
DISKO_REPO = "nix-community/disko"

# The nixpkgs option paths the product's Nix sources use (modules/, install/'s modules, the image stations'
# examples), found by a grep: `a.b.c = …`, `a.b.c."key" = …`, `config.a.b.c`. The tree under test must declare each
# one (an option or a set of them), and none may be a renamed or removed option's alias: against the locked
# nixpkgs (scripts/check with a network), a name that differs from the offline tree's fails here.
_NAMESPACES = (
    "boot|documentation|environment|fileSystems|hardware|networking|nixpkgs|services|system|systemd|users|virtualisation"
)
_USES = [
    re.compile(rf"^\s*((?:{_NAMESPACES})(?:\.[A-Za-z][\w-]*)+)(?=\s*=|\.[\"$])", re.MULTILINE),
    re.compile(rf"\bconfig\.((?:{_NAMESPACES})(?:\.[A-Za-z][\w-]*)+)"),
]
_SOURCES = ["modules/**/*.nix", "install/disko.nix", "install/dgx-station.nix",
            "checks/examples/flash-station.nix", "checks/examples/pair-station.nix"]  # fmt: skip


def option_uses() -> dict[str, str]:
    """Option path -> the first source that uses it (our own options and the image machinery left out)."""
    found: dict[str, str] = {}
    for pattern in _SOURCES:
        for src in sorted(REPO.glob(pattern)):
            text = src.read_text()
            for regex in _USES:
                for m in regex.finditer(text):
                    path = m.group(1)
                    if path.startswith(("services.vllm-station", "system.build")):
                        continue
                    # `environment.MPLCONFIGDIR = …` inside a unit: a variable (upper case), not an option
                    if any(part[0].isupper() for part in path.split(".")):
                        continue
                    found.setdefault(path, str(src.relative_to(REPO)))
    return found


def _tree() -> str:
    require_nix()
    return str(require_tree(TREE_VAR, TREE_MARKER, "station images and install path (checks/images)"))


def _disko_tree() -> Path:
    value = os.environ.get("DISKO_TREE") or str(CACHE / "trees" / "disko")
    path = Path(value)
    if not (path / "module.nix").exists():
        lock = _install_lock()["nodes"]["disko"]["locked"]
        pytest.skip(
            f"no disko tree at {path}: the install path is not evaluated; put {DISKO_REPO} at revision "
            f"{lock['rev']} (install/flake.lock) there, e.g. `git archive {lock['rev']} | tar -x -C {path}` "
            "in a clone of it, or set DISKO_TREE=/path/to/that/tree"
        )
    return path


@functools.cache
def _install_lock() -> dict[str, Any]:
    lock: dict[str, Any] = json.loads((REPO / "install" / "flake.lock").read_text())
    return lock


def _snapshot() -> Path:
    return flake_snapshot()


@functools.cache
def _station(station: str) -> dict[str, Any]:
    """One Nix process per station: its images and its install target share the station's own evaluation.

    A larger initial heap for Nix's collector: measured on station-a, 18.3 s of CPU without, 14.6 s with, the
    same peak memory (1.7 GB).
    """
    args = [
        str(_snapshot() / "checks" / "images"),
        "--argstr", "nixosTree", _tree(),
        "--argstr", "diskoTree", str(_disko_tree()),
        "--argstr", "station", station,
        "--argstr", "optionUses", json.dumps(sorted(option_uses())),
    ]  # fmt: skip
    proc = run_nix(
        ["nix-instantiate", "--eval", "--strict", "--json", *args],
        timeout=900, extra_env={"GC_INITIAL_HEAP_SIZE": "1500M"},
    )  # fmt: skip
    if proc.returncode != 0:
        raise AssertionError(f"nix-instantiate {' '.join(args[:1])} ({station}) failed:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_image_outputs_are_the_stations_times_the_formats() -> None:
    """`packages.aarch64-linux` holds exactly `<station>-<format>` for each aarch64 example and format."""
    names = eval_json(
        [str(_snapshot() / "checks" / "images"), "--argstr", "nixosTree", _tree(), "--argstr", "output", "names"],
        timeout=300,
    )
    assert sorted(names) == sorted(IMAGES)


def _check_image(name: str, result: dict[str, Any]) -> None:
    assert re.fullmatch(r"/nix/store/[a-z0-9]{32}-.+\.drv", result["drvPath"]), result["drvPath"]
    assert result["system"] == "aarch64-linux"
    assert result["filePath"].endswith(FORMATS[result["format"]]), result["filePath"]
    assert result["failedAssertions"] == [], result["failedAssertions"]
    assert result["problems"] == [], "\n".join(result["problems"])[:6000]
    assert "vllm-station.service" in result["units"], result["units"]
    assert result["serviceWanted"], "vllm-station.service is not wanted by multi-user.target in the image"
    if result["format"] == "iso-installer":
        assert result["rootDevice"] != result["stationRootDevice"], "the ISO mounted the station's root disk"


def _check_install(station: str, result: dict[str, Any]) -> None:
    for script, drv in result["scripts"].items():
        assert re.fullmatch(r"/nix/store/[a-z0-9]{32}-disko[a-z-]*\.drv", drv), f"{script}: {drv}"
    assert result["failedAssertions"] == [], result["failedAssertions"]
    assert result["problems"] == [], "\n".join(result["problems"])[:6000]
    assert result["modelsRoot"] == MODELS_ROOT
    fs = result["fileSystems"]
    assert set(fs) == {"/", "/boot", MODELS_ROOT}, fs
    # the weights live on their own filesystem: a reinstall that formats nothing keeps them
    devices = [fs[mount]["device"] for mount in fs]
    assert len(set(devices)) == 3, f"two mounts share a device: {fs}"
    assert all(d.startswith("/dev/disk/by-partlabel/") for d in devices), fs
    assert fs[MODELS_ROOT]["fsType"] == "ext4" and fs["/boot"]["fsType"] == "vfat", fs
    # the example's placeholder root gave way to the layout's root partition
    assert fs["/"]["device"] == "/dev/disk/by-partlabel/disk-system-root", fs["/"]
    expected_disks = {"system", "models"} if MODELS_DISK[station] else {"system"}
    assert set(result["devices"]) == expected_disks, result["devices"]
    assert result["diskoDevices"] == result["devices"], "diskoConfigurations and the target's layout differ"
    on_models_disk = fs[MODELS_ROOT]["device"] == "/dev/disk/by-partlabel/disk-models-models"
    assert on_models_disk == MODELS_DISK[station], fs[MODELS_ROOT]
    assert result["bootLoader"] == {"systemd-boot": True, "nvidiaOpen": True}, result["bootLoader"]


@pytest.mark.parametrize("station", STATIONS)
def test_station_release(station: str) -> None:
    """The station's images and its install target (one evaluation; every part is checked, all failures listed)."""
    tree = _tree()
    result = _station(station)  # an evaluation error fails here with Nix's message
    machinery = "nixpkgs" if (Path(tree) / "nixos/modules/image/images.nix").exists() else "stand-in"
    print(f"{station}: {result['machinery']} image machinery, tree {tree}")
    assert result["machinery"] == machinery, "the tree's own image machinery must be used when it has one"
    assert sorted(result["images"]) == sorted(f"{station}-{fmt}" for fmt in FORMATS)
    uses = option_uses()
    assert set(result["options"]) == set(uses)
    failures = [
        f"option {path} ({uses[path]}): {status} in the tree {tree}"
        for path, status in sorted(result["options"].items())
        if status != "ok"
    ]
    for name, image in sorted(result["images"].items()):
        print(f"  {name}: {image['drvPath']}")
        try:
            _check_image(name, image)
        except AssertionError as e:
            failures.append(f"{name}: {e}")
    try:
        _check_install(station, result["install"])
    except AssertionError as e:
        failures.append(f"install target {station}: {e}")
    print(f"  install/{station}: {result['install']['scripts']['diskoScript']}")
    assert not failures, "\n\n".join(failures)


def test_option_uses_found() -> None:
    """The grep finds the options the modules are known to set (a broken pattern would check nothing)."""
    uses = option_uses()
    for path in ["virtualisation.docker.enable", "hardware.nvidia-container-toolkit.enable", "systemd.tmpfiles.rules",
                 "boot.kernel.sysctl", "networking.firewall.allowedTCPPorts", "services.nginx", "hardware.nvidia.open",
                 "boot.loader.systemd-boot.enable"]:  # fmt: skip
        assert path in uses, f"{path} not found among {sorted(uses)}"


def test_release_doc_names_exactly_the_sources_the_grep_reads() -> None:
    """docs/release.md says which files the option-name grep reads and which examples it does not: both
    must be what `_SOURCES` is (a source added here or there without the other fails)."""
    doc = (REPO / "docs" / "release.md").read_text()
    para = doc[doc.index("The rest is checked by a grep") :].split("\n\n", 1)[0]
    reads, _, not_seen = para.partition("What it does not see")
    named = set(re.findall(r"`([\w./-]+\.nix|modules/)`", reads))
    expected = {"modules/" if src == "modules/**/*.nix" else Path(src).name if "examples" in src else src
                for src in _SOURCES}  # fmt: skip
    assert named == expected, f"docs/release.md names {sorted(named)}; the grep reads {_SOURCES}"
    unread = {p.stem.removesuffix("-station") for p in (REPO / "checks" / "examples").glob("*-station.nix")}
    unread -= {Path(src).stem.removesuffix("-station") for src in _SOURCES}
    for example in unread:
        assert example in not_seen, f"docs/release.md does not say the grep skips the {example} example"


def test_install_lock_pins_the_evaluated_disko() -> None:
    """install/flake.lock: disko by release tag, its narHash that of the tree the tests evaluate; nixpkgs
    follows the main flake's, whose lock entry it repeats unchanged (a bump updates both)."""
    _tree()
    lock = _install_lock()
    nodes = lock["nodes"]
    root = nodes[lock["root"]]["inputs"]
    assert set(root) == {"vllm-station", "nixpkgs", "disko"}
    assert root["nixpkgs"] == ["vllm-station", "nixpkgs"], "nixpkgs must follow the main flake's"
    disko = nodes[root["disko"]]
    assert disko["inputs"] == {"nixpkgs": ["nixpkgs"]}, "disko's nixpkgs must follow ours"
    flake = (REPO / "install" / "flake.nix").read_text()
    tag = re.search(r'disko\.url = "github:nix-community/disko/([^"]+)"', flake)
    assert tag, "install/flake.nix must take disko from github:nix-community/disko/<tag>"
    assert disko["original"] == {"owner": "nix-community", "repo": "disko", "ref": tag.group(1), "type": "github"}
    assert re.fullmatch(r"[0-9a-f]{40}", disko["locked"]["rev"])
    tree = _disko_tree()
    proc = run_nix(["nix", "hash", "path", str(tree)], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == disko["locked"]["narHash"], (
        f"the disko tree at {tree} is not the locked revision {disko['locked']['rev']}"
    )
    station = nodes[root["vllm-station"]]
    assert station["locked"] == {"path": "..", "type": "path"} and station["parent"] == []
    main = json.loads((REPO / "flake.lock").read_text())
    assert nodes[station["inputs"]["nixpkgs"]] == main["nodes"][main["nodes"]["root"]["inputs"]["nixpkgs"]], (
        "install/flake.lock's nixpkgs differs from flake.lock's: run `nix flake update --flake ./install vllm-station`"
    )
    contract = run_nix(
        ["nix-instantiate", "--eval", "--strict", "-E", f"(import {REPO}/modules/lib/contract.nix).modelsRoot"],
        timeout=60,
    )
    assert contract.stdout.strip() == json.dumps(MODELS_ROOT), contract.stdout + contract.stderr


def test_install_flake_resolves_offline() -> None:
    """Nix's own flake machinery reads install/flake.lock as is (nothing to update) and finds the locked disko by
    its narHash alone; the layouts come out of `diskoConfigurations` (the attribute `disko --flake` reads)."""
    lib = require_tree("NIXPKGS_LIB", "lib/default.nix", "install flake resolution against nixpkgs lib")
    store_path(str(_disko_tree()))  # the locked disko, by content: resolvable without a network
    proc = run_nix(
        [
            "nix", "eval", "--offline", "--no-update-lock-file", "--json",
            "--override-input", "vllm-station/nixpkgs", f"path:{store_path(str(lib))}",
            f"path:{_snapshot() / 'install'}#diskoConfigurations",
            "--apply", "c: builtins.mapAttrs (_: v: builtins.mapAttrs (_: d: d.device) v.disko.devices.disk) c",
        ],
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    layouts = json.loads(proc.stdout)
    assert set(layouts) == set(STATIONS)
    for station, disks in layouts.items():
        assert set(disks) == ({"system", "models"} if MODELS_DISK[station] else {"system"}), disks
        # placeholders name no device: disko stops before it writes anything
        assert all(d.startswith("/dev/disk/by-id/nvme-REPLACE-") for d in disks.values()), disks


@pytest.mark.nix_flake
def test_locked_trees_fetches_or_reports_unreachable() -> None:
    """scripts/locked-trees (run by scripts/check): the locked nixpkgs and disko, checked by narHash, or exit 2
    when the network is not there (the offline trees stay); never a half answer."""
    require_nix()
    env = dict(os.environ, PATH=f"{nix_bin()}:{os.environ.get('PATH', '')}")
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "locked-trees")],
        capture_output=True, text=True, timeout=1500, env=env, check=False,
    )  # fmt: skip
    main = json.loads((REPO / "flake.lock").read_text())["nodes"]["nixpkgs"]["locked"]
    if proc.returncode == 2:
        assert proc.stdout == "", "an unreachable fetch must print no tree"
        assert f"github:{main['owner']}/{main['repo']}/{main['rev']}" in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    out = dict(line.split("=", 1) for line in proc.stdout.splitlines())
    assert set(out) == {"NIXOS_TREE", "NIXPKGS_LIB", "DISKO_TREE", "LOCKED_REV"}, out
    assert out["LOCKED_REV"] == main["rev"]
    assert (Path(out["NIXOS_TREE"]) / TREE_MARKER).exists() and out["NIXPKGS_LIB"] == out["NIXOS_TREE"]
    assert (Path(out["DISKO_TREE"]) / "module.nix").exists()
    for var, narhash in [("NIXOS_TREE", main["narHash"]), ("DISKO_TREE", _install_lock()["nodes"]["disko"]["locked"]["narHash"])]:
        hashed = run_nix(["nix", "hash", "path", out[var]], timeout=600)
        assert hashed.stdout.strip() == narhash, f"{var}={out[var]} is not the locked tree"
