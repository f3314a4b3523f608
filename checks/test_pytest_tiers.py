"""scripts/pytest_tiers.py under xdist, as scripts/check runs it: do the groups reach xdist's scheduler?

A shared tier (real vLLM, system, build-env) split across workers makes the workers queue on one lock —
the real-vLLM tests once waited 23 minutes in setup for a server another worker held. A file split across
workers repeats its module-scoped fixtures (a NixOS evaluation each). This runs a small suite the way
scripts/check runs the real one and asserts where each test ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

RECORD = textwrap.dedent(
    """
    import json, os, pathlib
    import pytest

    import time

    def record(name):
        out = pathlib.Path(os.environ["TIERS_RECORD"]) / f"{name}.json"
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        out.write_text(json.dumps({"worker": worker, "at": time.monotonic_ns()}))
    """
)

CONFTEST = textwrap.dedent(
    """
    import pytest

    @pytest.fixture(scope="session")
    def shared_server():
        return "server"

    def pytest_itemcollected(item):
        # like pkgs/station-tools/tests/conftest.py: the tier comes from a fixture the test uses
        if "shared_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.realvllm)
    """
)


def _unit_file(name: str) -> str:
    return RECORD + "".join(
        f"\n\n@pytest.mark.parametrize('i', range(4))\ndef test_{name}_{k}(i):\n    record(f'{name}-{k}-{{i}}')\n"
        for k in range(3)
    )


def _shared_file(name: str, how: str, n: int = 6) -> str:
    # half by fixture (conftest marks it), half by module marker
    if how == "fixture":
        body = f"\n\n@pytest.mark.parametrize('i', range({n}))\ndef test_{name}(shared_server, i):\n"
    else:
        body = f"\n\npytestmark = pytest.mark.system\n\n@pytest.mark.parametrize('i', range({n}))\ndef test_{name}(i):\n"
    return RECORD + body + f"    record(f'shared-{name}-{{i}}')\n"


def _suite(tmp_path: Path) -> Path:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    for name in ("alpha", "beta", "gamma", "delta"):
        (suite / f"test_{name}.py").write_text(_unit_file(name))
    (suite / "test_vllm_one.py").write_text(_shared_file("vllm_one", "fixture"))
    (suite / "test_vllm_two.py").write_text(_shared_file("vllm_two", "fixture"))
    (suite / "test_sys_one.py").write_text(_shared_file("sys_one", "marker"))
    (suite / "test_sys_two.py").write_text(_shared_file("sys_two", "marker"))
    return suite


def _pytest(suite: Path, record: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TIERS_RECORD": str(record), "PYTHONPATH": str(REPO / "scripts"), "PYTEST_ADDOPTS": ""}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "pytest_tiers", *args,
         "-p", "no:cacheprovider", "--rootdir", str(suite), "-c", "/dev/null", str(suite)],
        check=False, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip


def test_xdist_keeps_a_file_and_a_shared_tier_on_one_worker(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    record = tmp_path / "record"
    record.mkdir()
    run = _pytest(suite, record, "-n", "3", "--dist", "loadgroup", "-q")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    workers: dict[str, set[str]] = defaultdict(set)
    for f in record.glob("*.json"):
        first, second, _ = f.stem.split("-")  # alpha-<k>-<i> or shared-<file>-<i>
        group = first if first != "shared" else ("realvllm" if second.startswith("vllm") else "system")
        workers[group].add(json.loads(f.read_text())["worker"])
    assert len(list(record.glob("*.json"))) == 4 * 3 * 4 + 4 * 6
    assert set(workers) == {"alpha", "beta", "gamma", "delta", "realvllm", "system"}
    # really distributed (else the assertions below hold trivially)
    assert len(set().union(*workers.values())) >= 2, workers
    assert all(w.startswith("gw") for ws in workers.values() for w in ws), workers
    split = {group: sorted(ws) for group, ws in workers.items() if len(ws) != 1}
    assert not split, f"groups that ran on more than one worker: {split}"


def test_shared_tiers_are_queued_first(tmp_path: Path) -> None:
    # the longest groups start at once instead of becoming the run's tail
    suite = _suite(tmp_path)
    run = _pytest(suite, tmp_path, "--collect-only", "-q")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ids = [line for line in run.stdout.splitlines() if "::" in line]
    assert len(ids) == 4 * 3 * 4 + 4 * 6
    shared = [i for i, nodeid in enumerate(ids) if "test_vllm_" in nodeid or "test_sys_" in nodeid]
    assert shared == list(range(24)), ids[:30]
    # longest first: the system tier (SHARED_TIERS' order) before the real-vLLM one
    assert all("test_sys_" in nodeid for nodeid in ids[:12]), ids[:24]


def test_each_worker_starts_with_a_shared_tier_whatever_the_groups_sizes(tmp_path: Path) -> None:
    """xdist's loadgroup reorders groups by their number of tests unless told not to: here the unit files
    are larger than the shared tiers, and each worker must still begin with a shared tier."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    for name in ("alpha", "beta", "gamma", "delta"):
        (suite / f"test_{name}.py").write_text(_unit_file(name))  # 12 tests each
    (suite / "test_vllm_one.py").write_text(_shared_file("vllm_one", "fixture", 2))
    (suite / "test_sys_one.py").write_text(_shared_file("sys_one", "marker", 2))
    record = tmp_path / "record"
    record.mkdir()
    run = _pytest(suite, record, "-n", "2", "--dist", "loadgroup", "-q")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    first: dict[str, tuple[int, str]] = {}
    for f in record.glob("*.json"):
        rec = json.loads(f.read_text())
        first[rec["worker"]] = min(first.get(rec["worker"], (rec["at"], f.stem)), (rec["at"], f.stem))
    assert sorted(first) == ["gw0", "gw1"], first
    assert sorted(stem.split("-")[1] for _, stem in first.values()) == ["sys_one", "vllm_one"], first


TIMING_SUITE = textwrap.dedent(
    """
    import os, pathlib
    import pytest

    def runs(name):
        f = pathlib.Path(os.environ["TIERS_RECORD"]) / name
        n = int(f.read_text()) + 1 if f.exists() else 1
        f.write_text(str(n))
        return n

    @pytest.mark.timing
    def test_late_once():
        assert runs("late_once") > 1, "took 0.25 s, bound 0.2 s"

    @pytest.mark.timing
    def test_always_late():
        runs("always_late")
        assert False, "took 9 s, bound 0.2 s"

    def test_untimed_failure():
        runs("untimed")
        assert False, "a plain failure"
    """
)


def test_a_timing_test_gets_one_announced_retry_and_nothing_else_does(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_timing.py").write_text(TIMING_SUITE)
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n  timing: wall-clock bounds\n")
    record = tmp_path / "record"
    record.mkdir()
    tiers = tmp_path / "tiers.json"
    run = _pytest(suite, record, "-n", "2", "--dist", "loadgroup", "--tiers-json", str(tiers))
    out = run.stdout + run.stderr
    assert run.returncode == 1, out[-3000:]
    runs = {f.name: int(f.read_text()) for f in record.iterdir()}
    assert runs == {"late_once": 2, "always_late": 2, "untimed": 1}, runs
    (unit,) = [e for e in json.loads(tiers.read_text()) if e["tier"] == "unit"]
    # the retried run's result counts once: a pass after a retry is a pass, two misses are one failure
    assert (unit["passed"], unit["failed"], unit["status"]) == (1, 2, "FAIL"), unit
    assert len(unit["retries"]) == 2
    late_once = next(line for line in unit["retries"] if "test_late_once" in line)
    assert late_once.startswith("environmental retry: test_timing.py::test_late_once missed a wall-clock")
    assert "took 0.25 s, bound 0.2 s" in late_once and "load average" in late_once
    assert "environmental retry: test_timing.py::test_late_once" in run.stdout, "said in the output too"


# ---- the package's tests, once: the unit tier leaves those the build-env suite runs to it -------------


def test_suite_id_is_the_build_suites_junit_name() -> None:
    from pytest_tiers import suite_id

    assert suite_id("tests/test_x.py::test_y") == "tests.test_x::test_y"
    assert suite_id("tests/test_x.py::test_y[a-b::c]") == "tests.test_x::test_y[a-b::c]"
    assert suite_id("tests/test_x.py::Case::test_y[p]") == "tests.test_x.Case::test_y[p]"


def test_suite_runs_only_unit_tests_of_the_package_outside_the_left_out_files() -> None:
    from pytest_tiers import suite_runs

    left_out = {"tests/test_rollout.py"}
    assert suite_runs("pkgs/station-tools/tests/test_a.py::test_b", "unit", False, left_out)
    assert suite_runs("pkgs/station-tools/tests/test_a.py::test_b@pkgs/station-tools/tests/test_a.py", "unit",
                      False, left_out)  # fmt: skip
    assert not suite_runs("pkgs/station-tools/tests/test_a.py::test_b", "unit", True, left_out)  # timing
    assert not suite_runs("pkgs/station-tools/tests/test_a.py::test_b", "realvllm", False, left_out)
    assert not suite_runs("pkgs/station-tools/tests/test_rollout.py::test_b", "unit", False, left_out)
    assert not suite_runs("checks/test_a.py::test_b", "unit", False, left_out)
    assert not suite_runs("pkgs/station-tools/src/x.py::test_b", "unit", False, left_out)


# a repository in miniature: the package's tests, and a build-env suite test whose "suite" is a stand-in
# (a real one needs Nix, the tree and PyPI: the build-env tier runs that); buildenv.suite_leaves_out() too
SUITE_BUILDENV = """
import os
import pytest

def suite_leaves_out():
    if os.environ.get("FAKE_NO_TREE"):
        pytest.skip("NIXOS_TREE unset")
    return {"tests/test_left.py"}
"""
SUITE_TEST = """
import json, os
import pytest
from pytest_tiers import LEFT_TO_SUITE
from buildenv import suite_leaves_out

pytestmark = pytest.mark.build_env

def test_other_build_env_test():
    pass

def test_suite_passes_as_pytest_check_hook_runs_it(request, record_property):
    suite_leaves_out()  # skips as the real one does without a tree
    left = request.config.stash.get(LEFT_TO_SUITE, frozenset())
    with open(os.environ["TIERS_RECORD"] + "/left.json", "w") as f:
        json.dump(sorted(left), f)
    record_property("suite_counts", json.dumps({"passed": 40, "failed": 0, "skipped": 2}))
"""
PACKAGE_TESTS = """
import pytest

def test_plain():
    pass

@pytest.mark.parametrize("p", ["a", "b"])
def test_param(p):
    pass

@pytest.mark.timing
def test_timed():
    pass

@pytest.mark.host
def test_needs_the_host():
    pass

@pytest.mark.realvllm
def test_vllm():
    pass
"""


def _mini_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    tests = repo / "pkgs/station-tools/tests"
    tests.mkdir(parents=True)
    (repo / "checks").mkdir()
    (repo / "checks/buildenv.py").write_text(SUITE_BUILDENV)
    (repo / "checks/test_build_env.py").write_text(SUITE_TEST)
    (repo / "checks/test_other.py").write_text("def test_check():\n    pass\n")
    (tests / "test_kept.py").write_text(PACKAGE_TESTS)
    (tests / "test_left.py").write_text("def test_left_out():\n    pass\n")
    (repo / "pytest.ini").write_text("[pytest]\nmarkers =\n  timing: wall-clock bounds\n  host: the host's tools\n")
    return repo


def _tiers(repo: Path, record: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    tiers = record / "tiers.json"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "pytest_tiers", "--tiers-json", str(tiers), *args,
         "-p", "no:cacheprovider", "--rootdir", str(repo), "-c", str(repo / "pytest.ini"),
         str(repo / "pkgs/station-tools/tests"), str(repo / "checks")],
        check=False, capture_output=True, text=True, timeout=240, cwd=repo,
        env={**os.environ, "TIERS_RECORD": str(record), "PYTHONPATH": str(REPO / "scripts"), "PYTEST_ADDOPTS": "",
             **(env or {})},
    )  # fmt: skip
    assert tiers.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    out = {e["tier"]: e for e in json.loads(tiers.read_text())}
    out["_run"] = {"stdout": run.stdout, "rc": run.returncode}
    return out


def test_unit_tier_leaves_the_suites_tests_to_it_and_counts_them_there(tmp_path: Path) -> None:
    repo = _mini_repo(tmp_path)
    record = tmp_path / "record"
    record.mkdir()
    tiers = _tiers(repo, record, "-n", "2", "--dist", "loadgroup")
    assert tiers["_run"]["rc"] == 0, tiers["_run"]["stdout"][-3000:]
    # the unit tier ran: the timing and the host test, the left-out file's test, checks/' own test (4); not
    # the three the suite runs (test_plain, test_param[a], test_param[b]), nor realvllm's
    assert (tiers["unit"]["passed"], tiers["unit"]["failed"]) == (4, 0), tiers["unit"]
    assert tiers["realvllm"]["passed"] == 1
    # build_env: its 2 tests plus the suite's 40 passed and 2 skipped, counted in its line
    assert (tiers["build_env"]["passed"], tiers["build_env"]["skipped"]) == (42, 2), tiers["build_env"]
    assert "3 package tests ran once, in the build-env tier's suite" in tiers["unit"]["notes"]
    left = json.loads((record / "left.json").read_text())
    assert left == ["tests.test_kept::test_param[a]", "tests.test_kept::test_param[b]", "tests.test_kept::test_plain"]


def test_without_the_suite_in_the_session_the_unit_tier_runs_everything(tmp_path: Path) -> None:
    repo = _mini_repo(tmp_path)
    record = tmp_path / "record"
    record.mkdir()
    for args, env in ((["-m", "not build_env"], {}), ([], {"FAKE_NO_TREE": "1"}), ([], {"STATION_SUITE_ONCE": "0"})):
        tiers = _tiers(repo, record, *args, env=env)
        assert tiers["unit"]["passed"] == 7, (args, env, tiers["unit"])  # 4 + 2 params + the left-out + check
        assert not tiers["unit"]["notes"], tiers["unit"]


def test_a_test_left_to_the_suite_that_skips_there_fails_the_real_suite_test() -> None:
    """The real test compares the suite's skipped tests with what the unit tier left it (the guard)."""
    text = (REPO / "checks/test_build_env.py").read_text()
    assert "request.config.stash.get(LEFT_TO_SUITE" in text and "ran nowhere" in text
