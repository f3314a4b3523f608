"""The Python scripts under scripts/ as an operator or developer runs them: `python3 scripts/X --help`
with whatever python3 is on PATH answers with its help or one clear line, never a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(
    p.name
    for p in (REPO / "scripts").iterdir()
    if p.is_file() and p.suffix == "" and p.read_text(errors="replace").startswith("#!/usr/bin/env python3")
)
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")


def test_the_python_scripts_are_found() -> None:
    assert {"bench-gateway", "bench-needle", "bench-mutation", "locked-trees"} <= set(SCRIPTS)


@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="no python3 in /usr/bin or /bin to run the scripts as a user would")
@pytest.mark.parametrize("script", SCRIPTS)
def test_help_with_the_system_python(script: str) -> None:
    assert SYSTEM_PYTHON is not None
    r = subprocess.run(
        [SYSTEM_PYTHON, f"scripts/{script}", "--help"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
    )  # fmt: skip
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "usage:" in r.stdout


def _script(tmp_path: Path, body: str) -> Path:
    scripts = tmp_path / "repo" / "scripts"
    scripts.mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "repo_python.py", scripts)
    script = scripts / "needs-things"
    script.write_text(
        "import sys\nfrom pathlib import Path\nsys.path.insert(0, str(Path(__file__).resolve().parent))\n"
        "from repo_python import require\n" + body
    )
    return script


def test_require_without_a_venv_names_the_fix(tmp_path: Path) -> None:
    script = _script(tmp_path, "require('json', 'no_such_module_here')\nprint('ran')\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == (
        "needs-things: needs no_such_module_here (the repository's venv): run scripts/check once to create"
        " .venv, then: .venv/bin/python scripts/needs-things …"
    )


def test_require_reexecutes_under_the_venv(tmp_path: Path) -> None:
    script = _script(tmp_path, "require('no_such_module_here')\nprint('ran', sys.argv[1:])\n")
    venv_bin = tmp_path / "repo" / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    # the venv's python: a stand-in that has the module (a directory on its PYTHONPATH)
    (tmp_path / "mods" / "no_such_module_here").mkdir(parents=True)
    (tmp_path / "mods" / "no_such_module_here" / "__init__.py").write_text("")
    (venv_bin / "python").write_text(f"#!/bin/sh\nPYTHONPATH={tmp_path / 'mods'} exec {sys.executable} \"$@\"\n")
    (venv_bin / "python").chmod(0o755)
    r = subprocess.run(
        [sys.executable, str(script), "a", "b c"], capture_output=True, text=True, timeout=60, check=False
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ran ['a', 'b c']"


def test_locked_trees_without_nix_says_so() -> None:
    r = subprocess.run(
        [sys.executable, "scripts/locked-trees"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert r.returncode == 2  # as without a network: the offline trees stay
    assert r.stderr.strip() == "locked-trees: no `nix` on PATH: install Nix first (scripts/install-nix)"


def test_require_reexecutes_once_only(tmp_path: Path) -> None:
    # a venv that lacks the module too: the message, not a loop
    script = _script(tmp_path, "require('no_such_module_here')\n")
    venv_bin = tmp_path / "repo" / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (venv_bin / "python").chmod(0o755)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2 and "needs no_such_module_here" in r.stderr
