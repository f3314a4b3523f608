"""Shared pytest setup: test-tier markers and the real-vLLM server fixtures.

Real vLLM (CPU build) serves two small models built by scripts/build-test-models:

- ``tools_server`` (session): the tiny tool-calling model, served as "tiny-tools" with
  ``--enable-auto-tool-choice --tool-call-parser hermes`` — tool_choice=auto yields real parsed tool calls.
- ``smol_server`` (session): SmolLM2-135M-Instruct, served as "smollm2" (sensible prose; structured tool
  calls only with tool_choice=required or a named function).
- ``vllm_server`` (per test): a factory,
  ``vllm_server(model="tools"|"smol", served_name=..., extra_args=[...])``, for servers in other
  configurations (no auto tool choice, another served name, ...). Its servers stop when the test ends.

Each returns a ``VllmServer`` (``.base_url`` http://127.0.0.1:PORT, ``.api_url``, ``.served_name``,
``.model_dir``, ``.log_path``). Servers run in their own session (process group) and are stopped by group
(SIGTERM, then SIGKILL). While any runs, this process holds an exclusive flock on
$STATION_CACHE/realvllm.lock, so only one person's vLLM runs at a time on a shared machine.

Tests using these fixtures are marked ``realvllm`` automatically. Without the vLLM venv or the models
they skip, naming what is missing and the command that builds it — unless STATION_REQUIRE_REALVLLM=1,
then they fail.

Environment: STATION_CACHE (/opt/vllm-station), STATION_VLLM_VENV ($STATION_CACHE/vllm-venv),
STATION_MODELS ($STATION_CACHE/models), STATION_REALVLLM_START_TIMEOUT (seconds to /health, 420),
STATION_REALVLLM_LOCK_TIMEOUT (seconds to wait for the machine-wide lock, 1800).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import pytest

TESTS = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("STATION_CACHE", "/opt/vllm-station"))
VENV = Path(os.environ.get("STATION_VLLM_VENV", str(CACHE / "vllm-venv")))
MODELS = Path(os.environ.get("STATION_MODELS", str(CACHE / "models")))
LOCK_PATH = CACHE / "realvllm.lock"
START_TIMEOUT_S = float(os.environ.get("STATION_REALVLLM_START_TIMEOUT", "420"))
LOCK_TIMEOUT_S = float(os.environ.get("STATION_REALVLLM_LOCK_TIMEOUT", "1800"))

SERVED_NAMES = {"tools": "tiny-tools", "smol": "smollm2"}
TOOL_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
SERVE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # OpenMP threads that sleep between parallel regions: spinning ones took the cores of the tests and
    # servers beside them (a full check runs 3-4 vLLM engines and 4 test workers on 2 cores)
    "OMP_WAIT_POLICY": "PASSIVE",
}

# Markers of the test tiers. pyproject.toml declares realvllm and slow.
TIER_MARKERS = {
    "nix_parse": "parses every .nix file (needs nix-instantiate: scripts/install-nix)",
    "nix_flake": "evaluates the flake's structure offline (needs Nix + a nixpkgs tree)",
    "nix_lib": "module tests with nixpkgs lib (needs NIXPKGS_LIB)",
    "nix_nixos": "full NixOS evaluations of the examples (needs NIXOS_TREE)",
    "nix_vm": "runNixOSTest VM tests (instantiated only; they run in real CI)",
}
REALVLLM_FIXTURES = {"vllm_server", "tools_server", "smol_server"}


def pytest_configure(config: pytest.Config) -> None:
    for name, text in TIER_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    # Inside a Nix build (pytestCheckHook; NIX_BUILD_TOP is always set there) the builder runs other
    # builds beside this one: millisecond bounds would fail on its load, not on the code.
    if item.get_closest_marker("timing") and os.environ.get("NIX_BUILD_TOP"):
        pytest.skip(
            "wall-clock bounds are not asserted inside a Nix build (a shared builder's load is not a"
            " measurement); scripts/check runs them"
        )


def pytest_itemcollected(item: pytest.Item) -> None:
    # At collection, before any pytest_collection_modifyitems: scripts/pytest_tiers.py groups items for
    # xdist by tier in a hook that must run before xdist's own.
    if REALVLLM_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.realvllm)


# ---- what is installed --------------------------------------------------------------------------


def _manifest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("realvllm_manifest", TESTS / "realvllm" / "manifest.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def missing_realvllm(model: str) -> str | None:
    """Why a real server for `model` cannot start here (naming the fix), or None when it can."""
    if not (VENV / "bin" / "vllm").exists() or not any(VENV.glob(".station-vllm-*")):
        return f"no vLLM CPU venv at {VENV}: run scripts/setup-vllm (then scripts/build-test-models)"
    manifest = _manifest()
    if model not in manifest.MODELS:
        raise ValueError(f"unknown test model {model!r}: choose one of {sorted(manifest.MODELS)}")
    mdir = manifest.model_dir(MODELS, model)
    if manifest.read_stamp(MODELS, model) is None:
        return f"test model {mdir} not built: run scripts/build-test-models"
    if not manifest.is_current(MODELS, model):
        return f"test model {mdir} was built by older code in tests/realvllm/: run scripts/build-test-models"
    return None


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("STATION_REQUIRE_REALVLLM") == "1":
        pytest.fail(f"{reason} (STATION_REQUIRE_REALVLLM=1)", pytrace=False)
    pytest.skip(f"real vLLM unavailable: {reason}")


# ---- the machine-wide lock ---------------------------------------------------------------------


class _MachineLock:
    """An exclusive flock held while this process runs any real vLLM server (reference counted)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[str] | None = None
        self._count = 0

    def acquire(self, timeout_s: float) -> None:
        if self._count == 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fh = open(self.path, "a+")  # noqa: SIM115 - held across calls, closed in release()
            deadline = time.monotonic() + timeout_s
            told = False
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        fh.close()
                        pytest.fail(
                            f"another real vLLM run held {self.path} for {timeout_s:.0f} s "
                            "(raise STATION_REALVLLM_LOCK_TIMEOUT or wait)",
                            pytrace=False,
                        )
                    if not told:
                        print(f"\nwaiting for {self.path} (another real vLLM run)", file=sys.stderr)
                        told = True
                    time.sleep(2)
            fh.seek(0)
            fh.truncate()
            fh.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
            fh.flush()
            self._fh = fh
        self._count += 1

    def release(self) -> None:
        self._count -= 1
        if self._count == 0 and self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


_LOCK = _MachineLock(LOCK_PATH)


# ---- one server ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class VllmServer:
    """A running `vllm serve` on 127.0.0.1."""

    model: str
    served_name: str
    model_dir: Path
    port: int
    log_path: Path
    argv: list[str]
    started_s: float = 0.0  # seconds from spawn to /health 200
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        return self.base_url + "/v1"

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = 20.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait_s)
                # the group may outlive its leader (engine core workers): make sure it is gone
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                return
            except subprocess.TimeoutExpired:
                continue


def _health_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def start_server(
    model: str,
    log_dir: Path,
    served_name: str | None = None,
    extra_args: Sequence[str] = (),
    *,
    eager: bool = True,
    env: dict[str, str] | None = None,
    timeout_s: float = START_TIMEOUT_S,
) -> VllmServer:
    """Spawn `vllm serve` for a test model and wait for /health 200 (the caller holds the lock)."""
    reason = missing_realvllm(model)
    if reason:
        _skip_or_fail(reason)
    mdir = _manifest().model_dir(MODELS, model)
    name = served_name or SERVED_NAMES[model]
    port = free_port()
    argv = [
        str(VENV / "bin" / "vllm"), "serve", str(mdir),
        "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", name, "--max-model-len", "2048",
        *(["--enforce-eager"] if eager else []), *extra_args,
    ]  # fmt: skip
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"vllm-{name}-{port}.log"
    srv = VllmServer(model, name, mdir, port, log_path, argv)
    full_env = {**os.environ, **SERVE_ENV, "VLLM_CACHE_ROOT": str(CACHE / "vllm-cache"), **(env or {})}
    full_env["PATH"] = f"{VENV / 'bin'}:{full_env.get('PATH', '')}"
    with open(log_path, "wb") as log:
        log.write(("$ " + " ".join(argv) + "\n").encode())
        log.flush()
        t0 = time.monotonic()
        srv.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=full_env, cwd=log_dir, start_new_session=True,
        )  # fmt: skip
    try:
        while True:
            if _health_ok(srv.base_url):
                srv.started_s = time.monotonic() - t0
                return srv
            code = srv.proc.poll()
            if code is not None:
                raise RuntimeError(f"vllm serve exited with {code} before /health answered")
            if time.monotonic() - t0 > timeout_s:
                raise RuntimeError(f"no /health 200 within {timeout_s:.0f} s")
            time.sleep(1)
    except BaseException as exc:
        srv.stop()
        if isinstance(exc, Exception):
            pytest.fail(
                f"real vLLM ({name}, {mdir}) did not start: {exc}\n"
                f"log {log_path}, last lines:\n{srv.log_tail()}",
                pytrace=False,
            )
        raise


class _Servers:
    """Servers started through one fixture; stopping them all releases their share of the lock."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.running: list[VllmServer] = []

    def start(
        self,
        model: str = "tools",
        served_name: str | None = None,
        extra_args: Sequence[str] = (),
        **kw: Any,
    ) -> VllmServer:
        reason = missing_realvllm(model)
        if reason:
            _skip_or_fail(reason)
        _LOCK.acquire(LOCK_TIMEOUT_S)
        try:
            srv = start_server(model, self.log_dir, served_name, extra_args, **kw)
        except BaseException:
            _LOCK.release()
            raise
        self.running.append(srv)
        return srv

    def stop_all(self) -> None:
        while self.running:
            self.running.pop().stop()
            _LOCK.release()


@pytest.fixture
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., VllmServer]]:
    """Factory: `vllm_server(model="tools"|"smol", served_name=..., extra_args=[...], eager=True)`."""
    servers = _Servers(tmp_path_factory.mktemp("vllm"))
    try:
        yield servers.start
    finally:
        servers.stop_all()


@pytest.fixture(scope="session")
def _session_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Servers]:
    servers = _Servers(tmp_path_factory.mktemp("vllm-session"))
    try:
        yield servers
    finally:
        servers.stop_all()


@pytest.fixture(scope="session")
def tools_server(_session_servers: _Servers) -> VllmServer:
    """The tiny tool-calling model as "tiny-tools", hermes parser, auto tool choice (whole session)."""
    return _session_servers.start("tools", "tiny-tools", TOOL_FLAGS)


@pytest.fixture(scope="session")
def smol_server(_session_servers: _Servers) -> VllmServer:
    """SmolLM2-135M-Instruct as "smollm2", hermes parser, auto tool choice (whole session)."""
    return _session_servers.start("smol", "smollm2", TOOL_FLAGS)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """tests/hostileserver.py in its own process group: (its URL, the file it records each request in)."""
    hits = tmp_path_factory.mktemp("hostile") / "hits"
    hits.touch()
    proc = subprocess.Popen(
        [sys.executable, str(TESTS / "hostileserver.py"), str(hits)],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    assert line.startswith("listening on "), line
    try:
        yield f"http://127.0.0.1:{int(line.split()[2])}", hits
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
