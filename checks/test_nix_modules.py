"""Nix tier `nix_lib`: the module tests of checks/lib (lib.evalModules + option stubs), one pytest case each.

checks/lib evaluates every file in checks/lib/tests to {"passed": [...], "failed": [{"name", "message"}]};
the test names are listed at collection (`--argstr output names`, no test runs) and the whole suite is
evaluated once per session.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import pytest
from nixenv import (
    REPO,
    UNAVAILABLE,
    UNLISTABLE,
    entry_names,
    eval_json,
    require_nix,
    require_tree,
)

ENTRY = REPO / "checks" / "lib"
TREE_VAR = "NIXPKGS_LIB"
TREE_MARKER = "lib/default.nix"
WHAT = "module tests (checks/lib, lib.evalModules with option stubs)"


def _tree_args() -> list[str]:
    return ["--argstr", "nixpkgsLib", os.environ.get(TREE_VAR, "")]


def _names() -> list[str]:
    return entry_names(ENTRY, _tree_args(), TREE_VAR, TREE_MARKER)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "lib_test" in metafunc.fixturenames:
        metafunc.parametrize("lib_test", _names())


@functools.cache
def _results() -> dict[str, Any]:
    result: dict[str, Any] = eval_json([str(ENTRY), *_tree_args()], timeout=600)
    return result


def _require() -> None:
    require_nix()
    require_tree(TREE_VAR, TREE_MARKER, WHAT)


@pytest.mark.nix_lib
def test_module(lib_test: str) -> None:
    _require()
    results = _results()  # an evaluation error fails here with Nix's message
    failed = {f["name"]: f["message"] for f in results["failed"]}
    if lib_test in (UNAVAILABLE, UNLISTABLE):
        pytest.fail(f"the test list did not evaluate, but the suite did: {sorted(results['passed'])[:5]}…")
    if lib_test in failed:
        pytest.fail(f"{lib_test}:\n{failed[lib_test]}")
    assert lib_test in results["passed"], f"{lib_test} is neither passed nor failed in {ENTRY}"


@pytest.mark.nix_lib
def test_every_listed_test_ran() -> None:
    _require()
    results = _results()
    ran = set(results["passed"]) | {f["name"] for f in results["failed"]}
    listed = set(_names())
    assert ran == listed, (
        f"listed but not run: {sorted(listed - ran)}; run but not listed: {sorted(ran - listed)}"
    )
    assert len(ran) >= 40, f"only {len(ran)} module tests: did checks/lib/tests lose files?"


@pytest.mark.nix_lib
def test_a_broken_expectation_fails() -> None:
    """The harness can fail: a wrong expectation is reported (a suite that passes vacuously is a defect)."""
    _require()
    expr = f"""
      let
        lib = import {os.environ[TREE_VAR]}/lib;
        h = import {ENTRY}/harness.nix {{ inherit lib; }};
        base = {{ services.vllm-station.serve = {{ enable = true; model = "/m"; image = h.image; }}; }};
        restartSec = expected: config: h.eq "RestartSec" (h.unit config).serviceConfig.RestartSec expected;
      in {{
        wrong = h.run "wrong" (h.check [ base ] (restartSec 5));
        missing = h.run "missing" (h.assertionFails [ base ] "no such assertion message");
        right = h.run "right" (h.check [ base ] (restartSec 60));
      }}
    """
    out = eval_json(["-E", expr], timeout=120)
    assert out["right"] == []
    assert out["wrong"] == ["RestartSec: expected 5, got 60"]
    assert len(out["missing"]) == 1 and "no such assertion message" in out["missing"][0]
