"""cli.COMMANDS is the one command table: every command's module, `station --help`, the generated
`station-<command>` entry points, pyproject's scripts, and no command module importing `cli`."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import vllm_station
from vllm_station import cli, entry

PKG = Path(__file__).resolve().parents[1]
SRC = PKG / "src" / "vllm_station"
# Commands whose module another change adds; skipped (with the reason) only while that module is absent.
PENDING = {"start-gate", "pair"}
# The only modules that may import vllm_station.cli: the entry points themselves.
MAY_IMPORT_CLI = {"__main__.py", "entry.py"}


def _module_absent(name: str) -> bool:
    module = f"vllm_station.{cli.COMMANDS[name][0]}"
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        return exc.name is not None and (module == exc.name or module.startswith(exc.name + "."))
    return False


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_command_module_imports_and_exposes_configure_and_run(name: str) -> None:
    if name in PENDING and _module_absent(name):
        pytest.skip(f"vllm_station.{cli.COMMANDS[name][0]} is not written yet")
    module = cli.load(name)
    assert callable(getattr(module, "configure", None)), f"{module.__name__} has no configure(parser)"
    assert callable(getattr(module, "run", None)), f"{module.__name__} has no run(args)"
    assert not hasattr(module, "HELP"), f"{module.__name__}.HELP duplicates cli.COMMANDS' help"
    assert not hasattr(module, "main"), f"{module.__name__}.main: the entry point is vllm_station.entry"


def test_help_lists_every_command_and_imports_no_command_module() -> None:
    code = (
        "import sys\n"
        "from vllm_station import cli\n"
        "rc = cli.main(['--help'])\n"
        "print('MODULES', sorted(m for m in sys.modules if m.startswith('vllm_station')))\n"
        "sys.exit(rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for name, (_, help_text) in cli.COMMANDS.items():
        assert f"    {name}" in out.stdout, f"`station --help` does not list {name}"
        assert help_text.split()[0] in out.stdout
    modules = out.stdout.split("MODULES", 1)[1]
    frame = ["vllm_station", "vllm_station.cli", "vllm_station.errors", "vllm_station.redact"]
    assert modules.strip() == str(sorted(frame))


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "smoke" in capsys.readouterr().err


def test_missing_command_module_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(cli.COMMANDS, "ghost", ("no_such_module", "a command whose module is not installed"))
    assert cli.main(["--help"]) == 0
    assert "ghost" in capsys.readouterr().out  # listed without importing it
    assert cli.main(["ghost", "--flag"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("station ghost: error: this installation has no module vllm_station.no_such_module")
    assert "Traceback" not in err


def test_missing_dependency_of_a_command_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "needs_absent.py").write_text("import station_test_absent_dependency\n")
    monkeypatch.setattr(vllm_station, "__path__", [*vllm_station.__path__, str(tmp_path)])
    monkeypatch.setitem(cli.COMMANDS, "needy", ("needs_absent", "a command whose dependency is missing"))
    monkeypatch.delitem(sys.modules, "vllm_station.needs_absent", raising=False)
    assert cli.main(["needy"]) == 1
    err = capsys.readouterr().err
    assert "vllm_station.needs_absent needs a package that is not installed" in err
    assert "No module named 'station_test_absent_dependency'" in err


@pytest.mark.parametrize("name", ["start-gate", "pair"])
def test_pending_commands_fail_clearly_or_run(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`station start-gate`/`station pair` without their module: exit 1 and one line, never a traceback."""
    if not _module_absent(name):
        assert cli.main([name, "--help"]) == 0
        assert f"station {name}" in capsys.readouterr().out
        return
    assert cli.main([name]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"station {name}: error: this installation has no module")
    assert "Traceback" not in err


@pytest.mark.parametrize(("old", "new"), list(cli.ALIASES.items()))
def test_an_old_name_runs_its_verb_and_is_hidden(
    old: str, new: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`station gate` (what the units of earlier releases call) runs `station start-gate`: same options,
    same result; `station --help` lists only the new name, so gate/gates/gateway no longer stand together."""
    assert new in cli.COMMANDS and old not in cli.COMMANDS
    assert cli.main([old, "--help"]) == 0
    old_help = capsys.readouterr().out
    assert cli.main([new, "--help"]) == 0
    assert old_help.split("options:")[1] == capsys.readouterr().out.split("options:")[1]
    assert cli.main(["--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split()[0] for line in lines if line.startswith("    ") and line[4] != " "]
    assert new in rows and old not in rows


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_generated_entry_point_for_every_command(name: str) -> None:
    attr = name.replace("-", "_")
    main = getattr(entry, attr)
    assert callable(main) and main.__name__ == attr
    assert attr in dir(entry)
    namespace: dict[str, object] = {}
    exec(f"from vllm_station.entry import {attr}", namespace)  # what the console script does
    assert callable(namespace[attr])


def test_entry_point_runs_its_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert entry.numa_exec(["--help"]) == 0
    assert "--membind" in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["station-simulate", "--fail", "oops=1"])  # argv=None: sys.argv[1:]
    assert entry.simulate() == 2
    assert "station simulate: error: --fail: unknown kind 'oops'" in capsys.readouterr().err


@pytest.mark.parametrize("attr", ["nope", "wait-ready", "_private", "__path__", "main", "COMMANDS"])
def test_unknown_entry_attribute_is_attribute_error(attr: str) -> None:
    with pytest.raises(AttributeError, match=repr(attr)):
        getattr(entry, attr)


def test_unknown_entry_import_is_import_error() -> None:
    with pytest.raises(ImportError):
        exec("from vllm_station.entry import nope", {})


def _scripts() -> dict[str, str]:
    scripts: dict[str, str] = tomllib.loads((PKG / "pyproject.toml").read_text())["project"]["scripts"]
    return scripts


def test_pyproject_scripts_resolve_to_callables() -> None:
    scripts = _scripts()
    assert scripts["station"] == "vllm_station.cli:main"
    for script, target in scripts.items():
        module, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), f"{script} = {target!r}"
        if script != "station":
            assert target == f"vllm_station.entry:{script.removeprefix('station-').replace('-', '_')}"
            assert script.removeprefix("station-") in cli.COMMANDS


def test_installed_console_scripts_match_pyproject() -> None:
    """The metadata of the installed package (what the scripts on PATH run) loads every script."""
    dist = importlib.metadata.distribution("vllm-station")
    installed = {ep.name: ep for ep in dist.entry_points if ep.group == "console_scripts"}
    assert {name: ep.value for name, ep in installed.items()} == _scripts()
    for ep in installed.values():
        assert callable(ep.load())


def _imports_cli(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            lines += [node.lineno for a in node.names if a.name == "vllm_station.cli"]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module == "vllm_station.cli":
                lines.append(node.lineno)
            elif node.level == 0 and node.module == "vllm_station":
                lines += [node.lineno for a in node.names if a.name == "cli"]
            elif node.level > 0:  # relative: resolved below by the caller's package
                lines.append(-node.lineno)
    return lines


def test_no_module_imports_cli_but_the_entry_points() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if str(rel) in MAY_IMPORT_CLI:
            continue
        for line in _imports_cli(ast.parse(path.read_text(), str(path))):
            offenders.append(f"{rel}:{abs(line)}" + (" (relative import)" if line < 0 else ""))
    assert not offenders, f"only {sorted(MAY_IMPORT_CLI)} may import vllm_station.cli: {offenders}"


def test_the_scan_sees_an_import_of_cli() -> None:
    for text in (
        "from vllm_station.cli import main",
        "import vllm_station.cli",
        "from vllm_station import cli",
        "def f():\n    from vllm_station.cli import command_main\n",
    ):
        assert _imports_cli(ast.parse(text)), text
    assert not _imports_cli(ast.parse("from vllm_station.commands.preflight.cli import run"))
