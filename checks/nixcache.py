"""A content-keyed cache of Nix evaluations for the test tiers: an evaluation whose every input is unchanged
since an earlier run is answered with that run's output instead of being evaluated again.

An evaluation is a pure function of what it reads; the key is everything it can read:

- the argv (every argument: expressions, `--arg`/`--argstr` values, the attribute paths);
- each absolute path the argv names, by its root: this checkout (the content of every file git would
  commit: `git ls-files -co --exclude-standard`), a snapshot of it (`nixenv.flake_snapshot`: the same, at
  snapshot time), a nixpkgs-style tree under `$STATION_CACHE/trees` or named by a `*_TREE`/`NIXPKGS_LIB`
  variable (fetched once and never edited: its path, inode, modification time and `.version`), or a
  `/nix/store` path (content-addressed by its name);
- the environment a Nix expression or Nix itself reads (`NIX*`, `*_TREE`, `NIXPKGS_LIB`, the content of
  Nix's configuration files), the machine's architecture, and the Nix binary (path, size, modification time).

The checkout's path and a snapshot's are not part of the key: another clone of the same commit (CI's) gets
the same keys. They are written as placeholders in the key and in the kept output, and the current paths put
back on a hit, so an output that names the checkout's path names the one asking.

An argv naming any other path (a scratch copy a test mutates, a URL) is evaluated every time, as is
everything that is not an evaluation (`nix store add-path`, `nix hash path`, `nix flake prefetch`, a
build). Only successful evaluations are kept. A hit whose output names a `.drv` that the evaluation wrote
(`--read-write-mode`, `nix eval`) and that no longer exists (collected) is a miss.

`STATION_NIX_EVAL_CACHE=0` turns the cache off; `STATION_NIX_EVAL_LOG=FILE` gets one line per evaluation
(`hit`, `miss` or `uncached`, then the command), which `scripts/check` counts in its summary. The cache
keeps at most `MAX_ENTRIES` outputs and `MAX_BYTES` in all, the least recently used going first.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

MAX_ENTRIES = 2000
MAX_BYTES = 512 * 2**20
ENV_PATTERN = re.compile(r"NIX.*|.*_TREE|NIXPKGS_LIB")
# Nix's own configuration files (their content; the NIX_CONFIG variable is in the environment's part)
NIX_CONF = ("/etc/nix/nix.conf", "{xdg}/nix/nix.conf")
# an absolute path anywhere in an argument: `/a/b`, `path:/a/b`, `"/a/b"` inside an expression
PATH_IN_ARG = re.compile(r"(?<![\w.~-])/[\w.+@=-]+(?:/[\w.+@=-]*)*")
DRV_PATH = re.compile(r"/nix/store/[0-9a-df-np-sv-z]{32}-[\w.+?=-]+\.drv")
EVAL_COMMANDS = (("nix-instantiate", "--eval"), ("nix", "eval"))


@dataclass(frozen=True)
class Roots:
    """Where an evaluation's paths may lie for it to be cached, and how each root is identified."""

    repo: Path
    snapshots: tuple[Path, ...]  # copies of the repo's files, made by the tests
    trees: tuple[Path, ...]  # fetched trees, never edited


def is_evaluation(argv: list[str]) -> bool:
    name = Path(argv[0]).name
    return any(name == cmd and flag in argv[1:] for cmd, flag in EVAL_COMMANDS)


def files_digest(root: Path, names: Iterable[str]) -> str:
    h = hashlib.sha256()
    for rel in sorted(names):
        f = root / rel
        if f.is_file() and not f.is_symlink():
            h.update(rel.encode() + b"\0" + f.read_bytes() + b"\0")
        elif f.is_symlink():
            h.update(rel.encode() + b"\0->" + os.readlink(f).encode() + b"\0")
    return h.hexdigest()


def repo_files(repo: Path) -> list[str]:
    """The files of a checkout as they would be committed: tracked, and untracked but not ignored."""
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=repo, capture_output=True, check=True
    ).stdout
    return [n.decode() for n in out.split(b"\0") if n]


def snapshot_files(snapshot: Path) -> list[str]:
    return [str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file() or p.is_symlink()]


def tree_identity(tree: Path) -> str:
    st = tree.stat()
    version = next(
        (v.read_text().strip() for v in (tree / ".version", tree / "lib" / ".version") if v.is_file()), ""
    )
    return f"{tree.resolve()}:{st.st_ino}:{st.st_mtime_ns}:{version}"


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def path_identities(argv: list[str], roots: Roots, digest: Callable[[Path], str]) -> list[str] | None:
    """The identity of each root the argv's paths lie in, or None when a path lies outside every root."""
    found: set[str] = set()
    for arg in argv[1:]:
        for match in PATH_IN_ARG.findall(arg):
            p = Path(os.path.normpath(match))
            if _under(p, Path("/nix/store")):
                found.add(f"store:{'/'.join(p.parts[:4])}")
            elif _under(p, roots.repo):
                found.add(f"repo:{digest(roots.repo)}")
            elif snap := next((s for s in roots.snapshots if _under(p, s)), None):
                found.add(f"snapshot:{digest(snap)}")
            elif tree := next((t for t in roots.trees if _under(p, t)), None):
                found.add(f"tree:{tree_identity(tree)}")
            else:
                return None
    return sorted(found)


def nix_identity(nix: Path) -> str:
    st = nix.stat()
    return f"{nix.resolve()}:{st.st_size}:{st.st_mtime_ns}"


def key(
    argv: list[str], cwd: Path | None, env: dict[str, str], roots: Roots, nix: Path,
    digest: Callable[[Path], str],
) -> str | None:  # fmt: skip
    """The cache key of an evaluation, or None when it cannot be cached (a path outside the roots)."""
    paths = path_identities(argv, roots, digest)
    if paths is None or (cwd is not None and path_identities(["", str(cwd)], roots, digest) is None):
        return None
    material = {
        "argv": [Path(argv[0]).name, *(placeholders(a, roots) for a in argv[1:])],
        "cwd": placeholders(str(cwd or ""), roots),
        "nix.conf": [_read(f.format(xdg=env.get("XDG_CONFIG_HOME") or f"{env.get('HOME', '')}/.config"))
                     for f in NIX_CONF],
        "paths": paths,
        "env": sorted((k, v) for k, v in env.items() if ENV_PATTERN.fullmatch(k)),
        "machine": platform.machine(),
        "nix": nix_identity(nix),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _places(roots: Roots) -> list[tuple[str, str]]:
    """(path, placeholder) for the checkout and each snapshot, longest path first."""
    pairs = [(str(roots.repo), "@REPO@"), *((str(s), f"@SNAPSHOT{n}@") for n, s in enumerate(roots.snapshots))]
    return sorted(pairs, key=lambda p: -len(p[0]))


def placeholders(text: str, roots: Roots) -> str:
    for path, mark in _places(roots):
        text = text.replace(path, mark)
    return text


def paths_back(text: str, roots: Roots) -> str:
    for path, mark in _places(roots):
        text = text.replace(mark, path)
    return text


class EvalCache:
    """Outputs of successful evaluations, one JSON file per key under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _file(self, k: str) -> Path:
        return self.root / k[:2] / f"{k}.json"

    def get(self, k: str, writes_drvs: bool) -> tuple[str, str] | None:
        """The stdout and stderr (its warnings) of the evaluation, or None. An evaluation that wrote its
        derivations to the store (`--read-write-mode`, `nix eval`) is a miss when one of them is gone."""
        f = self._file(k)
        try:
            entry = json.loads(f.read_text())
            stdout, stderr = str(entry["stdout"]), str(entry["stderr"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if writes_drvs and any(not Path(p).exists() for p in set(DRV_PATH.findall(stdout))):
            return None  # a derivation the output names was collected: evaluate again (it writes them)
        os.utime(f)  # recently used
        return stdout, stderr

    def put(self, k: str, stdout: str, stderr: str) -> None:
        f = self._file(k)
        f.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=f.parent, delete=False, suffix=".tmp") as tmp:
            json.dump({"stdout": stdout, "stderr": stderr}, tmp)
        os.replace(tmp.name, f)
        self.trim()

    def trim(self) -> None:
        entries = []
        for f in self.root.glob("*/*.json"):
            try:
                st = f.stat()
            except OSError:
                continue
            entries.append((st.st_mtime_ns, st.st_size, f))
        entries.sort(reverse=True)  # newest first
        total = 0
        for n, (_, size, f) in enumerate(entries):
            total += size
            if n >= MAX_ENTRIES or total > MAX_BYTES:
                f.unlink(missing_ok=True)


def enabled(env: dict[str, str]) -> bool:
    return env.get("STATION_NIX_EVAL_CACHE", "1") != "0"


def log(env: dict[str, str], outcome: str, argv: list[str]) -> None:
    target = env.get("STATION_NIX_EVAL_LOG")
    if target:
        line = f"{outcome}\t{Path(argv[0]).name} {' '.join(argv[1:4])}"[:300].replace("\n", " ")
        with open(target, "a") as out:
            out.write(line + "\n")


def run(
    argv: list[str], *, timeout: int, cwd: Path | None, env: dict[str, str], roots: Roots, cache: EvalCache,
    digest: Callable[[Path], str],
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run `argv` (argv[0] the Nix program's full path), answering an unchanged evaluation from the cache."""

    def evaluate() -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env, check=False)

    if not is_evaluation(argv):
        return evaluate()
    k = key(argv, cwd, env, roots, Path(argv[0]), digest) if enabled(env) else None
    if k is None:
        log(env, "uncached", argv)
        return evaluate()
    writes_drvs = "--read-write-mode" in argv or Path(argv[0]).name == "nix"
    if (kept := cache.get(k, writes_drvs)) is not None:
        log(env, "hit", argv)
        return subprocess.CompletedProcess(argv, 0, *(paths_back(text, roots) for text in kept))
    log(env, "miss", argv)
    proc = evaluate()
    if proc.returncode == 0:
        cache.put(k, placeholders(proc.stdout, roots), placeholders(proc.stderr, roots))
    return proc
