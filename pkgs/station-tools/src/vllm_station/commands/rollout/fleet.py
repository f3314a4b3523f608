"""The stations of a rollout, in order: from `--station NAME=HOST` (repeated) or a `--fleet` file.

A fleet file is JSON (`*.json`) or TOML (`*.toml`), one list `stations`, each with `name`, `host` and
optionally `url` (the station's direct base URL as the checks reach it; default `DEFAULT_URL`):

    {"stations": [{"name": "station-a", "host": "10.10.0.1", "url": "http://127.0.0.1:8888"}]}

    [[stations]]
    name = "station-a"
    host = "root@10.10.0.1"

A pair (two stations serving one model with tensor parallelism, `services.vllm-station.pair`) is one entry:
the head's `name`, `host` and `url` (it serves the API), and `worker` with the worker's `name` and `host`.
Both switch together, in the pair's order (docs/rollout.md):

    {"stations": [{"name": "station-a", "host": "10.10.0.1",
                   "worker": {"name": "station-b", "host": "10.10.0.2"}}]}

Every value is checked before anything runs (a UsageError names the option or the file and the key): a
name is what `{flake}#{name}` selects (letters, digits, `_ . -`), a host is what ssh is given (never
starting with `-`: it would be read as an option), names and hosts are unique.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from vllm_station import argtypes, bounded, redact
from vllm_station.errors import UsageError

DEFAULT_URL = "http://127.0.0.1:8000"  # vLLM on the station's loopback at the serve module's default port
FLEET_LIMIT = 1 << 20
KEYS = ("name", "host", "url", "worker")
WORKER_KEYS = ("name", "host")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}")
_HOST = re.compile(r"[A-Za-z0-9_\[][A-Za-z0-9_.:@%\[\]-]{0,252}")


@dataclass(frozen=True)
class Worker:
    """The worker of a pair (rank 1: headless, no URL of its own)."""

    name: str
    host: str


@dataclass(frozen=True)
class Station:
    name: str
    host: str
    url: str
    worker: Worker | None = None  # a pair: the head is this station, the worker switches with it


def _name(text: str, where: str) -> str:
    if not _NAME.fullmatch(text):
        raise UsageError(
            f"{where}: the station name {text!r} must be 1-63 letters, digits, _ . - (it selects "
            "{flake}#NAME), not starting with . or -"
        )
    return text


def _host(text: str, where: str) -> str:
    if not _HOST.fullmatch(text):
        raise UsageError(
            f"{where}: the host {text!r} must be a host name or address, [USER@]HOST (letters, digits and "
            "_ . : @ % [ ] -), not starting with - (ssh would read it as an option)"
        )
    return text


def _url(text: str, where: str) -> str:
    """An http(s) URL; a password in it is registered with the redaction layer (masked in every report)."""
    try:
        password = urlsplit(text.strip()).password
    except ValueError:
        password = None
    if password is not None:  # first, so that no message below can show it
        redact.register(password)
        if len(password) < redact.MIN_SECRET_LEN:
            raise UsageError(
                f"{where}: url: the password in it is shorter than {redact.MIN_SECRET_LEN} characters, too "
                "short to be kept out of output"
            )
    try:
        return argtypes.http_url(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{where}: url {exc}") from None


def station_arg(text: str) -> Station:
    """argparse `type=` for `--station NAME=HOST` (the url is `DEFAULT_URL`)."""
    name, sep, host = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"must be NAME=HOST (e.g. station-a=10.10.0.1), got {text!r}")
    try:
        return Station(_name(name, "--station"), _host(host, "--station"), DEFAULT_URL)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--station: ")) from None


def read_fleet(path: Path) -> list[Station]:
    """The stations of a fleet file, in its order; a UsageError naming the file (and the key) otherwise."""
    where = f"--fleet {path}"
    try:
        text = bounded.read_text(path, limit=FLEET_LIMIT)
    except FileNotFoundError:
        raise UsageError(f"{where}: not found") from None
    except OSError as exc:  # not a regular file, too large, unreadable
        raise UsageError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:  # not UTF-8
        raise UsageError(f"{where}: cannot read it ({exc})") from None
    data: Any
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix == ".json":
            data = bounded.loads_json(text)
        else:
            raise UsageError(f"{where}: the file's name must end in .json or .toml (its format)")
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{where}: cannot read it as {path.suffix[1:].upper()} ({exc})") from None
    if not isinstance(data, dict) or set(data) != {"stations"}:
        raise UsageError(f"{where}: expected one key, stations (a list of {{name, host, url}})")
    entries = data["stations"]
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"{where}: stations must be a non-empty list")
    out = []
    for i, entry in enumerate(entries):
        at = f"{where}: stations[{i}]"
        if not isinstance(entry, dict):
            raise UsageError(f"{at}: must be an object with name, host and url")
        unknown = sorted(set(entry) - set(KEYS))
        if unknown:
            raise UsageError(f"{at}: unknown key {', '.join(unknown)}; the keys: {', '.join(KEYS)}")
        for key in ("name", "host"):
            if not isinstance(entry.get(key), str):
                raise UsageError(f"{at}: {key} must be a string, got {argtypes.json_type(entry.get(key))}")
        url = entry.get("url", DEFAULT_URL)
        if not isinstance(url, str):
            raise UsageError(f"{at}: url must be a string, got {argtypes.json_type(url)}")
        worker = _worker(entry["worker"], f"{at}: worker") if "worker" in entry else None
        out.append(Station(_name(entry["name"], at), _host(entry["host"], at), _url(url, at), worker))
    return out


def _worker(entry: Any, at: str) -> Worker:
    if not isinstance(entry, dict):
        raise UsageError(f"{at}: must be an object with name and host (the pair's worker)")
    unknown = sorted(set(entry) - set(WORKER_KEYS))
    if unknown:
        raise UsageError(f"{at}: unknown key {', '.join(unknown)}; the keys: {', '.join(WORKER_KEYS)}")
    for key in WORKER_KEYS:
        if not isinstance(entry.get(key), str):
            raise UsageError(f"{at}: {key} must be a string, got {argtypes.json_type(entry.get(key))}")
    return Worker(_name(entry["name"], at), _host(entry["host"], at))


def check(stations: list[Station], batch: int) -> None:
    """Unique names and hosts; a batch that leaves at least one station serving."""
    for what in ("name", "host"):
        seen: set[str] = set()
        for st in stations:
            for value in (getattr(st, what), *([getattr(st.worker, what)] if st.worker else [])):
                if value in seen:
                    raise UsageError(f"the station {what} {value!r} is given twice")
                seen.add(value)
    n = len(stations)
    if batch >= n:
        raise UsageError(
            f"--batch {batch}: with {n} station{'s' * (n != 1)} the fleet would have none serving; at most "
            f"{n - 1} (the fleet never has fewer than N-K serving)"
            if n > 1
            else f"--batch {batch}: a rollout needs at least 2 stations, so one serves while another is "
            "upgraded (for one station: drain, switch and golive it by hand)"
        )
