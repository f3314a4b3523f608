"""Architecture: every file a `station` command writes goes through the output layer (`vllm_station.output`).

The layer redacts every byte (the API key and URL passwords, in every form), refuses to replace a device
node or FIFO, and gives every command the same early path checks. A module that writes a file any other
way — `Path.write_text`/`write_bytes`, `open(…, "w")`, `os.fdopen(…, "w")`, `os.open(…, O_WRONLY…)`,
`json.dump`, `print(…, file=<a file>)`, `savefig`, `tempfile.mkstemp`, `os.replace` — goes around those
guards, and this test names it (file:line and what it called). A command added later is checked without
being named here: the test walks every module of the package.

The allowlist is short, and each entry says why the module may write on its own.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import vllm_station
from vllm_station import cli, output

PACKAGE = Path(vllm_station.__file__).parent

# module (relative to the package) -> why it may write files itself
ALLOWED: dict[str, str] = {
    "output.py": "the output layer itself",
    "redact.py": "the layer's stdout/stderr wrapper: what the terminal gets; /dev/null after a failed write",
    "cli.py": "points a closed or failed stdout (fd 1) at /dev/null, before any command opens a file",
    "commands/prestart.py": "writes the kernel knob /proc/sys/vm/drop_caches ('1'), not a report",
    "host/container.py": "hands the container runtime a file for `<runtime> logs` (its bytes, not station's)",
    "checkpoint/revisions.py": "`revisions adopt` renames a verified checkpoint's own entries into its"
    " revision directory (one file system): it moves files, writes no byte",
}

WRITE_MODES = set("wax+")
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}
FORBIDDEN_METHODS = {"write_text", "write_bytes", "savefig", "mkstemp", "NamedTemporaryFile", "mkstemps"}
FORBIDDEN_CALLS = {
    "json.dump", "pickle.dump", "os.write", "os.replace", "os.rename", "shutil.copyfile", "shutil.copy",
    "shutil.copy2", "shutil.move", "os.truncate", "os.ftruncate",
}  # fmt: skip
STD_STREAMS = {"sys.stdout", "sys.stderr"}


def _name(node: ast.AST) -> str:
    """Dotted name of a Name/Attribute chain (`os.path.join`), or '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _name(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return ""


def _mode(call: ast.Call, index: int) -> str | None:
    """The mode string of an open-like call (positional `index` or `mode=`), if it is a literal."""
    node: ast.AST | None = call.args[index] if len(call.args) > index else None
    for kw in call.keywords:
        if kw.arg == "mode":
            node = kw.value
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None if node is None else "?"  # a computed mode: assume it may write


def _flag_names(node: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} | {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name)
    }


def violations(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, what) for every way of writing a file that does not go through the layer."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        last = name.rsplit(".", 1)[-1]
        if name.startswith("output."):  # the layer: `from vllm_station import output`
            continue
        if last in FORBIDDEN_METHODS or name in FORBIDDEN_CALLS:
            yield node.lineno, f"{name}()"
        elif name == "open" or name == "io.open":
            mode = _mode(node, 1)
            if mode is not None and (mode == "?" or WRITE_MODES & set(mode)):
                yield node.lineno, f"{name}(…, {mode!r})"
        elif last == "open" and name != "os.open" and isinstance(node.func, ast.Attribute):  # Path.open
            mode = _mode(node, 0)
            if mode is not None and (mode == "?" or WRITE_MODES & set(mode)):
                yield node.lineno, f"{name}({mode!r})"
        elif name == "os.fdopen":
            mode = _mode(node, 1)
            if mode is not None and (mode == "?" or WRITE_MODES & set(mode)):
                yield node.lineno, f"os.fdopen(…, {mode!r})"
        elif name == "os.open" and len(node.args) > 1 and WRITE_FLAGS & _flag_names(node.args[1]):
            yield node.lineno, "os.open(…, O_WRONLY/O_CREAT/…)"
        elif name == "print":
            for kw in node.keywords:
                streams = [kw.value.body, kw.value.orelse] if isinstance(kw.value, ast.IfExp) else [kw.value]
                if kw.arg == "file" and any(_name(v) not in STD_STREAMS for v in streams):
                    yield node.lineno, f"print(…, file={ast.unparse(kw.value)})"


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_writes_a_file_around_the_output_layer() -> None:
    found = []
    for path in _modules():
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in ALLOWED:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [f"{rel}:{line}: {what}" for line, what in violations(tree)]
    assert not found, (
        "these write files around vllm_station.output (no redaction, no device-node guard); "
        "use output.write_text/write_json/write_bytes/replace_text/save_figure:\n  " + "\n  ".join(found)
    )


def test_the_allowlist_names_existing_modules_that_need_it() -> None:
    """An entry whose module is gone or no longer writes on its own is removed, not kept 'just in case'."""
    for rel, reason in ALLOWED.items():
        path = PACKAGE / rel
        assert path.is_file(), f"ALLOWED names {rel}, which does not exist"
        assert reason.strip()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert list(violations(tree)), f"{rel} writes nothing on its own any more: drop it from ALLOWED"


def test_the_check_sees_each_way_of_writing() -> None:
    """The detector itself: each form is found, and the reading forms are not (a check that cannot fail
    is no check)."""
    writes = {
        "p.write_text('x')": "p.write_text()",
        "p.write_bytes(b'x')": "p.write_bytes()",
        "open(p, 'w')": "open(…, 'w')",
        "open(p, mode='ab')": "open(…, 'ab')",
        "open(p, m)": "open(…, '?')",
        "p.open('w')": "p.open('w')",
        "os.fdopen(fd, 'w')": "os.fdopen(…, 'w')",
        "os.open(p, os.O_WRONLY | os.O_CREAT)": "os.open(…, O_WRONLY/O_CREAT/…)",
        "json.dump(obj, f)": "json.dump()",
        "print('x', file=f)": "print(…, file=f)",
        "fig.savefig('a.png')": "fig.savefig()",
        "tempfile.mkstemp()": "tempfile.mkstemp()",
        "os.replace(a, b)": "os.replace()",
    }
    for code, what in writes.items():
        assert [w for _, w in violations(ast.parse(code))] == [what], code
    reads = [
        "open(p)", "open(p, 'rb')", "p.open()", "p.read_text()", "os.open(p, os.O_RDONLY | os.O_NONBLOCK)",
        "print('x', file=sys.stderr)", "print('x')", "json.dumps(obj)", "os.fdopen(fd, 'rb')",
        "print('x', file=sys.stderr if q else sys.stdout)", "output.write_text(p, 'x', option='--out')",
    ]  # fmt: skip
    for code in reads:
        assert list(violations(ast.parse(code))) == [], code


# ---- every output option of every command is checked when parsed ------------------------------------

# an option that names where a command writes: --out, --output, --X-out, --csv, --plots, --save-responses,
# --stats-file, --textfile-dir, and a --json that takes a file
OUTPUT_OPTION = re.compile(
    r"--(?:out|output|[a-z-]+-out|csv|plots|save-responses|stats-file|[a-z-]*textfile-dir)"
)

# option -> why it may take a plain path
TEXTFILE_WHY = (
    "the node_exporter export is best effort by design: a missing or unwritable directory fails the "
    "export (said, and the verdict still printed), never the start of the unit (modules/monitoring.nix); "
    "the file itself is written by textfile.write through output.replace_text"
)
PLAIN_OUTPUT_OPTIONS: dict[str, str] = {
    "probe --textfile-dir": TEXTFILE_WHY,
    "watchdog --textfile-dir": TEXTFILE_WHY,
    "pair rejoin --textfile-dir": TEXTFILE_WHY,
}


def _output_options() -> Iterator[tuple[str, argparse.Action]]:
    """(`command [verb] --option`, action) for every output option of every command in `cli.COMMANDS`."""

    def walk(parser: argparse.ArgumentParser, prefix: str) -> Iterator[tuple[str, argparse.Action]]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for verb, sub in action.choices.items():
                    yield from walk(sub, f"{prefix} {verb}")
                continue
            for opt in action.option_strings:
                takes_file = action.nargs != 0 and not isinstance(action.const, bool)
                if takes_file and (OUTPUT_OPTION.fullmatch(opt) or opt == "--json"):
                    yield f"{prefix} {opt}", action

    for name in cli.COMMANDS:
        parser = cli.build_parser(name)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        yield from walk(sub.choices[name], name)


def test_every_output_option_is_checked_when_parsed() -> None:
    """`output.out_file`/`out_dir` as the argparse type: a bad path is exit 2 before the command runs."""
    found = dict(_output_options())
    assert {"bench --output", "gates tools --output", "golive --out", "gateway keys --output"} <= set(found)
    plain = [name for name, action in found.items()
             if not isinstance(action.type, output.OutPath) and name not in PLAIN_OUTPUT_OPTIONS]  # fmt: skip
    assert not plain, f"output options without output.out_file/out_dir as their type: {plain}"
    stale = sorted(set(PLAIN_OUTPUT_OPTIONS) - set(found))
    assert not stale, f"PLAIN_OUTPUT_OPTIONS names options that no longer exist: {stale}"


def test_an_output_option_is_refused_at_parse_time(tmp_path: Path) -> None:
    """The types do what the walk above relies on: a directory, a FIFO and a missing parent are exit 2,
    before anything runs (here: no server at all is needed to see the refusal)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "a-file").write_text("not a directory")
    for argv in (
        ["gates", "tools", "--output", str(tmp_path)],
        ["gates", "agent", "--output", str(fifo)],
        ["golive", "--out", str(tmp_path / "a-file" / "out"), "--base-url", "http://127.0.0.1:9"],
        ["bench", "sweep", "--output", str(tmp_path / "nodir" / "r.json")],
        ["gateway", "keys", "--output", "/dev/null", "--upstream-out", str(tmp_path / "u")],
        ["gateway", "keys", "--out", "/dev/null", "--upstream-out", str(tmp_path / "u")],  # the old name
    ):
        r = subprocess.run([sys.executable, "-m", "vllm_station", *argv], capture_output=True, text=True,
                           timeout=60)  # fmt: skip
        assert r.returncode == 2, (argv, r.stderr)
        assert "error: argument" in r.stderr and "Traceback" not in r.stderr, (argv, r.stderr)
