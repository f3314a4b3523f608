"""Nix tier `nix_lib`: the gateway's module tests (checks/gateway/module.nix), one pytest case each.

What services.vllm-station.gateway hands nixpkgs' nginx module and its own keys unit, for every option
(ACME, key directories, per-key limits, several stations, affinity) and every assertion, evaluated with
lib only (~1 s). The rendered nginx.conf, run by a real nginx, is checks/test_gateway.py's.
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

ENTRY = REPO / "checks" / "gateway" / "module.nix"
TREE_VAR = "NIXPKGS_LIB"
TREE_MARKER = "lib/default.nix"


def _tree_args() -> list[str]:
    return ["--argstr", "nixpkgsLib", os.environ.get(TREE_VAR, "")]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "gateway_test" in metafunc.fixturenames:
        names = entry_names(ENTRY, _tree_args(), TREE_VAR, TREE_MARKER)
        metafunc.parametrize("gateway_test", names)


@functools.cache
def _results() -> dict[str, Any]:
    result: dict[str, Any] = eval_json([str(ENTRY), *_tree_args()], timeout=300)
    return result


@pytest.mark.nix_lib
def test_gateway_module(gateway_test: str) -> None:
    require_nix()
    require_tree(TREE_VAR, TREE_MARKER, "the gateway module tests")
    results = _results()  # an evaluation error fails here with Nix's message
    if gateway_test in (UNAVAILABLE, UNLISTABLE):
        pytest.fail("the test list did not evaluate, but the suite did")
    failed = {f["name"]: f["message"] for f in results["failed"]}
    if gateway_test in failed:
        pytest.fail(f"{gateway_test}:\n{failed[gateway_test]}")
    assert gateway_test in results["passed"], f"{gateway_test} neither passed nor failed"
    assert len(results["passed"]) >= 20


@pytest.mark.nix_lib
def test_a_wrong_expectation_fails() -> None:
    """The suite can fail: the defaults test against a changed default reports the difference."""
    require_nix()
    lib_tree = require_tree(TREE_VAR, TREE_MARKER, "the gateway module tests")
    expr = f"""
      let
        lib = import {lib_tree}/lib;
        h = import {REPO}/checks/lib/harness.nix {{ inherit lib; }};
        m = [
          {{ services.nginx.user = "nginx"; services.nginx.group = "nginx"; services.nginx.logError = "stderr"; }}
          {{
            services.vllm-station.serve = {{ enable = true; model = "/m"; image = h.image; }};
            services.vllm-station.gateway = {{
              enable = true; serverName = "x"; tls.acme = true; keys.a.file = "/run/a";
              limits.maxBodySize = "1m";
            }};
          }}
        ];
        body = c: c.services.nginx.virtualHosts.vllm-station-gateway.locations
          ."^~ /_vllm_station/default/".extraConfig;
      in h.run "wrong" (h.check m (c: h.ok "32m" (lib.hasInfix "client_max_body_size 32m;" (body c))))
    """
    problems = eval_json(["--expr", expr])
    assert problems == ["32m"]
