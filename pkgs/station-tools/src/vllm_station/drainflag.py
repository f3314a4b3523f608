"""The drain flags: whether this station's gateways send it new requests (the layer `station drain`,
`station undrain` and `station drain --stopping` share).

Two flag files, read by nginx on every request (`if (-f …)`: no reload, no restart):

* the operator's flag, `DRAIN_FLAG` (`/var/lib/vllm-station-drain/drained`): persistent, so a station
  drained for a reboot comes back drained; `station undrain` removes it;
* the stopping flag, `STOPPING_FLAG` (`/run/vllm-station/stopping`): written by the serving unit's first
  `ExecStop` step before its engine gets SIGTERM; it lies in the unit's RuntimeDirectory, which systemd
  removes when the stop is over, so nothing has to undo it.

While either exists, the gateway on this host (`services.vllm-station.gateway`) and the station listener
(`services.vllm-station.stationListener`, what remote gateways reach) answer every new request, `/health`
included, with 503 and `Retry-After`; requests already proxied are untouched and finish. Both paths are a
contract with the NixOS modules (modules/lib/contract.nix `drainFlag`, `stoppingFlag`), pinned equal by
checks/test_contracts.py. `$STATION_DRAIN_DIR` and `$STATION_STOPPING_FLAG` override them (tests).

A flag holds one JSON object, `{"since": <unix time>, "reason": "…"}`, written whole (a temporary file
renamed over it), mode 0644 (nginx reads only its existence).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from vllm_station import bounded, output
from vllm_station.errors import StationError

DRAIN_DIR = Path("/var/lib/vllm-station-drain")  # modules/lib/contract.nix: drainDir
DRAIN_NAME = "drained"  # contract.drainFlag = drainDir + "/" + this
STOPPING_FLAG = Path("/run/vllm-station/stopping")  # contract.stoppingFlag
DIR_ENV = "STATION_DRAIN_DIR"
STOPPING_ENV = "STATION_STOPPING_FLAG"
MAX_REASON = 200
FLAG_MODE = 0o644


class FlagError(StationError):
    """A flag file could not be written or removed (exit 1); the message names the file."""


def drain_flag() -> Path:
    return Path(os.environ.get(DIR_ENV) or DRAIN_DIR) / DRAIN_NAME


def stopping_flag() -> Path:
    return Path(os.environ.get(STOPPING_ENV) or STOPPING_FLAG)


@dataclass(frozen=True)
class Flag:
    path: str
    present: bool
    since: float | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Status:
    """What the gateway sees: `routed` is false while either flag exists."""

    routed: bool
    drained: Flag
    stopping: Flag
    changed: bool = False


def read_flag(path: Path) -> Flag:
    try:
        text = bounded.read_text(path, limit=4096, errors="replace")
    except FileNotFoundError:
        return Flag(str(path), False)
    except OSError as exc:
        # nginx tests existence; a flag we cannot read still drains
        return Flag(str(path), path.exists(), reason=f"unreadable: {exc.strerror}")
    try:
        data = bounded.loads_json(text)
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    since = data.get("since")
    reason = data.get("reason")
    return Flag(
        str(path),
        True,
        float(since) if isinstance(since, int | float) else None,
        str(reason) if isinstance(reason, str) else None,
    )


def write_flag(path: Path, reason: str, now: float | None = None) -> bool:
    """Write the flag whole; False when it was there already (its first reason and time are kept)."""
    if path.exists():
        return False
    body = json.dumps({"since": time.time() if now is None else now, "reason": reason[:MAX_REASON]})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        output.replace_text(path, body + "\n", option="the flag", mode=FLAG_MODE)
    except OSError as exc:
        raise FlagError(f"cannot write {path}: {exc.strerror or exc}") from None
    return True


def remove_flag(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise FlagError(f"cannot remove {path}: {exc.strerror or exc}") from None
    return True


def status(changed: bool = False) -> Status:
    drained, stopping = read_flag(drain_flag()), read_flag(stopping_flag())
    return Status(not (drained.present or stopping.present), drained, stopping, changed)


def render(st: Status, as_json: bool) -> str:
    if as_json:
        return json.dumps(asdict(st), indent=2)
    lines = ["routed: yes (the gateways send new requests here)" if st.routed
             else "routed: no (new requests get 503; requests in flight finish)"]  # fmt: skip
    for name, flag in (("drained", st.drained), ("stopping", st.stopping)):
        if flag.present:
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(flag.since)) if flag.since else "?"
            lines.append(f"{name}: since {when}: {flag.reason or '-'} ({flag.path})")
        else:
            lines.append(f"{name}: no ({flag.path})")
    return "\n".join(lines)
