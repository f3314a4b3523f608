"""The build-env tier's machinery: the package as Nix builds it, rebuilt from PyPI with the same inputs.

1. `evaluate()` reads package.nix's inputs (`dependencies`, `build-system`, `nativeCheckInputs`, as
   pnames) and its check settings from a full nixpkgs tree (checks/build-env).
2. `PYPI` maps each pname to its PyPI name; an unmapped pname is an error, never a guess.
3. `pool_venv()` makes a venv with exactly those names (pip resolves what they need, as Nix propagates
   it), cached under $STATION_CACHE/build-env by a hash of the sorted names.
4. `Build` installs the package from the evaluated `src` with --no-deps and no build isolation into its
   own prefix (Nix's $out, wrapped like wrapPythonPrograms does), and runs commands the way the build's
   check phases do: from a writable copy of `src`, a sandbox-like environment, `preCheck` first.
5. `subset_venv()` derives a venv holding only some of the pool's names (and what they need) from the
   pool by symlinks, so negative runs cost a second, not a fresh install.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nixenv import CACHE, REPO, eval_json, flake_snapshot, require_nix, require_tree

TREE_VAR = "NIXOS_TREE"
TREE_MARKER = "nixos/lib/eval-config.nix"
ENTRY = REPO / "checks" / "build-env"
PACKAGE = Path("pkgs/station-tools/package.nix")

# pname in the nixpkgs tree -> PyPI name. Every input of package.nix needs a row.
PYPI = {
    # dependencies
    "aiohttp": "aiohttp",
    "cffi": "cffi",
    "httpx": "httpx",
    "huggingface-hub": "huggingface-hub",
    "jsonschema": "jsonschema",
    "matplotlib": "matplotlib",
    "nvidia-ml-py": "nvidia-ml-py",
    # build-system
    "setuptools": "setuptools",
    # nativeCheckInputs
    "hypothesis": "hypothesis",
    "numpy": "numpy",
    "pytest-check-hook": "pytest",  # pytestCheckHook propagates pytest and runs `python -m pytest`
    "pytest-timeout": "pytest-timeout",
    "pytest-xdist": "pytest-xdist",
    "safetensors": "safetensors",
}

# What stands in on this machine for the store paths package.nix puts into its check environment.
HOST_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")
HOST_LIBS = {"numactl": "libnuma.so.1"}  # storeLibs name (checks/build-env) -> a library it must hold
# Check inputs that are programs, not Python packages: pname -> the commands this machine provides for them
# (put on the emulated build's PATH, as nativeCheckInputs puts their bin/ on a real build's PATH).
HOST_TOOLS = {"rsync": ("rsync",)}

# The commands stdenv puts on a build's PATH (coreutils, findutils, diffutils, sed, grep, gawk, tar,
# gzip, bzip2, xz, make, bash, patch, the C compiler). Not util-linux (mount, unshare), not numactl:
# tests needing those must skip in the build, and do here.
STDENV_TOOLS = (
    "sh", "bash", "cat", "cp", "mv", "rm", "ln", "ls", "mkdir", "rmdir", "chmod", "chown", "touch", "stat",
    "readlink", "realpath", "dirname", "basename", "env", "id", "uname", "date", "sleep", "true", "false",
    "test", "printf", "echo", "head", "tail", "sort", "uniq", "wc", "tr", "cut", "tee", "mktemp", "od",
    "expr", "seq", "du", "df", "sync", "find", "xargs", "diff", "cmp", "sed", "grep", "awk", "gawk", "tar",
    "gzip", "bzip2", "xz", "make", "patch", "cc", "gcc", "ld", "as", "ar", "nm", "strip",
)  # fmt: skip

PIP_TIMEOUT_S = 900
MEMORY_LIMIT = 6 * 2**30  # address space of every command run in the check environment
STAMP = ".station-build-env"
KEEP_VENVS = 3  # pool venvs kept under $STATION_CACHE/build-env besides the current one


# ---- the package's inputs, evaluated -------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    """What buildPythonApplication received in package.nix (checks/build-env), as JSON."""

    raw: dict[str, Any]

    @property
    def dependencies(self) -> list[str]:
        return list(self.raw["dependencies"])

    @property
    def build_system(self) -> list[str]:
        return list(self.raw["build-system"])

    @property
    def check_inputs(self) -> list[str]:
        return list(self.raw["nativeCheckInputs"])

    @property
    def pnames(self) -> list[str]:
        """The Python inputs (a program among the check inputs is not one: HOST_TOOLS)."""
        return [p for p in (*self.dependencies, *self.build_system, *self.check_inputs) if p not in HOST_TOOLS]

    @property
    def tools(self) -> list[str]:
        return [p for p in self.check_inputs if p in HOST_TOOLS]

    def unmapped(self) -> list[str]:
        return sorted({p for p in self.pnames if p not in PYPI})

    def pypi_names(self, pnames: list[str] | None = None) -> list[str]:
        pnames = self.pnames if pnames is None else pnames
        missing = sorted({p for p in pnames if p not in PYPI})
        if missing:
            raise AssertionError(
                f"package.nix inputs with no PyPI name in checks/buildenv.py PYPI: {', '.join(missing)}"
            )
        return sorted({PYPI[p] for p in pnames})


def require_tree_and_nix() -> Path:
    require_nix()
    return require_tree(TREE_VAR, TREE_MARKER, "the build-env tier (the package as Nix builds it)")


@functools.cache
def evaluate(drop: tuple[str, ...] = ()) -> Inputs:
    """package.nix as the flake calls it, from the files a commit would hold; `drop` removes inputs."""
    tree = require_tree_and_nix()
    package = flake_snapshot() / PACKAGE
    drop_expr = "[ " + " ".join(json.dumps(p) for p in drop) + " ]"
    args = ["--read-write-mode", str(ENTRY), "--argstr", "nixosTree", str(tree)]
    args += ["--argstr", "package", str(package), "--arg", "drop", drop_expr]
    raw: dict[str, Any] = eval_json(args, timeout=300)
    return Inputs(raw)


def suite_leaves_out() -> set[str]:
    """The test files package.nix keeps out of the build's suite (`disabledTestPaths`, relative to the
    package: `tests/test_rollout.py`), from the evaluated package.nix. Raises pytest's skip exception when
    Nix or the tree is missing (the build-env tier then skips too). `disabledTests` (a `-k` expression)
    cannot be matched outside pytest's run: with any, an AssertionError says so."""
    raw = evaluate().raw
    if raw["disabledTests"]:
        raise AssertionError(f"package.nix disabledTests {raw['disabledTests']}: suite_leaves_out() cannot "
                             "match a -k expression; name the files in disabledTestPaths instead")  # fmt: skip
    return set(raw["disabledTestPaths"])


def host_lib_dir(library: str) -> Path:
    for d in HOST_LIB_DIRS:
        if (Path(d) / library).exists():
            return Path(d)
    raise AssertionError(f"{library} not found in {', '.join(HOST_LIB_DIRS)}: install it (scripts/check does)")


def to_host(text: str, inputs: Inputs) -> str:
    """`text` with package.nix's store paths replaced by this machine's; any other store path fails."""
    for name, store_dir in inputs.raw["storeLibs"].items():
        text = text.replace(store_dir, str(host_lib_dir(HOST_LIBS[name])))
    leftover = re.findall(r"/nix/store/[^\s'\"]+", text)
    if leftover:
        raise AssertionError(
            f"the check environment names store paths the build-env tier does not map to this machine: "
            f"{leftover} (add them to storeLibs in checks/build-env and HOST_LIBS in checks/buildenv.py)"
        )
    return text


# ---- venvs ---------------------------------------------------------------------------------------


def _run(
    argv: list[str], what: str, *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> str:
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False, cwd=cwd, env=env
    )
    if proc.returncode != 0:
        noise = "WARNING: Location "  # the machine's local wheel index lists names it does not hold
        err = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith(noise))
        raise AssertionError(f"{what} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{err[-4000:]}")
    return proc.stdout


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def pool_key(names: list[str]) -> str:
    ident = json.dumps({"python": sys.version, "base": sys.base_prefix, "names": sorted(names)})
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def pool_venv(names: list[str]) -> Path:
    """A venv with exactly `names` installed from PyPI (unpinned) plus what they need; built once."""
    root = CACHE / "build-env"
    venv = root / f"venv-{pool_key(names)}"
    if (venv / STAMP).exists():
        return venv
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{venv.name}.tmp-", dir=root))
    try:
        _run([sys.executable, "-m", "venv", "--clear", str(tmp)], "python -m venv")
        py = str(tmp / "bin" / "python")
        pip = [py, "-m", "pip", "--disable-pip-version-check", "-q"]
        # ensurepip puts setuptools into a 3.11 venv; only the inputs may provide it
        _run([*pip, "uninstall", "-y", "setuptools"], "pip uninstall setuptools")
        _run([*pip, "install", *names], f"pip install {' '.join(names)}")
        freeze = _run([*pip, "freeze", "--all"], "pip freeze")
        (tmp / STAMP).write_text(json.dumps({"names": sorted(names), "freeze": freeze.splitlines()}, indent=1))
        try:
            tmp.rename(venv)  # atomic: a venv under its final name is complete
        except OSError:
            if not (venv / STAMP).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # keep the few newest (other branches' input lists), drop the rest
    others = [d for d in root.glob("venv-*") if d != venv and ".tmp-" not in d.name and (d / STAMP).exists()]
    for old in sorted(others, key=lambda d: (d / STAMP).stat().st_mtime)[:-KEEP_VENVS]:
        shutil.rmtree(old, ignore_errors=True)
    return venv


_CLOSURE = r"""
import importlib.metadata as md, json, sys
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name as canon

dists = {canon(d.metadata["Name"]): d for d in md.distributions()}
absent = {canon(n) for n in json.loads(sys.argv[2])}
seen, todo = {}, [(canon(n), frozenset()) for n in json.loads(sys.argv[1])]
while todo:
    name, extras = todo.pop()
    if name in absent:
        continue
    if name not in dists:
        sys.exit(f"{name} is not in the pool venv")
    if name in seen and extras <= seen[name]:
        continue
    seen[name] = seen.get(name, frozenset()) | extras
    for text in dists[name].requires or []:
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in {"", *seen[name]}):
            todo.append((canon(req.name), frozenset(req.extras)))

def tops(d):
    return sorted({f.parts[0] for f in d.files or [] if f.parts[0] not in ("..", "__pycache__")})

print(json.dumps({"keep": [t for n in seen for t in tops(dists[n])],
                  "hide": [t for n, d in dists.items() if n not in seen for t in tops(d)]}))
"""


def subset_venv(pool: Path, names: list[str], dest: Path, absent: tuple[str, ...] = ()) -> Path:
    """A venv holding `names` and what they need, taken from `pool` by symlinks (pip itself left out).

    `absent` names stay out even where another name needs them: a dropped input is gone, as it is from
    a Nix build whose other inputs do not propagate it.
    """
    out = _run(
        [str(pool / "bin" / "python"), "-c", _CLOSURE, json.dumps(names), json.dumps(absent)],
        f"closure of {names}",
    )
    split = json.loads(out)
    shared = set(split["keep"]) & set(split["hide"])
    if shared:
        raise AssertionError(f"site-packages entries shared by kept and dropped distributions: {sorted(shared)}")
    _run([sys.executable, "-m", "venv", "--without-pip", str(dest)], "python -m venv --without-pip")
    for top in sorted(set(split["keep"])):
        (site_packages(dest) / top).symlink_to(site_packages(pool) / top)
    return dest


# ---- the build: install, then the check phases ---------------------------------------------------


@dataclass
class Build:
    """One build directory: `source` (writable copy of src), `out` (the installed package), `tmp`."""

    inputs: Inputs
    venv: Path
    top: Path
    tools: Path = field(init=False)

    def __post_init__(self) -> None:
        self.tools = self.top / "stdenv-bin"
        self.tools.mkdir(parents=True, exist_ok=True)
        for name in (*STDENV_TOOLS, *(c for p in self.inputs.tools for c in HOST_TOOLS[p])):
            found = shutil.which(name)
            if found and not (self.tools / name).exists():
                (self.tools / name).symlink_to(found)

    @property
    def source(self) -> Path:
        return self.top / "source"

    @property
    def out(self) -> Path:
        return self.top / "out"

    @property
    def tmp(self) -> Path:
        return self.top

    def site(self) -> Path:
        return site_packages(self.out)

    def unpack(self) -> None:
        """Nix's unpackPhase: a writable copy of `src`, the build's working directory."""
        shutil.copytree(self.inputs.raw["src"], self.source, symlinks=True)
        for d, _, files in os.walk(self.source):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(Path(d) / f, 0o644)

    def install(self) -> None:
        """pypaBuildHook + pypaInstallHook: a wheel built with the env's own build-system, no deps."""
        pip = [str(self.venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
        install = ["install", "--no-deps", "--no-build-isolation", "--no-index", "--prefix", str(self.out), "."]
        _run([*pip, *install], "pip install --no-deps (the package from src)", cwd=self.source, env=self.env())
        self.wrap()

    def wrap(self) -> None:
        """wrapPythonPrograms: each bin/ script becomes a wrapper applying makeWrapperArgs."""
        exports = ['export PYTHONPATH="' + str(self.site()) + '${PYTHONPATH:+:$PYTHONPATH}"']
        args = [to_host(a, self.inputs) for a in self.inputs.raw["makeWrapperArgs"]]
        while args:
            flag, *args = args
            if flag == "--set" and len(args) >= 2:
                (key, value), args = args[:2], args[2:]
                exports.append(f"export {key}={_sh(value)}")
            elif flag == "--set-default" and len(args) >= 2:
                (key, value), args = args[:2], args[2:]
                exports.append(f'export {key}="${{{key}-{value}}}"')
            else:
                raise AssertionError(f"makeWrapperArgs {flag!r}: not emulated by checks/buildenv.py Build.wrap")
        for script in sorted((self.out / "bin").iterdir()):
            wrapped = script.with_name(f".{script.name}-wrapped")
            script.rename(wrapped)
            script.write_text("#!/bin/sh\n" + "\n".join(exports) + f'\nexec {_sh(str(wrapped))} "$@"\n')
            script.chmod(0o755)

    def env(self) -> dict[str, str]:
        """What a build's environment holds before preCheck (a fresh dict each time)."""
        return {
            "PATH": f"{self.venv / 'bin'}:{self.tools}",
            "HOME": "/homeless-shelter",
            "NIX_BUILD_TOP": str(self.tmp),
            "TMPDIR": str(self.tmp),
            "TMP": str(self.tmp),
            "TEMP": str(self.tmp),
            "TEMPDIR": str(self.tmp),
            "out": str(self.out),
            "LANG": "C.UTF-8",  # mk-python-derivation.nix
            "PYTHONHASHSEED": "0",  # python's setup hook
            "PYTHONNOUSERSITE": "1",
            "DETERMINISTIC_BUILD": "1",
            "PYTHONPATH": str(self.site()),  # pypaInstallHook puts $out's site-packages first
            # The sandbox has no /opt: without this the suite would find this machine's vLLM venv and
            # models ($STATION_CACHE, default /opt/vllm-station) and start real servers.
            "STATION_CACHE": str(self.tmp / "no-station-cache"),
        }

    def run(
        self, argv: list[str], *, timeout: int, pre_check: bool = True, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`argv` in the build's environment (after `preCheck` when asked), in its own process group."""
        script = f"set -eu\nulimit -v {MEMORY_LIMIT // 1024}\n"
        if pre_check:
            script += to_host(self.inputs.raw["preCheck"], self.inputs) + "\n"
        script += 'exec "$@"\n'
        log = self.top / "last-run.log"
        with open(log, "w") as fh:
            proc = subprocess.Popen(
                [str(self.tools / "bash"), "-c", script, "check-phase", *argv],
                cwd=cwd or self.source, env=self.env(), stdout=fh, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise AssertionError(
                    f"{argv} ran past {timeout} s; last output:\n{log.read_text(errors='replace')[-4000:]}"
                ) from None
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # whatever the run left behind
        return subprocess.CompletedProcess(argv, rc, log.read_text(errors="replace"), "")

    def pytest_args(self, cores: int | None = None) -> list[str]:
        """pytestCheckPhase's arguments: disabledTests, disabledTestPaths, pytestFlagsArray, and what
        pytest-xdist's setup hook (pytestXdistHook) appends when it is a check input: one worker per build
        core (`--numprocesses=$NIX_BUILD_CORES`; Nix's default `cores = 0` gives the builder every core)."""
        args = ["python", "-m", "pytest"]
        disabled = self.inputs.raw["disabledTests"]
        if disabled:
            args += ["-k", " and ".join(f"not {t}" for t in disabled)]
        for path in self.inputs.raw["disabledTestPaths"]:
            if not (self.source / path).exists():
                raise AssertionError(f'Disabled tests path "{path}" does not exist')
            args.append(f"--ignore={path}")
        return args + list(self.inputs.raw["pytestFlagsArray"]) + xdist_hook(self.inputs, cores or os.cpu_count() or 1)


def xdist_hook(inputs: Inputs, cores: int) -> list[str]:
    """What pytest-xdist's setup hook (nixpkgs: pytest-xdist/setup-hook.sh) appends to pytestFlagsArray
    before pytestCheckPhase: `--numprocesses=$NIX_BUILD_CORES`, unless dontUsePytestXdist is set."""
    if "pytest-xdist" not in inputs.check_inputs or inputs.raw.get("dontUsePytestXdist"):
        return []
    return [f"--numprocesses={cores}"]


def _sh(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


RUNTIME_DEPS_CHECK = r"""
import importlib.metadata as md, sys
from pip._vendor.packaging.requirements import Requirement

problems = []
for text in md.distribution(sys.argv[1]).requires or []:
    req = Requirement(text)
    if req.marker and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        version = md.distribution(req.name).version
    except md.PackageNotFoundError:
        problems.append(f"{req.name} not installed")
        continue
    if req.specifier and version not in req.specifier:
        problems.append(f"{req.name}{req.specifier} not satisfied by version {version}")
print("\n".join(problems))
sys.exit(1 if problems else 0)
"""
