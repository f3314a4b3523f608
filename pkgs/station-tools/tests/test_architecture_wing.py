"""Architecture: the verbs' wing (`vllm_station/commands/`, and `vllm_station/sim/` for `station simulate`)
sits on the shared layers, and the arrows only point down.

The rules (docs/architecture.md), read from every module of the package with ast (nothing imported):

1. Every verb of `cli.COMMANDS` lives in the wing: `commands.<verb>` (a module or a package) or `sim`;
   everything under `commands/` is a verb of the table. The top level holds the entry points
   (`cli`, `entry`, `__main__`) and the layers.
2. No verb imports another verb, with one door: a verb that composes others (golive) imports their plan
   modules, `commands.<verb>.plan`, and nothing else of theirs. A plan module runs its own verb's core: it
   imports no other verb (not even a plan), no argparse and not its verb's CLI, and its package's
   `__init__` imports nothing (going through the door loads the plan, not the verb). No allow-list.
3. No layer imports a verb (no exceptions).
4. No import cycle among the package's modules (every import counts, at any depth: a lazy import inside a
   function is still an arrow of the house).

Imports are resolved to modules: `from vllm_station import redact` is an arrow to `vllm_station.redact`,
`from vllm_station.api import ApiClient` one to the package `vllm_station.api`; relative imports are
resolved against the importing module's package.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from vllm_station import cli

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "vllm_station"
ROOT = "vllm_station"
ENTRY_POINTS = frozenset({"vllm_station.cli", "vllm_station.entry", "vllm_station.__main__"})
SIM = "vllm_station.sim"

PLAN = "plan"  # `commands.<verb>.plan`: the plan interface (vllm_station/plans.py), a verb's one door

Graph = dict[str, set[tuple[int, str]]]


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts}


def imports(name: str, path: Path, known: set[str]) -> Iterator[tuple[int, str]]:
    """(line, module) for every import of a package module in `path`, at any depth."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == ROOT or alias.name.startswith(ROOT + "."):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target != ROOT and not target.startswith(ROOT + "."):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield node.lineno, sub if sub in known else target


def verb_of(name: str) -> str | None:
    """The verb a module belongs to (`commands.<verb>…` or `sim…`), or None for a layer/entry point."""
    if name == SIM or name.startswith(SIM + "."):
        return "sim"
    prefix = f"{ROOT}.commands."
    if name.startswith(prefix):
        return name[len(prefix) :].split(".")[0]
    return None


def graph() -> Graph:
    mods = modules()
    known = set(mods)
    return {name: set(imports(name, path, known)) for name, path in mods.items()}


def is_plan(name: str) -> bool:
    """`vllm_station.commands.<verb>.plan`: the one module of a verb that another verb may import."""
    parts = name.split(".")
    return len(parts) == 4 and parts[:2] == [ROOT, "commands"] and parts[3] == PLAN


def forbidden_verb_imports(g: Graph) -> dict[tuple[str, str], list[str]]:
    """The arrows between two verbs that do not go through the door: to anything but the other verb's
    plan module, or from a plan module (a plan runs its own verb's core; composing is the composer's)."""
    found: dict[tuple[str, str], list[str]] = {}
    for pair, where in verb_edges(g).items():
        bad = [w for w in where if is_plan(w.split(":")[0]) or not is_plan(w.rpartition(" -> ")[2])]
        if bad:
            found[pair] = bad
    return found


def verb_edges(g: Graph) -> dict[tuple[str, str], list[str]]:
    """(importer verb, imported verb) -> where ("module:line -> module"), every arrow between two verbs."""
    found: dict[tuple[str, str], list[str]] = {}
    for name, targets in g.items():
        src = verb_of(name)
        for line, target in targets:
            dst = verb_of(target)
            if src is not None and dst is not None and src != dst:
                found.setdefault((src, dst), []).append(f"{name}:{line} -> {target}")
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the package is a few hundred modules, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_verb_lives_in_the_wing() -> None:
    wing = {verb_of(f"{ROOT}.{module}") for module, _ in cli.COMMANDS.values()}
    outside = {v: module for v, (module, _) in cli.COMMANDS.items() if verb_of(f"{ROOT}.{module}") is None}
    assert not outside, f"verbs whose module is not under commands/ or sim/: {outside}"
    rooms = {p.stem if p.is_file() else p.name for p in (PACKAGE / "commands").iterdir()}
    rooms -= {"__init__", "__pycache__"}
    assert rooms <= wing, f"rooms of commands/ that no verb of cli.COMMANDS names: {sorted(rooms - wing)}"
    assert len(wing) >= 24 and {"smoke", "bench", "gates", "golive", "preflight", "sim"} <= wing


def test_the_package_readme_lists_every_verb() -> None:
    """pkgs/station-tools/README.md's table: every verb of the table, in its order, with its help line."""
    readme = (PACKAGE.parents[1] / "README.md").read_text(encoding="utf-8")
    rows = [line for line in readme.splitlines() if line.startswith("| `station ")]
    want = [f"| `station {verb}` | `{module}` | {text} |" for verb, (module, text) in cli.COMMANDS.items()]
    assert rows == want, "pkgs/station-tools/README.md's verb table differs from cli.COMMANDS"


def test_no_verb_imports_another_verb() -> None:
    found = forbidden_verb_imports(graph())
    assert not found, (
        "a verb imports another verb; move the shared piece down into a layer (api/, host/, checkpoint/, "
        "output, …), or, to compose verbs, go through their plan module (commands/<verb>/plan.py, "
        "docs/architecture.md):\n"
        + "\n".join(f"{a} -> {b}: {', '.join(w)}" for (a, b), w in sorted(found.items()))
    )


def test_the_door_is_the_plan_module_alone() -> None:
    """The rule on a made-up house: the plan module is the door; any other module of a verb (its package
    too) and a plan importing another verb's plan are arrows the rule refuses."""
    g: Graph = {
        f"{ROOT}.commands.golive.cli": {
            (1, f"{ROOT}.commands.bench.plan"),
            (2, f"{ROOT}.commands.bench.modes"),
            (3, f"{ROOT}.commands.smoke.plan"),
            (4, f"{ROOT}.commands.gates"),  # the package: its __init__, not the door
        },
        f"{ROOT}.commands.bench.plan": {(5, f"{ROOT}.commands.smoke.plan"), (6, f"{ROOT}.thresholds")},
        f"{ROOT}.commands.probe": {(7, f"{ROOT}.api.checks")},
        f"{ROOT}.commands.smoke.plan": {(8, f"{ROOT}.commands.smoke.cli")},
    }
    assert forbidden_verb_imports(g) == {
        ("golive", "bench"): [f"{ROOT}.commands.golive.cli:2 -> {ROOT}.commands.bench.modes"],
        ("golive", "gates"): [f"{ROOT}.commands.golive.cli:4 -> {ROOT}.commands.gates"],
        ("bench", "smoke"): [f"{ROOT}.commands.bench.plan:5 -> {ROOT}.commands.smoke.plan"],
    }
    assert sorted(verb_edges(g)) == [("bench", "smoke"), ("golive", "bench"), ("golive", "gates"),
                                     ("golive", "smoke")]  # fmt: skip


def test_the_real_house_goes_through_the_door() -> None:
    """What the rule lets through today: golive composes smoke, gates and bench, by their plans only."""
    edges = verb_edges(graph())
    assert sorted(edges) == [("golive", "bench"), ("golive", "gates"), ("golive", "smoke")]
    assert {w.rpartition(" -> ")[2] for where in edges.values() for w in where} == {
        f"{ROOT}.commands.{verb}.{PLAN}" for verb in ("bench", "gates", "smoke")
    }


def test_a_plan_module_is_only_a_plan() -> None:
    """Each `commands/<verb>/plan.py`: no argparse, not its verb's CLI; its package's `__init__` imports
    nothing; and it defines plans: frozen dataclasses naming their `gate`, with `run` and `verdict`."""
    mods = modules()
    g = graph()
    plans = sorted(name for name in mods if is_plan(name))
    assert plans, "no plan module found"
    for name in plans:
        package = name.rpartition(".")[0]
        tree = ast.parse(mods[name].read_text(encoding="utf-8"))
        imported = {t for _, t in g[name]} | {
            alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        }
        assert "argparse" not in imported and f"{package}.cli" not in imported, name
        init = ast.parse(mods[package].read_text(encoding="utf-8"))
        assert not [n for n in ast.walk(init) if isinstance(n, ast.Import | ast.ImportFrom)], (
            f"{package}/__init__.py imports: the door would load more than the plan"
        )
        kinds = [n for n in tree.body if isinstance(n, ast.ClassDef) and _is_plan_class(n)]
        assert kinds, f"{name} defines no plan (a frozen dataclass with `gate`, `run` and `verdict`)"


def _is_plan_class(node: ast.ClassDef) -> bool:
    frozen = any(
        isinstance(d, ast.Call) and any(k.arg == "frozen" for k in d.keywords) for d in node.decorator_list
    )
    names = {getattr(t, "name", "") for t in node.body} | {
        t.target.id for t in node.body if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)
    }
    return frozen and {"gate", "run", "verdict"} <= names


def test_no_layer_imports_a_verb() -> None:
    offenders = [
        f"{name}:{line} -> {target}"
        for name, targets in graph().items()
        if verb_of(name) is None and name not in ENTRY_POINTS
        for line, target in sorted(targets)
        if verb_of(target) is not None
    ]
    assert not offenders, "a layer imports a verb (the arrow points up):\n" + "\n".join(offenders)


def test_no_import_cycle() -> None:
    edges = {name: {t for _, t in targets} for name, targets in graph().items()}
    found = cycles(edges)
    assert not found, "import cycles among the package's modules:\n" + "\n".join(map(" <-> ".join, found))


def test_the_scan_sees_each_kind_of_import(tmp_path: Path) -> None:
    """The resolver is what the rules stand on: absolute, from-package, relative and lazy imports."""
    pkg = tmp_path / "vllm_station"
    (pkg / "commands" / "a").mkdir(parents=True)
    (pkg / "commands" / "a" / "__init__.py").write_text("")
    (pkg / "commands" / "a" / "core.py").write_text(
        "import vllm_station.redact\n"
        "from vllm_station import output\n"
        "from vllm_station.api import ApiClient\n"
        "from . import util\n"
        "from ..b import run\n"
        "def f():\n    from vllm_station.commands import c\n"
    )
    known = {
        "vllm_station.redact", "vllm_station.output", "vllm_station.api", "vllm_station.commands.a.util",
        "vllm_station.commands.b", "vllm_station.commands.c",
    }  # fmt: skip
    got = {t for _, t in imports("vllm_station.commands.a.core", pkg / "commands/a/core.py", known)}
    assert got == known
    assert {t: verb_of(t) for t in got if verb_of(t)} == {
        "vllm_station.commands.a.util": "a",
        "vllm_station.commands.b": "b",
        "vllm_station.commands.c": "c",
    }


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# ---- one home of the calls to systemd ---------------------------------------------------------------

SYSTEMD_READER = PACKAGE / "host" / "systemd.py"
# what a verb asks systemctl (`show`, and the --no-block actions), and the container runtime's kill
SYSTEMCTL_WORDS = ("show", "restart", "stop", "start", "--no-block")


def systemctl_show_calls(tree: ast.AST, words: tuple[str, ...] = ("show",)) -> list[int]:
    """Lines of a list or call that holds one of `words` next to something named like systemctl (or, for
    "kill", like a container runtime)."""
    found = []
    for node in ast.walk(tree):
        items = (
            node.elts
            if isinstance(node, ast.List | ast.Tuple)
            else node.args
            if isinstance(node, ast.Call)
            else []
        )
        if isinstance(node, ast.Call) and ast.unparse(node.func).startswith("systemd."):
            continue  # a call into the home itself (host.systemd.act, .show, …)
        said = {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}
        text = ast.unparse(node).lower()
        if (said & set(words) and "systemctl" in text) or ("kill" in said and "runtime" in text):
            found.append(node.lineno)
    return found


def test_only_the_host_layer_asks_systemctl_show() -> None:
    """`systemctl show`, `systemctl restart|stop|start --no-block` and the runtime's `kill` are run in
    host/systemd.py alone (their bounds and their failure wording, once)."""
    others = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != SYSTEMD_READER
        and (lines := systemctl_show_calls(ast.parse(path.read_text()), SYSTEMCTL_WORDS))
    }
    assert not others, f"use vllm_station.host.systemd (show, act, end_container_wait) instead: {others}"
    assert systemctl_show_calls(ast.parse(SYSTEMD_READER.read_text())), (
        "the scan no longer sees the reader's call"
    )
    assert len(systemctl_show_calls(ast.parse(SYSTEMD_READER.read_text()), SYSTEMCTL_WORDS)) >= 3, (
        "the scan no longer sees the actions' or the kill's call"
    )


def test_the_show_scan_sees_a_second_reader() -> None:
    code = 'argv = [systemctl, "show", "--property=ActiveState", unit]\nrun(self.systemctl, "show", unit)\n'
    assert systemctl_show_calls(ast.parse(code)) == [1, 2]
    code = ('argv = [opts.systemctl, "restart", "--no-block", opts.unit]\nkill = [opts.runtime, "kill", c]\n'
            'x = [self.runtime, "inspect", c]\n'
            'systemd.act("stop", unit, systemctl=opts.systemctl)\n')  # fmt: skip
    assert systemctl_show_calls(ast.parse(code), SYSTEMCTL_WORDS) == [1, 2]
