"""Nix tiers `nix_nixos` (full NixOS evaluations of checks/examples) and `nix_vm` (VM tests instantiate).

Both need a full nixpkgs tree in NIXOS_TREE. checks/nixos evaluates every example for its systems and
checks the rendered units; each check is one pytest case (names listed at collection without evaluating
any system). The VM tests are only instantiated here (nothing builds offline); real CI runs them.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

import pytest
from nixenv import (
    REPO,
    UNAVAILABLE,
    UNLISTABLE,
    entry_names,
    eval_json,
    exposure,
    require_nix,
    require_tree,
)

NIXOS_ENTRY = REPO / "checks" / "nixos"
VM_ENTRY = REPO / "checks" / "vm"
TREE_VAR = "NIXOS_TREE"
TREE_MARKER = "nixos/lib/eval-config.nix"
# The exposure `systemd-analyze security` may report for each unit the examples render (0 best, 10
# worst): the figures docs/serve.md gives, measured on systemd 252. A change that loosens a sandbox fails.
MAX_EXPOSURE = {
    "flash-station/x86_64-linux/vllm-station.service": 1.9,  # docker client
    "flash-station/x86_64-linux/vllm-station-download-glm53-flash.service": 1.4,
    "flash-station-native/x86_64-linux/vllm-station.service": 1.6,  # DynamicUser, GPU relaxations
    "station-a/aarch64-linux/vllm-station.service": 1.9,
    "station-a/aarch64-linux/vllm-station-download-glm53.service": 1.4,
    "station-a/aarch64-linux/vllm-station-pair-beacon.service": 1.4,
    "station-b/aarch64-linux/vllm-station-pair-beacon.service": 1.4,
    # root: restarting the worker's serving unit is a call only root may make (as the watchdog's)
    "station-b/aarch64-linux/vllm-station-pair-rejoin.service": 1.7,
    "station-b/aarch64-linux/vllm-station-weights-check.service": 1.7,  # root: it reads the system journal
    "station-a/aarch64-linux/vllm-station-checkpoint-share.service": 1.4,  # rsync daemon, read-only
    "station-b/aarch64-linux/vllm-station-download-glm53.service": 1.4,  # station copy
}


def _tree_args() -> list[str]:
    return ["--argstr", "nixosTree", os.environ.get(TREE_VAR, "")]


def _names() -> list[str]:
    return entry_names(NIXOS_ENTRY, [*_tree_args(), "--arg", "toplevel", "true"], TREE_VAR, TREE_MARKER)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "nixos_check" in metafunc.fixturenames:
        metafunc.parametrize("nixos_check", _names())


def _require(what: str) -> None:
    require_nix()
    require_tree(TREE_VAR, TREE_MARKER, what)


@functools.cache
def _results() -> dict[str, Any]:
    result: dict[str, Any] = eval_json(
        [str(NIXOS_ENTRY), *_tree_args(), "--arg", "toplevel", "true"], timeout=900
    )
    return result


@functools.cache
def _units() -> dict[str, str]:
    units: dict[str, str] = eval_json(
        [str(NIXOS_ENTRY), *_tree_args(), "--argstr", "output", "units"], timeout=900
    )
    return units


@pytest.mark.nix_nixos
def test_nixos(nixos_check: str) -> None:
    _require("full NixOS evaluations (checks/nixos)")
    results = _results()  # an evaluation error fails here with Nix's message
    if nixos_check in (UNAVAILABLE, UNLISTABLE):
        pytest.fail("the check list did not evaluate, but the evaluations did")
    failed = {f["name"]: f["message"] for f in results["failed"]}
    if nixos_check in failed:
        pytest.fail(f"{nixos_check}:\n{failed[nixos_check]}")
    assert nixos_check in results["passed"], f"{nixos_check} is neither passed nor failed"


@pytest.mark.nix_nixos
def test_both_systems_evaluated() -> None:
    _require("full NixOS evaluations (checks/nixos)")
    passed = set(_results()["passed"])
    for system in ("x86_64-linux", "aarch64-linux"):
        for check in ("preset-flags-exact", "start-limits-in-unit-section", "toplevel-instantiates"):
            assert f"flash-station/{system}/{check}" in passed, f"flash-station/{system}/{check} did not pass"


@pytest.mark.nix_nixos
@pytest.mark.parametrize("example", sorted(MAX_EXPOSURE))
def test_security_exposure(example: str, tmp_path: Path) -> None:
    """`systemd-analyze security --offline` on the unit as NixOS renders it (the hardening, measured)."""
    _require("systemd-analyze of the rendered unit (checks/nixos)")
    score = exposure(example.rsplit("/", 1)[1], _units()[example], tmp_path)
    print(f"systemd-analyze security exposure of {example}: {score}")
    assert score <= MAX_EXPOSURE[example], f"exposure {score} > {MAX_EXPOSURE[example]} for {example}"


@functools.cache
def _vm_results() -> Any:
    return eval_json([str(VM_ENTRY), *_tree_args()], timeout=900)


@pytest.mark.nix_vm
@pytest.mark.parametrize("test", ["serve", "pair"])
def test_vm_test_instantiates(test: str) -> None:
    _require("VM tests (checks/vm, instantiated only)")
    out = _vm_results()
    assert out["failed"] == [], out["failed"]
    name = f"{test}/x86_64-linux"
    assert name in out["passed"], out
    assert re.fullmatch(r"/nix/store/[0-9a-z]{32}-vm-test-run-[\w.-]+\.drv", out["drvPaths"][name]), out