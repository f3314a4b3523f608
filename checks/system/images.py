"""Test images built from this machine's files, served by a real local registry, referenced by digest.

`sim` image: Debian's python3.11 with its standard library and shared libraries, the `station` package
and the site packages `station simulate` imports, and image/vllm_serve.py as the entrypoint (it takes
`vllm serve`'s arguments). Built with `podman import`, pushed to `docker-registry` on 127.0.0.1, and
named `127.0.0.1:PORT/station-sim@sha256:…`: the units pull and run it by digest as rendered.
The registry's storage lives under $STATION_CACHE/system, so a rebuild happens only when an input changes.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SRC = REPO / "pkgs" / "station-tools" / "src" / "vllm_station"
PYTHON = Path("/usr/bin/python3.11")
STDLIB = Path("/usr/lib/python3.11")
SITE = "usr/local/lib/python3.11/dist-packages"  # on Debian python's default sys.path
STDLIB_SKIP = {
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "pydoc_data",
    "__pycache__",
}


def podman(*args: str, timeout: float = 600, stdin: BinaryIO | None = None) -> str:
    proc = subprocess.run(
        ["podman", "--runtime", "/usr/sbin/runc", *args],
        stdin=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"podman {' '.join(args)} failed: {proc.stderr.decode(errors='replace')[-2000:]}"
        )
    return proc.stdout.decode().strip()


@dataclass
class Registry:
    """`docker-registry serve` on 127.0.0.1:port with its storage under `root` (no auth)."""

    root: Path
    port: int
    netns: str | None = None  # serve inside this network namespace (its own 127.0.0.1)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        # One file per registry (port): two tiers may start theirs on the same storage at the same moment,
        # and a shared config file would hand the first process the second one's port.
        config = self.root / f"config-{self.netns or 'host'}-{self.port}.yml"
        config.write_text(
            "version: 0.1\n"
            f"storage: {{ filesystem: {{ rootdirectory: {self.root / 'data'} }} }}\n"
            f"http: {{ addr: {self.address} }}\n"
            "log: { level: warn }\n"
        )
        log_path = self.root / f"registry-{self.netns or 'host'}-{self.port}.log"
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        self.proc = subprocess.Popen(
            [*prefix, "docker-registry", "serve", str(config)],
            stdout=log_path.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self._answers(prefix):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(
            f"docker-registry did not answer on {self.address}: {log_path.read_text()[-1000:]}"
        )

    def _answers(self, prefix: list[str]) -> bool:
        if prefix:  # inside a network namespace: ask from there
            probe = [
                *prefix,
                "curl",
                "-sf",
                "-o",
                "/dev/null",
                f"http://{self.address}/v2/",
            ]
            return subprocess.run(probe, check=False, timeout=5).returncode == 0
        try:
            return httpx.get(f"http://{self.address}/v2/", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        for name in (f"config-{self.netns or 'host'}-{self.port}.yml", f"registry-{self.netns or 'host'}-{self.port}.log"):
            (self.root / name).unlink(missing_ok=True)

    def digest_of(self, name: str, tag: str) -> str | None:
        """The manifest digest the registry serves for NAME:TAG, or None."""
        accept = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
        try:
            r = httpx.head(
                f"http://{self.address}/v2/{name}/manifests/{tag}",
                headers={"Accept": accept},
                timeout=5,
            )
        except httpx.HTTPError:
            return None
        return r.headers.get("Docker-Content-Digest") if r.status_code == 200 else None


def _site_modules() -> list[Path]:
    """Top-level site-packages entries that `station simulate` imports (asked of the dev venv's python)."""
    code = (
        "import sys, site, vllm_station.cli, vllm_station.sim.cli, vllm_station.api.client\n"
        "roots = [p for p in site.getsitepackages()]\n"
        "seen = set()\n"
        "for m in list(sys.modules.values()):\n"
        "    f = getattr(m, '__file__', None) or ''\n"
        "    for r in roots:\n"
        "        if f.startswith(r + '/'):\n"
        "            seen.add(r + '/' + f[len(r) + 1:].split('/')[0])\n"
        "print('\\n'.join(sorted(seen)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return [Path(line) for line in out.splitlines() if line]


def _libraries(files: list[Path]) -> set[Path]:
    libs: set[Path] = set()
    for f in files:
        proc = subprocess.run(
            ["ldd", str(f)], capture_output=True, text=True, check=False
        )
        for line in proc.stdout.splitlines():
            parts = line.split()
            for p in parts:
                if p.startswith("/") and os.path.exists(p):
                    libs.add(Path(p))
    return libs


def _tree_hash(paths: list[Path], *, contents: bool = True) -> str:
    """A tag for the image's inputs: file contents, or (for trees of GBs) paths, sizes and mtimes.

    By contents, a file is named relative to its root's parent (`system/images.py`, `src/vllm_station/…`):
    the same sources in another checkout (a worktree, CI's clone) give the same tag and reuse the image."""
    h = hashlib.sha256()
    for root in sorted(paths):
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        for f in files:
            h.update(str(f.relative_to(root.parent) if contents else f).encode())
            if contents:
                h.update(f.read_bytes())
            else:
                st = f.stat()
                h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def _add(tar: tarfile.TarFile, src: Path, dest: str) -> None:
    tar.add(src, arcname=dest, filter=lambda ti: None if "__pycache__" in ti.name else ti)


def _publish(
    registry: Registry, work: Path, name: str, tag: str, fill: Callable[[tarfile.TarFile], None], changes: list[str]
) -> str:
    """Build the image from a rootfs tar (when the registry lacks NAME:TAG), push it, return it by digest."""
    digest = registry.digest_of(name, tag)
    if digest is None:
        work.mkdir(parents=True, exist_ok=True)
        archive = work / f"{name}-rootfs.tar"
        with tarfile.open(archive, "w") as tar:
            fill(tar)
            for d in ("tmp", "var/tmp"):
                ti = tarfile.TarInfo(d)
                ti.type = tarfile.DIRTYPE
                ti.mode = 0o1777
                tar.addfile(ti)
        local = f"localhost/{name}:{tag}"
        args = [arg for change in changes for arg in ("--change", change)]
        with archive.open("rb") as f:
            podman("import", *args, "-", local, stdin=f)
        archive.unlink()
        podman("push", "--tls-verify=false", local, f"docker://{registry.address}/{name}:{tag}", timeout=1200)
        podman("rmi", local)
        digest = registry.digest_of(name, tag)
        if digest is None:
            raise AssertionError(f"pushed {name}:{tag} but the registry serves no digest for it")
    return f"{registry.address}/{name}@{digest}"


def _add_python(tar: tarfile.TarFile, python: Path, stdlib: Path, dest_stdlib: str) -> None:
    _add(tar, python, str(python).lstrip("/"))
    for entry in sorted(stdlib.iterdir()):
        if entry.name not in STDLIB_SKIP and entry.name not in ("site-packages", "dist-packages"):
            _add(tar, entry, f"{dest_stdlib}/{entry.name}")


def _add_libraries(tar: tarfile.TarFile, binaries: list[Path], inside: tuple[Path, ...] = ()) -> None:
    """The shared libraries `binaries` load, except those under `inside` (already in the image)."""
    for lib in sorted(_libraries(binaries)):
        if not any(lib.is_relative_to(root) for root in inside):
            _add(tar, Path(os.path.realpath(lib)), str(lib).lstrip("/"))


def build_sim_image(registry: Registry, work: Path) -> str:
    """`station simulate` behind `vllm serve`'s arguments on Debian's python3.11 (see the module doc)."""
    site = _site_modules()
    tag = _tree_hash([SRC, HERE / "image", Path(__file__).resolve(), *site])

    def fill(tar: tarfile.TarFile) -> None:
        _add_python(tar, PYTHON, STDLIB, "usr/lib/python3.11")
        binaries = [PYTHON, *STDLIB.glob("lib-dynload/*.so"), *(p for s in site for p in ([s] if s.is_file() else s.rglob("*.so")))]
        _add_libraries(tar, binaries)
        for s in site:
            _add(tar, s, f"{SITE}/{s.name}")
        _add(tar, SRC, f"{SITE}/vllm_station")
        _add(tar, HERE / "image" / "vllm_serve.py", "opt/shim/vllm_serve.py")

    changes = ['ENTRYPOINT ["/usr/bin/python3.11", "/opt/shim/vllm_serve.py"]', "ENV PYTHONDONTWRITEBYTECODE=1"]
    return _publish(registry, work, "station-sim", tag, fill, changes)


def build_vllm_image(registry: Registry, work: Path, venv: Path) -> str:
    """Real vLLM (CPU build): the vLLM venv and the Python it was made from, at the same paths, with the
    shared libraries they load; entrypoint `vllm serve` like vllm/vllm-openai's. Tagged by the trees'
    paths, sizes and mtimes (hashing 2.5 GB every run would cost more than the check)."""
    python = Path(os.path.realpath(venv / "bin" / "python"))
    home = python.parent.parent
    stdlib = home / "lib" / python.name  # python3.11 → lib/python3.11
    # this file by content (a fresh clone's mtimes are new), the venv by stat
    tag = _tree_hash([Path(__file__).resolve()])[:8] + _tree_hash([venv], contents=False)[:8]

    def fill(tar: tarfile.TarFile) -> None:
        _add_python(tar, python, stdlib, str(stdlib).lstrip("/"))
        for lib in home.glob("lib/libpython*.so*"):
            _add(tar, lib, str(lib).lstrip("/"))
        for link in home.glob("bin/python*"):  # the venv's python3/python point at these names
            if link.is_symlink():
                _add(tar, link, str(link).lstrip("/"))
        _add(tar, venv, str(venv).lstrip("/"))
        # vLLM's CPU platform asks `lscpu` for the topology, through /bin/sh
        tools = {"bin/sh": Path(os.path.realpath("/bin/sh")), "usr/bin/lscpu": Path("/usr/bin/lscpu")}
        for dest, tool in tools.items():
            _add(tar, tool, dest)
        binaries = [python, *tools.values(), *stdlib.glob("lib-dynload/*.so"), *venv.rglob("*.so*")]
        _add_libraries(tar, binaries, (home, venv))

    changes = [
        f'ENTRYPOINT ["{venv}/bin/vllm", "serve"]',
        "ENV HF_HUB_OFFLINE=1",
        "ENV TRANSFORMERS_OFFLINE=1",
        "ENV VLLM_NO_USAGE_STATS=1",
    ]
    return _publish(registry, work, "station-vllm-cpu", tag, fill, changes)
