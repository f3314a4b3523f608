"""Tier `nix_nixos`: what `nixos-rebuild switch` restarts, and what the installed `station` is made of.

Switch restarts a unit whose text changed (NixOS's switch-to-configuration compares the unit files;
`restartTriggers` render into the text as X-Restart-Triggers). checks/nixos/restarts.nix evaluates the
flagship example with golive, as it is and with one change at a time, against a full nixpkgs tree
(NIXOS_TREE). A new `station` package must leave the serving unit and golive byte-identical (the engine
keeps serving; its next start runs the new tools through the link); a change to what is served must not.
The same texts go through switch-to-configuration's rules as checks/system/switch.py implements them (the
day2 tier's switch): the plan must agree with the text comparison.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from nixenv import REPO, eval_json, flake_snapshot, require_nix, require_tree

pytestmark = pytest.mark.nix_nixos

TREE_VAR = "NIXOS_TREE"
TREE_MARKER = "nixos/lib/eval-config.nix"
ENTRY = REPO / "checks" / "nixos" / "restarts.nix"
TOOLS_LINK = "/run/vllm-station-tools"
SERVED_CHANGES = ["image", "flag", "revision", "model", "environment", "devices"]


def _tree() -> Path:
    require_nix()
    return require_tree(TREE_VAR, TREE_MARKER, "switch restart evaluations (checks/nixos/restarts.nix)")


@functools.cache
def _rendered() -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = eval_json(
        [str(ENTRY), "--argstr", "nixosTree", str(_tree())], timeout=900
    )
    return result


def test_new_tools_package_restarts_neither_the_engine_nor_golive() -> None:
    r = _rendered()
    before, after = r["as-is"], r["tools"]
    assert before["package"] != after["package"], "the variant did not change the package"
    assert after["serving"] == before["serving"], "a new `station` package changes vllm-station.service"
    assert after["servingTriggers"] == before["servingTriggers"]
    assert after["golive"] == before["golive"], "a new `station` package re-runs golive"
    assert after["goliveTriggers"] == before["goliveTriggers"]
    # ...and the next start runs the new package: the link the units name follows it.
    for rendered in (before, after):
        assert rendered["toolsLink"] == [f"L+ {TOOLS_LINK} - - - - {rendered['package']}"]
        assert f"{TOOLS_LINK}/bin/station" in rendered["serving"]
        assert rendered["package"] not in rendered["serving"] + rendered["golive"]


@pytest.mark.parametrize("change", SERVED_CHANGES)
def test_served_change_restarts_the_engine_and_reruns_golive(change: str) -> None:
    r = _rendered()
    assert r[change]["serving"] != r["as-is"]["serving"], f"a {change} change leaves vllm-station.service as it was"
    assert r[change]["golive"] != r["as-is"]["golive"], f"a {change} change does not re-run golive"


def _station_tools_copy(dest: Path) -> Path:
    """pkgs/station-tools as a commit would hold it (no venv leftovers), copied to `dest`."""
    shutil.copytree(flake_snapshot() / "pkgs" / "station-tools", dest)
    return dest


def test_runtime_package_is_made_without_tests(tmp_path: Path) -> None:
    """A change under tests/ keeps the installed `station`'s store path; one under src/ changes it."""
    tree = _tree()
    base = _station_tools_copy(tmp_path / "base")
    tests = _station_tools_copy(tmp_path / "tests")
    test_file = min((tests / "tests").glob("test_*.py"))
    test_file.write_text(test_file.read_text() + "\n# a changed test\n")
    src = _station_tools_copy(tmp_path / "src")
    init = src / "src" / "vllm_station" / "__init__.py"
    init.write_text(init.read_text() + "\n# a changed source\n")
    expr = (
        f"let pkgs = import {json.dumps(str(tree))} {{ system = \"x86_64-linux\"; config = {{ }}; overlays = [ ]; }};\n"
        "    paths = dir: let p = pkgs.callPackage (dir + \"/package.nix\") { }; in\n"
        "      { runtime = p.outPath; suite = (p.passthru.tests.pytest or p).outPath; };\n"
        f"in {{ base = paths {base}; tests = paths {tests}; src = paths {src}; }}"
    )
    out = eval_json(["--expr", expr], timeout=600)
    assert out["tests"]["runtime"] == out["base"]["runtime"], "a change under tests/ changes the installed package"
    assert out["src"]["runtime"] != out["base"]["runtime"], "a change under src/ leaves the package as it was"
    # The suite still sees the tests: a changed test is a new check to run.
    assert out["tests"]["suite"] != out["base"]["suite"], "passthru.tests.pytest does not include tests/"


def _plan(change: str) -> set[str]:
    """What switch-to-configuration's rules (checks/system/switch.py, the day2 tier's switch) do to the
    running engine and golive when switching from the example as it is to `change`."""
    from system.switch import plan_switch

    r = _rendered()
    old = {"vllm-station.service": r["as-is"]["serving"], "vllm-station-golive.service": r["as-is"]["golive"]}
    new = {"vllm-station.service": r[change]["serving"], "vllm-station-golive.service": r[change]["golive"]}
    plan = plan_switch(old, new, dict.fromkeys(old, "active"))
    return plan.touched()


def test_switch_rules_leave_the_engine_and_golive_running_for_a_new_tools_package() -> None:
    assert _plan("tools") == set()


@pytest.mark.parametrize("change", SERVED_CHANGES)
def test_switch_rules_restart_the_engine_and_golive_for_a_served_change(change: str) -> None:
    assert _plan(change) == {"vllm-station.service", "vllm-station-golive.service"}


PREFETCHED = "0123456789abcdef0123456789abcdef01234567"  # checks/nixos/restarts.nix's `prefetch` change


def test_a_prefetched_revision_is_fetched_by_its_own_unit_and_the_engine_keeps_serving() -> None:
    """The first half of a checkpoint upgrade: `prefetch` adds a unit that fetches the revision into its own
    directory (bound to node 0) while one of its stamps is missing; what is served is untouched, and the
    download unit's prune keeps the prefetched revision."""
    r = _rendered()
    assert r["as-is"]["prefetchUnit"] is None
    unit = r["prefetch"]["prefetchUnit"]
    assert unit is not None, "no vllm-station-prefetch-glm53-flash.service"
    rev_dir = f"/var/lib/vllm-station-models/glm53-flash/revisions/{PREFETCHED}"
    lines = unit.splitlines()
    assert f"ConditionPathExists=|!{rev_dir}/.station-verified.json" in lines
    starts = [line for line in lines if line.startswith("ExecStart=")]
    assert len(starts) == 1 and '"download"' in starts[0] and f'"--dir" "{rev_dir}"' in starts[0], starts
    assert f'"--revision" "{PREFETCHED}"' in starts[0] and '"--membind" "0"' in starts[0]
    assert "NUMAPolicy=bind" in lines and "NUMAMask=0" in lines
    assert "WantedBy=multi-user.target" in lines
    # it never starts (or restarts) the engine: no ExecStartPost, no ordering against it
    assert not any(line.startswith("ExecStartPost=") for line in lines), unit
    assert "vllm-station.service" not in unit
    assert f'"--protect" "{PREFETCHED}"' in r["prefetch"]["download"]
    assert '"--protect"' not in r["as-is"]["download"]
    assert r["prefetch"]["serving"] == r["as-is"]["serving"] and r["prefetch"]["golive"] == r["as-is"]["golive"]


def test_switch_rules_leave_the_engine_and_golive_running_for_a_prefetch() -> None:
    assert _plan("prefetch") == set()
