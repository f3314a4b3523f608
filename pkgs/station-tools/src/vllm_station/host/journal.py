"""Log sources the after-start checks share (`station nccl-check`, `station weights-check`).

- `read_unit(unit)`: the systemd unit's journal for its current start only (`systemctl show -p
  InvocationID`, then `journalctl _SYSTEMD_INVOCATION_ID=…`), so a previous run's lines never decide
  today's verdict; the whole unit journal when the unit has no current invocation.
- `read_log_file(path)`: a saved log (a container's, a copy of the journal).

Both return text (undecodable bytes replaced) and raise `Unreachable` (exit 3) with an operator's
message when the source cannot be read at all.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from vllm_station import bounded
from vllm_station.errors import Unreachable
from vllm_station.host import systemd

log = logging.getLogger(__name__)

JOURNAL_TIMEOUT_S = 30.0

_JOURNAL_DENIED = re.compile(r"insufficient permissions|not seeing messages from other users", re.IGNORECASE)


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def read_log_file(path: Path) -> str:
    """The file's text (its last `bounded.LOG_LIMIT` bytes: the current start is at the end); Unreachable
    (exit 3) when it cannot be read or is not a regular file (`/dev/zero`, a FIFO)."""
    try:
        data, skipped = bounded.read_tail(path, limit=bounded.LOG_LIMIT)
        if skipped:
            log.warning("%s: reading only its last %d MiB", path, bounded.LOG_LIMIT // bounded.MiB)
        return decode(data)
    except FileNotFoundError as err:
        raise Unreachable(f"log file {path} does not exist") from err
    except IsADirectoryError as err:
        raise Unreachable(f"{path} is a directory, not a log file") from err
    except OSError as err:
        raise Unreachable(f"cannot read log file {path}: {err.strerror or err}") from err


def _run(argv: list[str], what: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(argv, capture_output=True, timeout=JOURNAL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as err:
        raise Unreachable(
            f"{what} did not answer within {JOURNAL_TIMEOUT_S:.0f} s: {' '.join(argv)}"
        ) from err
    except OSError as err:
        raise Unreachable(f"cannot run {argv[0]}: {err.strerror or err}") from err


def invocation_id(unit: str) -> str | None:
    """The unit's current invocation (`systemctl show --property=InvocationID,LoadState -- UNIT`); None if
    unknown (no systemctl here, or it refused to say).

    A unit systemd does not know (`LoadState=not-found`) is Unreachable: its empty journal must not read
    as "no transport line yet" (PENDING)."""
    try:
        props = systemd.show(unit, ["InvocationID", "LoadState"])
    except systemd.SystemctlError as err:
        if err.missing or err.exit_code is not None:
            return None
        raise Unreachable(str(err)) from err
    if props.get("LoadState") == "not-found":
        raise Unreachable(
            f"systemd has no unit {unit} (LoadState=not-found): check the name (systemctl status {unit})"
        )
    value = props.get("InvocationID", "").strip()
    return value if re.fullmatch(r"[0-9a-f]{32}", value) else None


def journal_argv(journalctl: str, unit: str, invocation: str | None) -> list[str]:
    if invocation:  # only the lines of the current start, not a previous run's
        return [journalctl, f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "cat", "--no-pager"]
    return [journalctl, "-u", unit, "-o", "cat", "--no-pager"]


def read_unit(
    unit: str, all_invocations: bool = False, *, command: str, stdin: bool = False
) -> tuple[str, str]:
    """The unit's journal text (current invocation unless `all_invocations`) and a source label.
    Unreachable (exit 3) when the journal cannot be read; `command` (e.g. "nccl-check") names the
    station command in the hints, `stdin` whether it also reads the log from `-`."""
    journalctl = shutil.which("journalctl")
    if journalctl is None:
        instead = (
            f"`journalctl -u {unit} -o cat | station {command} -` or --log FILE"
            if stdin
            else f"`journalctl -u {unit} -o cat > FILE`, then `station {command} --log FILE`"
        )
        raise Unreachable(
            f"journalctl not found on PATH, so the journal of {unit} cannot be read; "
            f"pass the log instead: {instead}"
        )
    invocation = None if all_invocations else invocation_id(unit)
    argv = journal_argv(journalctl, unit, invocation)
    proc = _run(argv, "journalctl")
    err = decode(proc.stderr).strip()
    if _JOURNAL_DENIED.search(err):
        raise Unreachable(
            f"journalctl cannot show the system journal to this user ({err.splitlines()[0]}); run as root, "
            f"add the user to group systemd-journal, or in a unit use `ExecStartPost=+station {command} …`"
        )
    if proc.returncode != 0:
        raise Unreachable(f"journalctl failed (exit {proc.returncode}): {err[:300] or 'no message'}")
    label = f"unit {unit}" + (f" (invocation {invocation})" if invocation else "")
    return decode(proc.stdout), label


def log_reader(
    unit: str | None, log_file: Path | None, *, all_invocations: bool, command: str, stdin: bool = False
) -> Callable[[], tuple[str, str]]:
    """What `--unit UNIT` or `--log FILE` names (exactly one), read again at each call: (text, label).
    The verbs that judge a log (nccl-check, weights-check) poll it through this."""
    if unit is not None:
        return lambda: read_unit(unit, all_invocations, command=command, stdin=stdin)
    assert log_file is not None, "give --unit or --log"
    path = log_file
    return lambda: (read_log_file(path), f"file {path}")
