"""pytest plugin: group results into the project's test tiers and write a per-tier summary.

Tiers come from markers: realvllm, nix_parse, nix_flake, nix_lib, nix_nixos, nix_vm, build_env, system, day2; anything else
is `unit`. `scripts/check` loads it with `-p pytest_tiers` and reads the JSON written to
`--tiers-json` to print one PASS / SKIP / FAIL line per tier.

Tests marked `timing` assert wall-clock figures against a schedule. A machine shared with other work can
miss such a bound for reasons that are not the code's, so each gets ONE rerun (pytest-rerunfailures), and
the rerun is announced: an "environmental retry" line with the test and the load average at that moment,
in the tier's summary and its JSON. A real defect fails both runs.

The package's tests run once. The build-env tier runs the package's suite as a Nix build runs it (its
inputs only, one process); the unit tier would run most of the same tests again in the developers' venv.
When the session holds that suite's test and it can run (Nix and the full tree are there), the unit tier
leaves to it every package test the build's suite runs — all but the files package.nix keeps out
(`disabledTestPaths`: the hostile servers, the rollouts), the `timing` and `host` tests (a Nix build skips
them: wall-clock bounds, and what its sandbox lacks) and the other tiers' tests — and counts the suite's
results in the build-env tier's line (`suite_counts`, which the suite's test records). The suite's test fails when one of the tests left to it skipped there (it would
run nowhere); a suite that skipped as a whole fails the tier. STATION_SUITE_ONCE=0: both run everything.
"""

from __future__ import annotations

import json
import os
import sys
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
    lambda: {"passed": 0, "failed": 0, "skipped": 0, "reasons": [], "retries": [], "notes": []}
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
    if os.environ.get("STATION_SUITE_ONCE", "1") != "0":
        config.pluginmanager.register(SuiteOnce(), "station-suite-once")


# Tiers whose tests share one expensive thing across files (a real vLLM server, the machine a real
# systemd boots, the Nix-built package, the day-two station): each runs on one xdist worker, in order.
# Longest first (a full run on 2 cores: day2 ~13 min, build_env ~8, system ~8, realvllm ~5): each starts
# at once on a worker of its own, and the files of the other tiers fill the rest.
SHARED_TIERS = ("day2", "build_env", "system", "realvllm")


def tier_of(item: pytest.Item) -> str:
    return next((m for m in TIER_MARKERS if item.get_closest_marker(m)), "unit")


# ---- the package's tests, once (the module's docstring) -----------------------------------------------
SUITE_TEST = "checks/test_build_env.py::test_suite_passes_as_pytest_check_hook_runs_it"
PACKAGE_DIR = "pkgs/station-tools/"  # the package's root: the build's suite runs from there
# markers of the package's tests a Nix build skips (the unit tier runs them)
SKIPPED_IN_A_BUILD = ("timing", "host")
LEFT_TO_SUITE = pytest.StashKey[frozenset[str]]()  # the unit tests left to the suite, as suite_id() names them


def suite_id(package_nodeid: str) -> str:
    """A package test's id as the build's suite names it in its junit report (run from the package's
    root): `tests/test_x.py::Case::test_y[p]` -> `tests.test_x.Case::test_y[p]` (classname::name)."""
    path, _, rest = package_nodeid.partition("::")
    head, bracket, params = rest.partition("[")  # a parameter id may hold "::" itself
    *classes, name = head.split("::")
    return "::".join([".".join([path.removesuffix(".py").replace("/", "."), *classes]), name + bracket + params])


def suite_runs(nodeid: str, tier: str, skipped_there: bool, left_out: set[str]) -> bool:
    """Whether the build's suite runs this test (so the unit tier need not): a package test of no other
    tier, not one a Nix build skips (`timing`: wall-clock bounds; `host`: what its sandbox lacks), in a
    file package.nix does not keep out."""
    base = nodeid.split("@", 1)[0]  # without xdist's group suffix
    if tier != "unit" or skipped_there or not base.startswith(f"{PACKAGE_DIR}tests/"):
        return False
    return base.removeprefix(PACKAGE_DIR).split("::", 1)[0] not in left_out


class SuiteOnce:
    """Leaves the package tests the build-env suite runs to it (after `-m`/`-k` chose the session's tests)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        suite = next((i for i in items if i.nodeid.split("@", 1)[0] == SUITE_TEST), None)
        if suite is None:
            return
        try:
            import buildenv  # checks/: on sys.path once a checks/ test module is imported
        except ImportError:
            sys.path.insert(0, str(Path(str(config.rootpath)) / "checks"))
            import buildenv
        try:
            left_out = buildenv.suite_leaves_out()
        except pytest.skip.Exception:
            return  # the build-env tier skips (no Nix, no tree): the unit tier runs everything
        chosen = [
            i for i in items
            if suite_runs(i.nodeid, tier_of(i), any(map(i.get_closest_marker, SKIPPED_IN_A_BUILD)), left_out)
        ]  # fmt: skip
        if not chosen:
            return
        gone = set(chosen)
        items[:] = [i for i in items if i not in gone]
        config.hook.pytest_deselected(items=chosen)
        config.stash[LEFT_TO_SUITE] = frozenset(suite_id(i.nodeid.split("@", 1)[0].removeprefix(PACKAGE_DIR))
                                                 for i in chosen)  # fmt: skip
        suite.user_properties.append(("unit_tests_left_to_suite", len(chosen)))


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
    props = dict(report.user_properties)
    left = int(props.get("unit_tests_left_to_suite", 0))
    if left and report.skipped:  # the tests left to the suite ran nowhere
        bucket["failed"] += 1
        bucket["notes"].append(f"FAILED: the unit tier left {left} package tests to the build's suite, which "
                               "skipped: STATION_SUITE_ONCE=0 runs them in the unit tier")  # fmt: skip
        return
    if "suite_counts" in props and report.when == "call":
        counts = json.loads(str(props["suite_counts"]))
        for key in ("passed", "failed", "skipped"):
            bucket[key] += int(counts[key])
        if left:
            _results["unit"]["notes"].append(f"{left} package tests ran once, in the build-env tier's suite")
        bucket["notes"].append(
            f"the package's suite as a Nix build runs it: {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['skipped']} skipped (counted in this line)"
        )
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
        bucket = _results.get(
            tier, {"passed": 0, "failed": 0, "skipped": 0, "reasons": [], "retries": [], "notes": []}
        )
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
        for line in [*e["retries"], *e["notes"]]:
            terminalreporter.write_line(f"      {line}")
    path = config.getoption("--tiers-json")
    if path:
        Path(path).write_text(json.dumps(out, indent=2))
