"""pytest plugin: group results into the project's test tiers and write a per-tier summary.

Tiers come from markers: realvllm, nix_parse, nix_flake, nix_lib, nix_nixos, nix_vm, build_env, system, day2; anything else
is `unit`. `scripts/check` loads it with `-p pytest_tiers` and reads the JSON written to
`--tiers-json` to print one PASS / SKIP / FAIL line per tier.

Tests marked `timing` assert wall-clock figures against a schedule. A machine shared with other work can
miss such a bound for reasons that are not the code's, so each gets ONE rerun (pytest-rerunfailures), and
the rerun is announced: an "environmental retry" line with the test and the load average at that moment,
in the tier's summary and its JSON. A real defect fails both runs.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

TIER_MARKERS = (
    "realvllm", "nix_parse", "nix_flake", "nix_lib", "nix_nixos", "nix_vm", "build_env", "system", "day2"
)
TIER_NAMES = {
    "unit": "python unit + in-process servers",
    "realvllm": "python against real vLLM (CPU)",
    "nix_parse": "nix: parse every .nix file",
    "nix_flake": "nix: flake structure (offline)",
    "nix_lib": "nix: module tests (nixpkgs lib)",
    "nix_nixos": "nix: full NixOS evaluations",
    "nix_vm": "nix: VM tests (instantiate)",
    "build_env": "build-env: the package as Nix builds it",
    "system": "system: rendered units under real systemd",
    "day2": "day2: one composed station's calendar",
}

TIMING_RERUNS = 1  # one retry of a `timing` test; announced (see the module's docstring)

_results: dict[str, dict[str, Any]] = defaultdict(
    lambda: {"passed": 0, "failed": 0, "skipped": 0, "reasons": [], "retries": []}
)
_tier_of: dict[str, str] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--tiers-json", default=None, help="write the per-tier summary as JSON here")


def pytest_configure(config: pytest.Config) -> None:
    for marker in TIER_MARKERS:
        config.addinivalue_line("markers", f"{marker}: test tier '{TIER_NAMES[marker]}'")
    config.addinivalue_line("markers", "xdist_group(name): run on one xdist worker with its group")
    # xdist's loadgroup scheduler reorders its groups by their number of tests (`--loadscope-reorder`, on
    # by default): the day2 tier (10 tests, the longest chain) then started 14 minutes into a full run and
    # was its tail. The order this plugin gives (below) is the one that reaches the workers.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


# Tiers whose tests share one expensive thing across files (a real vLLM server, the machine a real
# systemd boots, the Nix-built package, the day-two station): each runs on one xdist worker, in order.
# Longest first (a full run on 2 cores: day2 ~13 min, build_env ~8, system ~8, realvllm ~5): each starts
# at once on a worker of its own, and the files of the other tiers fill the rest.
SHARED_TIERS = ("day2", "build_env", "system", "realvllm")


def tier_of(item: pytest.Item) -> str:
    return next((m for m in TIER_MARKERS if item.get_closest_marker(m)), "unit")


# tryfirst: xdist's worker turns `xdist_group` markers into groups in its own pytest_collection_modifyitems,
# so they must be on the items before it runs (the conftests add tier markers at pytest_itemcollected).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    retry = config.pluginmanager.hasplugin("rerunfailures")
    for item in items:
        if retry and item.get_closest_marker("timing") and not item.get_closest_marker("flaky"):
            item.add_marker(pytest.mark.flaky(reruns=TIMING_RERUNS))
        tier = tier_of(item)
        _tier_of[item.nodeid] = tier
        # With `-n N --dist loadgroup` (scripts/check): a file's tests stay on one worker (module-scoped
        # fixtures such as one NixOS evaluation run once), and each shared tier stays on one worker.
        group = tier if tier in SHARED_TIERS else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
    # The shared tiers are the longest groups: first in the queue, longest first, they start at once on
    # their own workers instead of becoming the run's tail (stable: the order inside each group is kept).
    rank = {tier: i for i, tier in enumerate(SHARED_TIERS)}
    items.sort(key=lambda item: rank.get(_tier_of[item.nodeid], len(SHARED_TIERS)))


def _report_tier(report: pytest.TestReport) -> str:
    # Under xdist the controller collects nothing: the tier comes from the report's markers.
    if report.nodeid in _tier_of:
        return _tier_of[report.nodeid]
    return next((m for m in TIER_MARKERS if m in report.keywords), "unit")


def retry_line(report: pytest.TestReport) -> str:
    """The announcement of a rerun: the test, the bound it missed, and how loaded the machine was."""
    crash = getattr(report.longrepr, "reprcrash", None)
    missed = (getattr(crash, "message", "") or str(report.longrepr or "")).strip().splitlines() or [""]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    nodeid = report.nodeid.split("@", 1)[0]  # without the xdist group suffix
    return (
        f"environmental retry: {nodeid} missed a wall-clock bound ({missed[0].removeprefix('AssertionError: ')[:160]});"
        f" load average {load} on {os.cpu_count()} cores; run once more"
    )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = _report_tier(report)
    bucket = _results[tier]
    if report.outcome == "rerun":  # type: ignore[comparison-overlap]  # pytest-rerunfailures' own outcome
        bucket["retries"].append(retry_line(report))
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if report.passed:
            bucket["passed"] += 1
        elif report.skipped:
            bucket["skipped"] += 1
            longrepr = report.longrepr
            reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            if hasattr(report, "wasxfail"):  # an expected failure: its reason, not its traceback
                reason = f"expected failure: {report.wasxfail}"
            reason = " ".join(reason.removeprefix("Skipped: ").split())
            if reason not in bucket["reasons"]:
                bucket["reasons"].append(reason)
        else:
            bucket["failed"] += 1
    elif report.when == "teardown" and report.failed:
        bucket["failed"] += 1


def tier_status(bucket: dict[str, Any]) -> str:
    if bucket["failed"]:
        return "FAIL"
    if bucket["passed"]:
        return "PASS"
    return "SKIP"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    out = []
    for tier in ("unit", *TIER_MARKERS):
        bucket = _results.get(tier, {"passed": 0, "failed": 0, "skipped": 0, "reasons": [], "retries": []})
        entry = {"tier": tier, "title": TIER_NAMES[tier], "status": tier_status(bucket), **bucket}
        if not (bucket["passed"] or bucket["failed"] or bucket["skipped"]):
            entry["status"] = "SKIP"
            entry["reasons"] = ["no tests collected for this tier"]
        out.append(entry)
    terminalreporter.section("test tiers")
    for e in out:
        terminalreporter.write_line(
            f"{e['status']:<4}  {e['title']:<38} {e['passed']} passed, {e['failed']} failed, {e['skipped']} skipped"
        )
        if e["status"] == "SKIP" or e["skipped"]:
            for reason in e["reasons"][:5]:
                terminalreporter.write_line(f"      skipped: {reason}")
        for line in e["retries"]:
            terminalreporter.write_line(f"      {line}")
    path = config.getoption("--tiers-json")
    if path:
        Path(path).write_text(json.dumps(out, indent=2))
