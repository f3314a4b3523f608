"""Tests compare with literal expectations: a test file never takes a constant from the `vllm_station` module
it tests (docs/testing.md, "Literal expectations"). A test that expects `weights.GiB` bytes, `probe.TEXTFILE`
or `redact.MIN_SECRET_LEN` characters moves with the constant: a wrong unit, a renamed file or an
off-by-one limit in the module passes its own test. The test writes `2**30`, "station-probe.prom", 8.

The module a test file tests: the one its name names (`test_weights.py`, `test_strength_weights.py` →
`vllm_station.commands.weights`; `test_gates_agent.py` → `vllm_station.commands.gates.agent`;
`test_bench_args.py` → the package `vllm_station.commands.bench`), and the sources scripts/bench-mutation
measures against that file. A constant: a module attribute whose name starts with a capital letter
(`MAX_TOKENS`, `GiB`) and whose value is data, not a class, function or module (`Status.FAIL`, an enum
member, is not flagged).

`ALLOWED` lists the few contract names that are the point of the test, each with the reason; keep it short.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import inspect
from functools import cache
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
PKG = TESTS.parent / "src" / "vllm_station"
BENCH_MUTATION = TESTS.parents[2] / "scripts" / "bench-mutation"
pytestmark = [
    pytest.mark.host,  # the repository's scripts/ is not in a Nix build's source
    pytest.mark.skipif(
        not BENCH_MUTATION.exists(),
        reason="scripts/bench-mutation is outside the package's source (a Nix build's): the repository's "
        "check runs this",
    ),
]

# fnmatch patterns of `module.NAME` (as the test file names it) -> why the test may use the module's value
ALLOWED: dict[str, str] = {
    "vllm_station.cli.COMMANDS": "the registry of verbs: tests iterate over every command, whatever it holds",
    "vllm_station.commands.preflight.core.REGISTRY": "the registry of checks: tests iterate over every check",
    "vllm_station.api.checks.CHECKS": "the registry of smoke's checks: tests iterate over every check",
    "vllm_station.checkpoint*.STAMP_NAME": "the stamp's file name: a contract with modules/lib/contract.nix, "
    "pinned literally by checks/test_contracts.py; tests only place a stamp where the verbs look",
    "vllm_station.sim.profiles.PROFILES": "the simulator's profiles by name: the test measures the "
    "profile it reads, against literal figures",
    "vllm_station.cli.ALIASES": "the registry of old verb names: tests run each old name against its verb",
    "vllm_station.options.*": "the shared flags' one home: the vocabulary test asserts every verb's parser "
    "carries the layer's own values (the same object), not a value it expects",
}


def _modules() -> set[str]:
    out = set()
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out.add(".".join(parts))
    return out


MODULES = _modules()


def _bench_mutation_sources() -> dict[str, set[str]]:
    """test file name -> the modules scripts/bench-mutation mutates against it ({} outside the repo)."""
    if not BENCH_MUTATION.exists():
        return {}
    tree = ast.parse(BENCH_MUTATION.read_text())
    table = next(
        n.value for n in tree.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id == "MODULES"
    )  # fmt: skip
    out: dict[str, set[str]] = {}
    for node in ast.walk(table):  # type: ignore[arg-type]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Module":
            sources, tests = ast.literal_eval(node.args[1]), ast.literal_eval(node.args[2])
            mods = {"vllm_station." + s.removesuffix(".py").replace("/", ".") for s in sources}
            for t in tests:
                out.setdefault(t, set()).update(mods)
    return out


BENCH = _bench_mutation_sources()


def under_test(test_file: str) -> set[str]:
    """The modules `test_file` tests (see the module docstring)."""
    stem = Path(test_file).stem.removeprefix("test_").removeprefix("strength_")
    parts = stem.split("_")
    found: set[str] = set()
    for n in range(len(parts), 0, -1):
        word = "_".join(parts[:n])
        found = {  # a module whose dotted name ends in the words: gates_agent -> commands.gates.agent
            m for m in MODULES
            if any("_".join(m.split(".")[-k:]) == word for k in range(1, m.count(".") + 1))
        }  # fmt: skip
        if found:
            break
    packages = {m for m in found if (PKG.parent / m.replace(".", "/") / "__init__.py").exists()}
    found |= {m for m in MODULES for p in packages if m.startswith(p + ".")}
    return found | BENCH.get(Path(test_file).name, set())


@cache
def _is_constant(module: str, name: str) -> bool:
    if not name[:1].isupper():
        return False
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return False
    return not (inspect.isclass(obj) or inspect.ismodule(obj) or callable(obj))


def constants_taken(path: Path) -> list[tuple[int, str]]:
    """(line, `module.NAME`) of each constant `path` takes from a module it tests."""
    tested = under_test(path.name)
    tree = ast.parse(path.read_text())
    bound: dict[str, str] = {}  # local name -> module it is bound to
    hits: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("vllm_station.") and a.asname:
                    bound[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vllm_station"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in MODULES:
                    bound[a.asname or a.name] = full
                elif node.module in tested and _is_constant(node.module, a.name):  # type: ignore[operator]
                    hits.append((node.lineno, full))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            module = bound[node.value.id]
            if module in tested and _is_constant(module, node.attr):
                hits.append((node.lineno, f"{module}.{node.attr}"))
    return sorted(set(hits))


def _allowed(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in ALLOWED)


def test_no_test_takes_a_constant_from_the_module_it_tests() -> None:
    found = [
        f"{path.relative_to(TESTS)}:{line}: {name}"
        for path in sorted(TESTS.glob("test_*.py"))
        for line, name in constants_taken(path)
        if not _allowed(name)
    ]
    assert found == [], "tests compare with literals, not the tested module's constants:\n" + "\n".join(found)


def test_the_check_sees_each_way_of_taking_a_constant(tmp_path: Path) -> None:
    """The check itself: `from … import GiB`, `module.TEXTFILE` through
    `from vllm_station.commands import probe` and through `import vllm_station.x as y`, a package's
    submodule; not a class's member, not a function, not another module's constant."""
    body = (
        "from vllm_station.commands.weights import GiB, Status, scan\n"
        "from vllm_station.commands import probe\n"
        "import vllm_station.commands.weights as w\n"
        "from vllm_station.errors import EXIT_FAIL\n"
        "x = probe.TEXTFILE, w.WHOLE_MODEL_FRACTION, w.Status.FAIL, probe.run_probe, Status.PASS, EXIT_FAIL\n"
    )
    (tmp_path / "test_weights.py").write_text(body)
    assert [n for _, n in constants_taken(tmp_path / "test_weights.py")] == [
        "vllm_station.commands.weights.GiB",
        "vllm_station.commands.weights.WHOLE_MODEL_FRACTION",
    ]  # probe is not what test_weights.py tests
    (tmp_path / "test_strength_probe.py").write_text(body)
    taken = [n for _, n in constants_taken(tmp_path / "test_strength_probe.py")]
    assert taken == ["vllm_station.commands.probe.TEXTFILE"]
    # its name's module, and what scripts/bench-mutation mutates against it
    assert under_test("test_gates_agent.py") == {
        "vllm_station.commands.gates.agent",
        "vllm_station.batteries.tasks",
    }
    assert "vllm_station.redact" in under_test("test_strength_redaction.py")  # from scripts/bench-mutation
    assert "vllm_station.commands.bench.cli" in under_test("test_bench_args.py")  # a package: its modules


def test_every_allowance_is_used() -> None:
    """An allowance no test needs any more is removed, so the list stays the short list of real contracts."""
    used = {
        pattern
        for path in TESTS.glob("test_*.py")
        for _, name in constants_taken(path)
        for pattern in ALLOWED
        if fnmatch.fnmatchcase(name, pattern)
    }
    assert used == set(ALLOWED)
