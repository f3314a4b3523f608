"""Tier `build_env`: the package as Nix builds it (checks/buildenv.py has the machinery).

package.nix's inputs, read from a full nixpkgs tree (NIXOS_TREE), are mapped to PyPI names and installed
into a venv holding exactly those; the package is installed from the evaluated `src` without
dependencies, and its test suite runs the way pytestCheckHook runs it in the build. A check input or
runtime dependency missing from package.nix fails here, as it would fail `nix build`. The negative
cases drop an input through overridePythonAttrs and show the tier failing for it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from buildenv import (
    PYPI,
    RUNTIME_DEPS_CHECK,
    Build,
    Inputs,
    evaluate,
    pool_venv,
    subset_venv,
    xdist_hook,
)
from nixenv import REPO
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    from pytest_tiers import LEFT_TO_SUITE
except ImportError:  # run without scripts/check's plugin: the unit tier left nothing to the suite
    LEFT_TO_SUITE = None

pytestmark = pytest.mark.build_env

PYPROJECT = tomllib.loads((REPO / "pkgs/station-tools/pyproject.toml").read_text())
# Entries of the `test` extra that are developer tools (scripts/check runs them); the suite imports neither.
# scripts/check's own tools, not the suite's: a Nix build skips the `timing` tests that pytest-rerunfailures
# would retry (and adding it to package.nix changed the runtime package's inputs for nothing)
DEV_TOOLS = {"ruff", "mypy", "pytest-rerunfailures"}
SUITE_TIMEOUT_S = 900
MIN_TESTS = 300

# For each runtime dependency, a test of the suite that fails when it is absent, and the error it shows.
# Four of the six are imported lazily (inside functions): importing every module does not find them.
RUNTIME_CATCHERS = {
    "aiohttp": ("tests/test_simulate.py", "No module named 'aiohttp'"),
    "cffi": ("tests/test_numa.py", "No module named 'cffi'"),
    "httpx": ("tests/test_api_client.py", "No module named 'httpx'"),
    "huggingface-hub": (
        "tests/test_download.py::test_full_download_bound_to_node0_then_verified",
        "No module named 'huggingface_hub'",
    ),
    "jsonschema": ("tests/test_gates_tools.py", "No module named 'jsonschema'"),
    "matplotlib": (
        "tests/test_bench_sim.py::test_json_keys_are_golden_and_csv_and_plots",
        "--plots needs matplotlib, which is not installed",
    ),
    "nvidia-ml-py": ("tests/test_host.py::test_nvml_absent_here_raises_unavailable", "No module named 'pynvml'"),
}


def names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def metadata_problems(inputs: Inputs) -> list[str]:
    """Where package.nix and pyproject.toml disagree on what the package needs."""
    problems = []
    project = PYPROJECT["project"]
    pairs = [
        ("dependencies", names(project["dependencies"]), inputs.dependencies),
        ("build-system", names(PYPROJECT["build-system"]["requires"]), inputs.build_system),
        (
            "nativeCheckInputs",
            names(project["optional-dependencies"]["test"]) - DEV_TOOLS,
            [p for p in inputs.check_inputs if p not in inputs.tools],
        ),
    ]
    for attr, declared, pnames in pairs:
        nix = {canonicalize_name(p) for p in inputs.pypi_names(pnames)}
        if declared - nix:
            problems.append(f"package.nix {attr} lacks {sorted(declared - nix)} (pyproject.toml lists them)")
        if nix - declared:
            problems.append(f"package.nix {attr} has {sorted(nix - declared)} that pyproject.toml does not list")
    # pythonRuntimeDepsCheckHook: the tree's versions must satisfy pyproject's specifiers
    versions = {canonicalize_name(PYPI.get(p, p)): v for p, v in inputs.raw["versions"].items()}
    for text in [*project["dependencies"], *PYPROJECT["build-system"]["requires"]]:
        req = Requirement(text)
        have = versions.get(canonicalize_name(req.name))
        if have is not None and req.specifier and not req.specifier.contains(have, prereleases=True):
            problems.append(f"{req} not satisfied by the tree's {req.name} {have}")
    if not inputs.raw["doCheck"]:
        problems.append("package.nix sets doCheck = false: the suite would not run in the build")
    return problems


@pytest.fixture(scope="module")
def inputs() -> Inputs:
    return evaluate()


@pytest.fixture(scope="module")
def build(inputs: Inputs, tmp_path_factory: pytest.TempPathFactory) -> Build:
    b = Build(inputs, pool_venv(inputs.pypi_names()), tmp_path_factory.mktemp("build"))
    b.unpack()
    b.install()
    return b


def without(build: Build, drop: str, dest: Path) -> Build:
    """The same build with `drop` taken out of package.nix (overridePythonAttrs) and so out of its venv."""
    reduced = evaluate((drop,))
    assert drop in build.inputs.pnames and drop not in reduced.pnames, f"dropping {drop} changed nothing"
    venv = subset_venv(build.venv, reduced.pypi_names(), dest, absent=(PYPI[drop],))
    return dataclasses.replace(build, inputs=reduced, venv=venv)


def test_every_input_has_a_pypi_name(inputs: Inputs) -> None:
    assert inputs.dependencies and inputs.build_system and inputs.check_inputs, inputs.raw
    assert inputs.unmapped() == [], f"package.nix inputs missing from buildenv.PYPI: {inputs.unmapped()}"
    # an input nobody mapped fails by name instead of being guessed
    extra = Inputs({**inputs.raw, "nativeCheckInputs": [*inputs.check_inputs, "an-unmapped-input"]})
    assert extra.unmapped() == ["an-unmapped-input"]
    with pytest.raises(AssertionError, match="an-unmapped-input"):
        extra.pypi_names()


def test_package_nix_agrees_with_pyproject(inputs: Inputs) -> None:
    assert metadata_problems(inputs) == []


def test_runtime_package_holds_no_tests(inputs: Inputs) -> None:
    """What the units run is built from the sources alone; the suite runs in passthru.tests.pytest."""
    runtime, check = Path(inputs.raw["runtime"]["src"]), Path(inputs.raw["src"])
    assert not (runtime / "tests").exists(), f"the runtime package's source holds tests/: {runtime}"
    assert (check / "tests").is_dir(), f"the check's source lacks tests/: {check}"
    assert sorted(p.name for p in runtime.iterdir()) == sorted(p.name for p in check.iterdir() if p.name != "tests")
    assert not inputs.raw["runtime"]["doCheck"], "the runtime package runs a suite it does not hold"


def test_package_installs_from_src_and_imports(build: Build) -> None:
    """pythonImportsCheck, every module, pythonRuntimeDepsCheckHook and the wrapped `station`."""
    imports = build.inputs.raw["pythonImportsCheck"]
    assert imports == ["vllm_station"]
    load = "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]"
    r = build.run(["python", "-c", load, *imports], timeout=120, pre_check=False, cwd=build.out)
    assert r.returncode == 0, r.stdout
    every = (
        "import importlib, pkgutil, sys, vllm_station\n"
        "assert vllm_station.__file__.startswith(sys.argv[1]), vllm_station.__file__\n"
        "mods = [m.name for m in pkgutil.walk_packages(vllm_station.__path__, 'vllm_station.')]\n"
        "[importlib.import_module(m) for m in mods if not m.endswith('.__main__')]\n"
        "print(len(mods), 'modules')\n"
    )
    r = build.run(["python", "-c", every, str(build.site())], timeout=120, pre_check=False)
    assert r.returncode == 0, r.stdout
    assert int(r.stdout.split()[0]) > 30, r.stdout
    r = build.run(["python", "-c", RUNTIME_DEPS_CHECK, "vllm-station"], timeout=120, pre_check=False)
    assert r.returncode == 0, f"pythonRuntimeDepsCheckHook would fail:\n{r.stdout}"
    r = build.run([str(build.out / "bin" / "station"), "--help"], timeout=120, pre_check=False)
    assert r.returncode == 0 and "usage: station" in r.stdout, r.stdout


def test_xdist_hook_as_nixpkgs_appends_it() -> None:
    """pytest-xdist among the check inputs: one worker per build core, as its setup hook adds them."""
    with_xdist = Inputs({"nativeCheckInputs": ["pytest-xdist", "pytest-timeout"], "dontUsePytestXdist": False})
    assert xdist_hook(with_xdist, 2) == ["--numprocesses=2"]
    assert xdist_hook(Inputs({**with_xdist.raw, "dontUsePytestXdist": True}), 2) == []
    assert xdist_hook(Inputs({"nativeCheckInputs": ["pytest-timeout"], "dontUsePytestXdist": False}), 2) == []


def test_package_runs_its_suite_in_one_process_without_the_hostile_file(build: Build) -> None:
    """package.nix lists pytest-xdist but sets dontUsePytestXdist: the build's suite runs in one process, and
    so does this tier's. The hostile-servers file (wall-clock deadlines) is left out of the build, as `timing`
    tests are, and so are the rollouts (chains of simulators and CLI runs); scripts/check runs both."""
    assert "pytest-xdist" in build.inputs.check_inputs and build.inputs.raw["dontUsePytestXdist"] is True
    args = build.pytest_args(cores=2)
    assert not any(a.startswith(("--numprocesses", "--dist")) for a in args), args
    assert "--ignore=tests/test_hostile_all_commands.py" in args, args
    assert "--ignore=tests/test_rollout.py" in args, args


def test_suite_passes_as_pytest_check_hook_runs_it(
    build: Build, request: pytest.FixtureRequest, record_property: Callable[[str, object], None]
) -> None:
    """The package's suite as pytestCheckHook runs it. Under scripts/pytest_tiers.py the unit tier leaves
    the tests this suite runs to it (they run once): their results are counted in this tier's line
    (`suite_counts`), and one of them that skips here would run nowhere, so that fails."""
    junit = build.top / "junit.xml"
    r = build.run([*build.pytest_args(), f"--junitxml={junit}"], timeout=SUITE_TIMEOUT_S)
    failed = [line for line in r.stdout.splitlines() if re.match(r"(FAILED|ERROR) ", line)]
    summary = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "(no output)"
    assert junit.exists(), f"pytest wrote no report (exit {r.returncode}):\n{r.stdout[-4000:]}"
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    bad = counts["failures"] + counts["errors"]
    record_property("suite_counts", json.dumps(
        {"passed": counts["tests"] - bad - counts["skipped"], "failed": bad, "skipped": counts["skipped"]}
    ))  # fmt: skip
    skipped = {f"{case.get('classname')}::{case.get('name')}": skip.get("message", "")
               for case in suite.iter("testcase") for skip in case if skip.tag == "skipped"}  # fmt: skip
    skips = sorted(set(skipped.values()))
    print(f"build-env suite: {counts} ({summary})", *(f"  skipped: {m}" for m in skips), sep="\n")
    left = request.config.stash.get(LEFT_TO_SUITE, frozenset()) if LEFT_TO_SUITE else frozenset()
    nowhere = sorted(f"{t}: {why}" for t, why in skipped.items() if t in left)
    assert not nowhere, ("tests the unit tier left to this suite skipped here, so they ran nowhere (mark them "
                         "`host` — what a Nix build lacks — or `timing`: the unit tier runs those):\n"
                         + "\n".join(nowhere))  # fmt: skip
    # each failure's own report first (its message and the end of its traceback): the run's output is long
    # and a CI log keeps only its start
    reports = [
        f"{case.get('classname')}::{case.get('name')}: {bad.get('message', '')[:1500]}\n{(bad.text or '')[-2500:]}"
        for case in suite.iter("testcase")
        for bad in case
        if bad.tag in ("failure", "error")
    ]
    assert counts["failures"] == 0 and counts["errors"] == 0, "\n".join([summary, *failed, *reports])
    assert counts["tests"] > MIN_TESTS, f"only {counts['tests']} tests ran: {summary}"
    assert r.returncode == 0, r.stdout[-4000:]


def test_missing_check_input_fails_collection(build: Build, tmp_path: Path) -> None:
    """safetensors dropped from nativeCheckInputs: the suite cannot even be collected."""
    reduced = without(build, "safetensors", tmp_path / "venv")
    assert any("nativeCheckInputs lacks ['safetensors']" in p for p in metadata_problems(reduced.inputs))
    collect = ["python", "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "tests/test_verify.py"]
    r = reduced.run(collect, timeout=300)
    assert r.returncode != 0 and "No module named 'safetensors'" in r.stdout, r.stdout[-3000:]
    r = build.run(collect, timeout=300)  # the full inputs collect the same file
    assert r.returncode == 0, r.stdout[-3000:]


def test_every_runtime_dependency_has_a_catching_test(inputs: Inputs) -> None:
    assert sorted(RUNTIME_CATCHERS) == sorted(inputs.dependencies), "name a test that needs each dependency"


@pytest.mark.parametrize("dep", sorted(RUNTIME_CATCHERS))
def test_missing_runtime_dependency_fails_the_suite(build: Build, tmp_path: Path, dep: str) -> None:
    """`dep` dropped from `dependencies`: pyproject disagrees, and a test of the suite fails."""
    reduced = without(build, dep, tmp_path / "venv")
    assert any(f"dependencies lacks ['{dep}']" in p for p in metadata_problems(reduced.inputs))
    selection, error = RUNTIME_CATCHERS[dep]
    r = reduced.run([*reduced.pytest_args(), "-x", "-p", "no:cacheprovider", selection], timeout=600)
    assert r.returncode not in (4, 5), f"{selection} selects no test: update RUNTIME_CATCHERS\n{r.stdout[-2000:]}"
    assert r.returncode in (1, 2), f"{selection} passed without {dep} (exit {r.returncode}):\n{r.stdout[-3000:]}"
    assert error in r.stdout, f"{selection} failed, but not for want of {dep}:\n{r.stdout[-3000:]}"
