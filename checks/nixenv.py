"""Shared helpers for the Nix test tiers: find Nix and the nixpkgs trees, run evaluations, skip loudly.

The trees are fetched by developers to fixed places outside the repo and never committed:
NIXPKGS_LIB (a nixpkgs lib tree) and NIXOS_TREE (a full nixpkgs tree). `scripts/check` sets both
when they exist under $STATION_CACHE/trees.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import nixcache
import pytest

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("STATION_CACHE", "/opt/vllm-station"))


@functools.cache
def nix_bin() -> Path | None:
    """The directory holding a Nix >= 2.18 (PATH first, then scripts/install-nix's prefix)."""
    candidates = []
    found = shutil.which("nix-instantiate")
    if found:
        candidates.append(Path(found).parent)
    candidates.append(CACHE / "nix" / "bin")
    for d in candidates:
        exe = d / "nix-instantiate"
        if not exe.exists():
            continue
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False).stdout
        version = out.strip().split()[-1] if out.strip() else "0"
        if tuple(int(x) for x in version.split(".")[:2] if x.isdigit()) >= (2, 18):
            return d
    return None


def require_nix() -> Path:
    d = nix_bin()
    if d is None:
        pytest.skip("no Nix >= 2.18 found: run scripts/install-nix (scripts/check does) to enable the Nix tiers")
    return d


# Where developers fetch each tree (README, Tests); scripts/check sets the variable when it is there.
TREE_DIRS = {"NIXPKGS_LIB": "nixpkgs-lib", "NIXOS_TREE": "nixos", "SOPS_NIX_TREE": "sops-nix", "AGENIX_TREE": "agenix"}
# every variable that names a fetched tree (never edited once fetched): those, and disko's (checks/images)
TREE_VARS = {*TREE_DIRS, "DISKO_TREE"}


def require_tree(var: str, marker_file: str, what: str) -> Path:
    value = os.environ.get(var)
    if not value:
        where = CACHE / "trees" / TREE_DIRS.get(var, var.lower())
        pytest.skip(f"{var} unset: {what} skipped; fetch the tree to {where} (scripts/check finds it there) "
                    f"or set {var}=/path/to/tree")
    path = Path(value)
    if not (path / marker_file).exists():
        pytest.skip(f"{var}={value} has no {marker_file}: {what} skipped")
    return path


def run_nix(
    args: list[str], *, timeout: int = 600, cwd: Path | None = None, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a Nix program (args[0] its name); an evaluation whose inputs are all unchanged since an earlier
    run is answered from nixcache's content-keyed cache (its docstring says what the key covers)."""
    d = require_nix()
    env = dict(os.environ, **(extra_env or {}))
    env["PATH"] = f"{d}:{env.get('PATH', '')}"
    env.setdefault("NIX_CONFIG", "experimental-features = nix-command flakes\nflake-registry =\nsubstituters =")
    return nixcache.run(
        [str(d / args[0]), *args[1:]], timeout=timeout, cwd=cwd, env=env, roots=_roots(),
        cache=nixcache.EvalCache(CACHE / "nix-eval"), digest=_root_digest,
    )  # fmt: skip


def _roots() -> nixcache.Roots:
    fetched = CACHE / "trees"
    trees = {t for t in fetched.iterdir() if t.is_dir()} if fetched.is_dir() else set()
    trees |= {Path(v) for k, v in os.environ.items() if k in TREE_VARS and v}
    snapshots = (flake_snapshot(),) if flake_snapshot.cache_info().currsize else ()
    return nixcache.Roots(repo=REPO, snapshots=snapshots, trees=tuple(sorted(trees)))


_DIGESTS: dict[tuple[object, ...], str] = {}


def _root_digest(root: Path) -> str:
    """The content digest of the checkout or a snapshot of it, recomputed only when a file's size or
    modification time changed (one stat per file per evaluation)."""
    names = nixcache.repo_files(root) if root == REPO else nixcache.snapshot_files(root)
    signature: list[object] = [str(root)]
    for name in sorted(names):
        with contextlib.suppress(OSError):
            st = (root / name).lstat()
            signature.append((name, st.st_size, st.st_mtime_ns))
    sig = tuple(signature)
    if sig not in _DIGESTS:
        _DIGESTS[sig] = nixcache.files_digest(root, names)
    return _DIGESTS[sig]


def eval_json(args: list[str], *, timeout: int = 600) -> Any:
    """`nix-instantiate --eval --strict --json ARGS` (a throwing leaf fails the run, unlike `nix eval`)."""
    proc = run_nix(["nix-instantiate", "--eval", "--strict", "--json", *args], timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"nix-instantiate {' '.join(args)} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


@functools.cache
def store_path(tree: str) -> str:
    """Add a tree to the Nix store once (so `path:` inputs are not re-copied) and return its store path."""
    proc = run_nix(["nix", "store", "add-path", "--name", "source", tree], timeout=900)
    if proc.returncode != 0:
        raise AssertionError(f"nix store add-path {tree} failed:\n{proc.stderr[-2000:]}")
    return proc.stdout.strip()


@functools.cache
def flake_snapshot() -> Path:
    """The flake as it would be committed: tracked + untracked-but-not-ignored files, copied to a temp dir.

    Nix sees only git-tracked files of a git flake; this evaluates exactly what `git add -A` would commit.
    """
    dest = Path(tempfile.mkdtemp(prefix="station-flake-"))
    with tempfile.TemporaryFile() as buf:
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for rel in nixcache.repo_files(REPO):
                if (REPO / rel).exists():
                    tar.add(REPO / rel, arcname=rel, recursive=False)
        buf.seek(0)
        with tarfile.open(fileobj=buf, mode="r") as tar:
            tar.extractall(dest, filter="tar")
    return dest


UNAVAILABLE = "<nix or the nixpkgs tree unavailable>"
UNLISTABLE = "<test list did not evaluate>"


def entry_names(entry: Path, args: list[str], var: str, marker_file: str) -> list[str]:
    """The test names of a checks/ entry (`--argstr output names`), read at collection time.

    Returns one placeholder name (UNAVAILABLE / UNLISTABLE) when Nix or the tree is missing or the list
    does not evaluate, so the test then runs once and skips or fails with the reason.
    """
    tree = os.environ.get(var, "")
    if nix_bin() is None or not tree or not (Path(tree) / marker_file).exists():
        return [UNAVAILABLE]
    proc = run_nix(
        ["nix-instantiate", "--eval", "--strict", "--json", str(entry), *args, "--argstr", "output", "names"],
        timeout=120,
    )
    if proc.returncode != 0:
        return [UNLISTABLE]
    names: list[str] = json.loads(proc.stdout)
    return names


def exposure(name: str, unit_text: str, tmp: Path) -> float:
    """`systemd-analyze security --offline` of a rendered unit: 0 (best) to 10 (worst).

    Skips (saying why) where this systemd cannot measure it offline."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed: exposure not measured; install systemd (>= 250) to enable")
    probe = subprocess.run(
        ["systemd-analyze", "security", "--help"], capture_output=True, text=True, check=False
    )
    if "--offline" not in probe.stdout:
        pytest.skip("this systemd-analyze has no --offline (needs systemd >= 250): exposure not measured")
    unit = tmp / name
    unit.write_text(unit_text)
    proc = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    found = re.search(rf"Overall exposure level for {re.escape(name)}: ([0-9.]+)", proc.stdout + proc.stderr)
    assert found, f"systemd-analyze security gave no exposure level:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return float(found.group(1))
