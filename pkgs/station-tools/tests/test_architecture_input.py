"""The input layer cannot be gone around: an ast scan of every module of the package.

Every file station reads goes through `vllm_station.bounded` (regular files only, within a size), every
JSON text through `bounded.loads_json` (a depth limit), and every number a user gives through the typed
parsers of `vllm_station.argtypes` (ranges at parse time, ASCII digits only). A module that calls
`open()` to read, `Path.read_text`/`read_bytes`, `json.load(s)`, or `int()`/`float()` straight on an
option, a mapping lookup (a config file's or a server's JSON, the environment) fails this test, whatever
command it belongs to — a command added later included, without being named here.

The allowlist is short and each entry says why; the scan itself is tested against planted violations.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "vllm_station"

# The layer's own modules.
LAYER = {
    "bounded.py": "the input layer: the one place a file is opened for reading and JSON is parsed",
    "argtypes.py": "the input layer: the one place a user's text becomes a number",
}
# Other modules allowed one kind of call, each with its reason.
ALLOWED: dict[tuple[str, str], str] = {
    ("api/client.py", "read"): "`op.read_text()` reads the HTTP response's body (the HTTP layer), no file",
    ("batteries/cases.py", "read"): "the shipped battery data through importlib.resources (package "
    "files, not a user's path); user files go through bounded.read_json",
    ("commands/bench/modes.py", "read"): "`responses.open()` is ResponseLog's own method (it creates the "
    "--save-responses files, for writing)",
    ("sim/server.py", "number"): "the simulator (`station simulate`) reading its own client's request "
    "fields: a test server, not an operator's input",
}

READ_METHODS = {"read_text", "read_bytes"}
JSON_FUNCS = {"load", "loads"}
# int(X)/float(X) where X is one of these: a value a user or a server gave, not yet typed
USER_SOURCES = ("args.<option>", "<mapping>.get(...)", "os.environ[...]", "os.getenv(...)")


@dataclass(frozen=True)
class Violation:
    module: str
    line: int
    kind: str  # read | json | number
    code: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.code}"


def _is_user_value(node: ast.expr) -> bool:
    """`args.x`, `something.get(...)`, `os.environ[...]`, `os.getenv(...)` (or an `a or b` of them):
    untyped input."""
    if isinstance(node, ast.BoolOp):
        return any(_is_user_value(v) for v in node.values)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "args":
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "get":
            return True
        if (
            node.func.attr == "getenv"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "os"
        ):
            return True
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute):
        return node.value.attr == "environ"
    return False


def _open_for_reading(call: ast.Call) -> bool:
    """builtin open() / Path.open() without a mode, or with a mode that reads."""
    mode: ast.expr | None = None
    if isinstance(call.func, ast.Name):
        mode = call.args[1] if len(call.args) > 1 else None
    else:
        mode = call.args[0] if call.args else None
    for kw in call.keywords:
        if kw.arg == "mode":
            mode = kw.value
    if mode is None:
        return True
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return "r" in mode.value or "+" in mode.value
    return True  # a computed mode: cannot tell, so it must come through the layer


def scan(tree: ast.AST, module: str) -> list[Violation]:
    out: list[Violation] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        code = ast.unparse(node)[:120]
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "bounded"
        ):
            continue  # the layer itself
        if isinstance(func, ast.Name) and func.id == "open" and _open_for_reading(node):
            out.append(Violation(module, node.lineno, "read", code))
        elif isinstance(func, ast.Attribute) and func.attr == "open" and _open_for_reading(node):
            if not (isinstance(func.value, ast.Name) and func.value.id in ("os", "io", "tarfile", "gzip")):
                out.append(Violation(module, node.lineno, "read", code))
        elif isinstance(func, ast.Attribute) and func.attr in READ_METHODS:
            out.append(Violation(module, node.lineno, "read", code))
        elif (
            isinstance(func, ast.Attribute) and func.attr in JSON_FUNCS
            and isinstance(func.value, ast.Name) and func.value.id == "json"
        ):  # fmt: skip
            out.append(Violation(module, node.lineno, "json", code))
        elif (
            isinstance(func, ast.Name)
            and func.id in ("int", "float")
            and node.args
            and _is_user_value(node.args[0])
        ):
            out.append(Violation(module, node.lineno, "number", code))
    return out


def _modules() -> list[tuple[str, ast.AST]]:
    return [
        (p.relative_to(SRC).as_posix(), ast.parse(p.read_text(encoding="utf-8"), str(p)))
        for p in sorted(SRC.rglob("*.py"))
    ]


def test_the_scan_covers_the_whole_package() -> None:
    names = [m for m, _ in _modules()]
    assert len(names) >= 80 and "commands/golive/cli.py" in names and "commands/gates/cli.py" in names
    assert "commands/copy.py" in names


def test_no_module_goes_around_the_input_layer() -> None:
    found = []
    for module, tree in _modules():
        if module in LAYER:
            continue
        found += [v for v in scan(tree, module) if (module, v.kind) not in ALLOWED]
    assert not found, (
        "read files through vllm_station.bounded (read_bytes/read_text/read_json/open_regular), JSON "
        "through bounded.loads_json, and numbers through argtypes (a typed option, parse_int/parse_float, "
        "from_config):\n" + "\n".join(map(str, found))
    )


def test_every_allowlist_entry_is_still_needed() -> None:
    """An entry whose module no longer does the thing is stale: remove it (the list stays short)."""
    used = {(m, v.kind) for m, tree in _modules() for v in scan(tree, m)}
    assert set(ALLOWED) <= used, sorted(set(ALLOWED) - used)
    assert {m for m, _ in _modules()} >= set(LAYER)


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("data = open(path).read()", "read"),
        ("with open(path, 'rb') as f: pass", "read"),
        ("with Path(p).open() as f: pass", "read"),
        ("text = args.config.read_text()", "read"),
        ("blob = Path(p).read_bytes()", "read"),
        ("obj = json.loads(text)", "json"),
        ("obj = json.load(fh)", "json"),
        ("n = int(args.bench_requests)", "number"),
        ("n = int(cfg.get('requests', 1))", "number"),
        ("t = float(os.environ['TIMEOUT'])", "number"),
        ("t = float(os.getenv('TIMEOUT'))", "number"),
        ("def f():\n    return int((cfg.get('bench') or {}).get('outputLen'))", "number"),
        ("n = int(body.get('max_tokens') or 0)", "number"),
    ],
)
def test_the_scan_sees_each_way_around(source: str, kind: str) -> None:
    assert [v.kind for v in scan(ast.parse(source), "planted.py")] == [kind], source


@pytest.mark.parametrize(
    "source",
    [
        "with open(path, 'w') as f: pass",  # writing: the output layer's business
        "fd = os.open(path, os.O_RDONLY)",  # the descriptor level, as bounded itself does
        "obj = bounded.read_json(path, limit=bounded.CONFIG_LIMIT)",
        "obj = bounded.loads_json(text)",
        "n = argtypes.parse_int(text)",
        "n = int(len(items) * 1.5)",  # arithmetic, not input
        "x = float(total)",
    ],
)
def test_the_scan_lets_the_layer_through(source: str) -> None:
    assert scan(ast.parse(source), "fine.py") == [], source
