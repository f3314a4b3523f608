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
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

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


def podman(*args: str, timeout: float = 600, input: bytes | None = None) -> str:
    proc = subprocess.run(
        ["podman", "--runtime", "/usr/sbin/runc", *args],
        input=input,
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
        config = self.root / f"config-{self.netns or 'host'}.yml"
        config.write_text(
            "version: 0.1\n"
            f"storage: {{ filesystem: {{ rootdirectory: {self.root / 'data'} }} }}\n"
            f"http: {{ addr: {self.address} }}\n"
            "log: { level: warn }\n"
        )
        log_path = self.root / f"registry-{self.netns or 'host'}.log"
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
        "import sys, site, vllm_station.cli, vllm_station.simulate, vllm_station.api.client\n"
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


def _tree_hash(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for root in sorted(paths):
        files = (
            [root]
            if root.is_file()
            else sorted(
                p
                for p in root.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts
            )
        )
        for f in files:
            h.update(str(f).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _add(tar: tarfile.TarFile, src: Path, dest: str) -> None:
    tar.add(
        src, arcname=dest, filter=lambda ti: None if "__pycache__" in ti.name else ti
    )


def build_sim_image(registry: Registry, work: Path) -> str:
    """Build (when its inputs changed), push and return `ADDRESS/station-sim@sha256:…`."""
    site = _site_modules()
    tag = _tree_hash([SRC, HERE / "image", Path(__file__).resolve(), *site])
    digest = registry.digest_of("station-sim", tag)
    if digest is None:
        work.mkdir(parents=True, exist_ok=True)
        archive = work / "sim-rootfs.tar"
        binaries = [
            PYTHON,
            *STDLIB.glob("lib-dynload/*.so"),
            *(p for s in site for p in ([s] if s.is_file() else s.rglob("*.so"))),
        ]
        with tarfile.open(archive, "w") as tar:
            _add(tar, PYTHON, "usr/bin/python3.11")
            for entry in sorted(STDLIB.iterdir()):
                if (
                    entry.name not in STDLIB_SKIP
                    and entry.name != "site-packages"
                    and entry.name != "dist-packages"
                ):
                    _add(tar, entry, f"usr/lib/python3.11/{entry.name}")
            for lib in sorted(_libraries(binaries)):
                _add(tar, Path(os.path.realpath(lib)), str(lib).lstrip("/"))
            for s in site:
                _add(tar, s, f"{SITE}/{s.name}")
            _add(tar, SRC, f"{SITE}/vllm_station")
            _add(tar, HERE / "image" / "vllm_serve.py", "opt/shim/vllm_serve.py")
            for d in ("tmp", "var/tmp"):
                ti = tarfile.TarInfo(d)
                ti.type = tarfile.DIRTYPE
                ti.mode = 0o1777
                tar.addfile(ti)
        local = f"localhost/station-sim:{tag}"
        with archive.open("rb") as f:
            podman(
                "import",
                "--change",
                'ENTRYPOINT ["/usr/bin/python3.11", "/opt/shim/vllm_serve.py"]',
                "--change",
                "ENV PYTHONDONTWRITEBYTECODE=1",
                "-",
                local,
                input=f.read(),
            )
        podman(
            "push",
            "--tls-verify=false",
            local,
            f"docker://{registry.address}/station-sim:{tag}",
        )
        digest = registry.digest_of("station-sim", tag)
        archive.unlink()
        if digest is None:
            raise AssertionError(
                f"pushed station-sim:{tag} but the registry serves no digest for it"
            )
    return f"{registry.address}/station-sim@{digest}"


def clean(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
