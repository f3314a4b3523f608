"""The container runtime (docker or podman) as a command line: logs, remove, image inspect.

A runtime is named `docker` / `podman` (looked up on PATH) or given as an absolute path to one of them
(what the NixOS module renders: a unit's PATH need not hold the runtime). `STATION_RUNTIME_CMD` overrides
the runtime command (a path, or a command line split like a shell
would). "No such container/image" is an answer, not an error; anything else the runtime says with a
non-zero exit is a `RuntimeCommandError` that quotes it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vllm_station import bounded
from vllm_station.errors import StationError, UsageError

RUNTIMES = ("docker", "podman")
ENV_OVERRIDE = "STATION_RUNTIME_CMD"
_NO_CONTAINER = re.compile(r"no such container|no container with (name or id|id or name)", re.IGNORECASE)
_NO_IMAGE = re.compile(r"no such image|image not known|no such object", re.IGNORECASE)


class RuntimeCommandError(StationError):
    """The container runtime could not be run or answered with an error."""


@dataclass(frozen=True)
class Runtime:
    name: str
    argv: tuple[str, ...]
    timeout_s: float = 60.0

    def describe(self) -> str:
        return " ".join(shlex.quote(a) for a in self.argv)

    def run(
        self, args: list[str], stdout: int | object = subprocess.PIPE
    ) -> subprocess.CompletedProcess[bytes]:
        cmd = [*self.argv, *args]
        try:
            return subprocess.run(
                cmd,
                stdout=stdout,  # type: ignore[arg-type]
                stderr=subprocess.STDOUT if stdout is not subprocess.PIPE else subprocess.PIPE,
                timeout=self.timeout_s,
                check=False,
            )
        except FileNotFoundError as err:
            raise RuntimeCommandError(
                f"container runtime {self.argv[0]!r} not found; install {self.name} or set {ENV_OVERRIDE}"
            ) from err
        except PermissionError as err:
            raise RuntimeCommandError(f"container runtime {self.argv[0]!r} is not executable: {err}") from err
        except subprocess.TimeoutExpired as err:
            raise RuntimeCommandError(
                f"`{self.describe()} {' '.join(args)}` did not answer within {self.timeout_s:.0f} s"
            ) from err


def runtime_name(spec: str) -> str:
    """`docker`, `podman`, or an absolute path to either -> its name; anything else is a usage error."""
    name = Path(spec).name if os.sep in spec else spec
    if name not in RUNTIMES or (os.sep in spec and not spec.startswith(os.sep)):
        raise UsageError(
            f"container runtime must be docker, podman or an absolute path to one of them, got {spec!r}"
        )
    return name


def resolve_runtime(spec: str, env: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> Runtime:
    """`docker` / `podman` / `/abs/path/to/docker` (or `STATION_RUNTIME_CMD` when set) as a `Runtime`."""
    name = runtime_name(spec)
    env = os.environ if env is None else env
    override = env.get(ENV_OVERRIDE, "").strip()
    try:
        argv = tuple(shlex.split(override)) if override else (spec,)
    except ValueError as exc:  # an unbalanced quote
        raise UsageError(f"{ENV_OVERRIDE}={override!r}: cannot split it into a command ({exc})") from None
    if not argv:
        raise UsageError(f"{ENV_OVERRIDE} is set but holds no command")
    return Runtime(name=name, argv=argv, timeout_s=timeout_s)


def runtime_available(runtime: Runtime) -> bool:
    binary = runtime.argv[0]
    return Path(binary).is_file() if os.sep in binary else shutil.which(binary) is not None


def _message(output: bytes) -> str:
    text = output.decode("utf-8", errors="replace").strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return " / ".join(lines[-3:])[:500] or "(no output)"


def save_logs(runtime: Runtime, container: str, dest: Path) -> bool:
    """`<runtime> logs <container>` (stdout and stderr, interleaved) into `dest`.

    Returns False (and writes nothing) when the container does not exist."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")
    try:
        with tmp.open("wb") as out:
            proc = runtime.run(["logs", container], stdout=out)
        if proc.returncode != 0:
            output = bounded.read_tail(tmp, limit=4096)[0]
            if _NO_CONTAINER.search(output.decode("utf-8", errors="replace")):
                return False
            raise RuntimeCommandError(
                f"`{runtime.describe()} logs {container}` failed (exit {proc.returncode}): {_message(output)}"
            )
        tmp.replace(dest)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def remove_container(runtime: Runtime, container: str) -> bool:
    """`<runtime> rm -f <container>`; False when there was no such container."""
    proc = runtime.run(["rm", "-f", container])
    out = (proc.stdout or b"") + (proc.stderr or b"")
    if proc.returncode == 0:
        return not _NO_CONTAINER.search(out.decode("utf-8", errors="replace"))
    if _NO_CONTAINER.search(out.decode("utf-8", errors="replace")):
        return False
    raise RuntimeCommandError(
        f"`{runtime.describe()} rm -f {container}` failed (exit {proc.returncode}): {_message(out)}"
    )


@dataclass
class ImageInfo:
    ref: str
    id: str
    repo_digests: list[str]


def inspect_image(runtime: Runtime, ref: str) -> ImageInfo | None:
    """`<runtime> image inspect <ref>`; None when the image is not present locally."""
    proc = runtime.run(["image", "inspect", ref])
    out = (proc.stdout or b"") + (proc.stderr or b"")
    if proc.returncode != 0:
        if _NO_IMAGE.search(out.decode("utf-8", errors="replace")):
            return None
        raise RuntimeCommandError(
            f"`{runtime.describe()} image inspect {ref}` failed (exit {proc.returncode}): {_message(out)}"
        )
    try:
        data = bounded.loads_json(proc.stdout or b"[]")
        first = data[0] if isinstance(data, list) else data
        return ImageInfo(
            ref=ref,
            id=str(first.get("Id", "")),
            repo_digests=[str(d) for d in first.get("RepoDigests") or []],
        )
    except (ValueError, IndexError, AttributeError, TypeError) as err:
        raise RuntimeCommandError(
            f"`{runtime.describe()} image inspect {ref}` printed something that is not image JSON: "
            f"{_message(proc.stdout or b'')}"
        ) from err
