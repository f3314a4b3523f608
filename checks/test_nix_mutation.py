"""Nix tier `nix_lib`: the module tests fail when the serving unit loses a piece of its restart policy or start
sequence (issue 17: test strength, measured on the Nix side).

Each mutant is one edit of modules/serve.nix's text in a temporary copy of modules/ (never in place): the
unit loses StartLimitBurst, RestartSec, Restart=always (dropped, or weakened to on-failure), the prestart
step or the wait-ready step. The lib-tier module test `serve/defaults` (checks/lib, copied beside it) is
evaluated on each copy: it must pass on the unmutated copy (so a failure comes from the edit alone) and fail
on each mutant, either with problems naming what was lost or with an evaluation error (an attribute the
test reads is gone), which fails the whole tier.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from nixenv import REPO, require_nix, require_tree, run_nix

TREE_VAR = "NIXPKGS_LIB"
WHAT = "the serve.nix mutants (checks/lib module tests on mutated copies)"

# name: (text in modules/serve.nix, replacement, a word the failures must mention)
MUTANTS: dict[str, tuple[str, str, str]] = {
    "no-start-limit-burst": ("startLimitBurst = 3;", "", "startLimitBurst"),
    "no-restart-sec": ("RestartSec = 60;", "", "RestartSec"),
    "no-restart": ('Restart = "always";', "", "Restart"),
    "restart-on-failure": ('Restart = "always";', 'Restart = "on-failure";', "Restart"),
    "no-prestart-step": ('++ [ ("+" + utils.escapeSystemdExecArgs prestartArgs) ]', "", "prestart"),
    "no-wait-ready-step": ("optional (!cfg.headless) waitReadyCommand", "[ ]", "ExecStartPost"),
}


def _copy(dest: Path, serve_text: str) -> Path:
    """modules/ (with serve.nix as given), checks/lib and the checks/*.nix it imports, under dest."""
    shutil.copytree(REPO / "modules", dest / "modules")
    (dest / "modules/serve.nix").write_text(serve_text)
    shutil.copytree(REPO / "checks/lib", dest / "checks/lib")
    for nix in (REPO / "checks").glob("*.nix"):
        shutil.copy2(nix, dest / "checks" / nix.name)
    (dest / "pkgs/station-tools").mkdir(parents=True)
    shutil.copy2(REPO / "pkgs/station-tools/package.nix", dest / "pkgs/station-tools/package.nix")
    return dest


def _problems_of(root: Path, test: str) -> tuple[list[str], str | None]:
    """One module test on the copy: (its problems, or the evaluation error that stopped it)."""
    proc = run_nix(
        ["nix-instantiate", "--eval", "--strict", "--json", str(root / "checks/lib"),
         "--argstr", "nixpkgsLib", os.environ[TREE_VAR], "--argstr", "only", test],
        timeout=300,
    )
    if proc.returncode != 0:
        errors = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip().startswith("error:")]
        return [], errors[-1] if errors else f"nix-instantiate exited {proc.returncode}"
    problems: list[str] = json.loads(proc.stdout)["problems"]
    return problems, None


@pytest.fixture(scope="module")
def workdir() -> Any:
    require_nix()
    require_tree(TREE_VAR, "lib/default.nix", WHAT)
    d = Path(tempfile.mkdtemp(prefix="station-nix-mutation-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@functools.cache
def _serve_text() -> str:
    return (REPO / "modules/serve.nix").read_text()


@pytest.mark.nix_lib
def test_unmutated_copy_passes(workdir: Path) -> None:
    """serve/defaults passes on the copy as it is (test_nix_modules runs the whole suite on the tree)."""
    problems, error = _problems_of(_copy(workdir / "unmutated", _serve_text()), "serve/defaults")
    assert (problems, error) == ([], None), "the copy itself fails: the mutants below would prove nothing"


@pytest.mark.nix_lib
@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_module_tests_kill_the_mutant(workdir: Path, mutant: str) -> None:
    old, new, word = MUTANTS[mutant]
    text = _serve_text()
    assert text.count(old) == 1, f"modules/serve.nix no longer has {old!r} exactly once: update this mutant"
    problems, error = _problems_of(_copy(workdir / mutant, text.replace(old, new)), "serve/defaults")
    assert problems or error, f"mutant {mutant} ({old!r} -> {new!r}) survived serve/defaults"
    if error is None:
        assert any(word in p for p in problems), f"{mutant}: the problems do not name {word}: {problems}"
