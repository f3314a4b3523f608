"""`station exec --secret-env NAME=FILE … -- CMD ARGS…`: put secrets from files into CMD's environment.

The serving unit's ExecStart: systemd hands the API key to the unit as a credential file
(`LoadCredential=api-key:…`, read at `%d/api-key`); vLLM (and the container runtime's client, which
forwards it with `--env VLLM_API_KEY`) wants it in the environment. The key never appears in the unit,
the Nix store or any argument list, and it is never printed: messages name the variable and the file.

The file holds the value only; one trailing newline (and surrounding whitespace) is dropped. An empty
value, a value over 64 KiB, one with a line break inside or a NUL byte is refused.
Exit codes: CMD's own once it runs; 2 for a bad NAME=FILE or an unreadable/unusable file; 127 when CMD
is not found; 126 when it cannot be executed.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from vllm_station import bounded, process
from vllm_station.errors import UsageError

MAX_SECRET_BYTES = 64 * 1024
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--secret-env",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="set NAME to the contents of FILE (repeatable), e.g. VLLM_API_KEY=%%d/api-key under systemd",
    )
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to run")


def parse_spec(spec: str) -> tuple[str, Path]:
    name, sep, file = spec.partition("=")
    if not sep or not file:
        raise UsageError(f"--secret-env wants NAME=FILE, got {spec!r}")
    if not NAME.fullmatch(name):
        raise UsageError(f"--secret-env: {name!r} is not an environment variable name")
    return name, Path(file)


def read_secret(name: str, path: Path) -> str:
    """The value in `path`; errors name the variable and the file, never the contents."""
    try:
        with bounded.open_regular(path) as f:
            data = f.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {name} from {path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_SECRET_BYTES:
        raise UsageError(
            f"{name}: {path} is larger than {MAX_SECRET_BYTES // 1024} KiB; it should hold the value only"
        )
    try:
        value = data.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise UsageError(f"{name}: {path} is not UTF-8 text") from exc
    if not value:
        raise UsageError(f"{name}: {path} is empty")
    if "\n" in value or "\r" in value or "\0" in value:
        raise UsageError(f"{name}: {path} holds more than one line; it should hold the value only")
    return value


def run(args: argparse.Namespace) -> int:
    command = process.strip_separator(list(args.cmd), "station exec --secret-env NAME=FILE -- CMD ARGS…")
    if not args.secret_env:
        raise UsageError("nothing to do: give at least one --secret-env NAME=FILE")
    env = dict(os.environ)
    for spec in args.secret_env:
        name, path = parse_spec(spec)
        env[name] = read_secret(name, path)
    process.find(command)
    process.exec_command(command, env)
    return 1  # not reached: exec_command replaces the process or raises
