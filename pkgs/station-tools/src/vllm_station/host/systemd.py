"""The one home of a verb's calls to systemd: reading a unit's state (`show`: `systemctl show
--property=… UNIT`, as a dict) and asking for a restart, stop or start (`act`: `systemctl ACTION
--no-block UNIT`), with the container kill that ends a stop's wait for an engine that cannot drain
(`end_container_wait`).

Every verb that asks systemd about a unit (the watchdog's look at the serving unit and its restarts, the
pair's worker waiting for its head to stop and restarting itself, the after-start checks finding the
current start's journal) asks here, so the bounds on the calls (`SHOW_TIMEOUT_S`, `ACTION_TIMEOUT_S`) and
the wording of their failures are written once.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

SHOW_TIMEOUT_S = 30.0  # systemd answers `show` from memory; one busy past this is itself the news
ACTION_TIMEOUT_S = 30.0  # a --no-block action is only queued; likewise for the runtime's kill


class SystemctlError(Exception):
    """systemctl could not tell: it is missing (`exit_code` None, `missing` True), did not answer, could
    not run, or exited non-zero (`exit_code`). The message names the command and the cause."""

    def __init__(self, message: str, *, exit_code: int | None = None, missing: bool = False) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.missing = missing


def systemctl_path(systemctl: str | None = None) -> str:
    """`systemctl` as given, else the one on PATH; SystemctlError(missing) when there is none."""
    found = systemctl or shutil.which("systemctl")
    if found is None:
        raise SystemctlError("systemctl not found on PATH", missing=True)
    return found


def show(
    unit: str,
    properties: Sequence[str],
    *,
    systemctl: str | None = None,
    timeout_s: float = SHOW_TIMEOUT_S,
) -> dict[str, str]:
    """The unit's `properties` (`systemctl show --property=A,B -- UNIT`): each name to its value, as
    systemd prints them (a unit systemd does not know has `LoadState=not-found`: the caller decides)."""
    argv = [systemctl_path(systemctl), "show", f"--property={','.join(properties)}", "--", unit]
    shown = " ".join(argv)
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise SystemctlError(f"`{shown}` did not answer within {timeout_s:g} s") from None
    except OSError as err:
        raise SystemctlError(f"cannot run {argv[0]}: {err.strerror or err}") from None
    stdout = proc.stdout.decode("utf-8", errors="replace")
    if proc.returncode != 0:
        stderr = proc.stderr.decode("utf-8", errors="replace").strip()
        message = (stderr.splitlines() or ["no message"])[0][:200]
        raise SystemctlError(f"`{shown}` exited {proc.returncode}: {message}", exit_code=proc.returncode)
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def act(action: str, unit: str, *, systemctl: str | None = None, timeout_s: float = ACTION_TIMEOUT_S) -> str:
    """`systemctl ACTION --no-block UNIT` (restart, stop, start: queued, not waited for; systemd owns the
    sequence). Returns what was asked (`systemctl ACTION --no-block UNIT`); a SystemctlError names the
    command as run and the cause."""
    argv = [systemctl_path(systemctl), action, "--no-block", unit]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SystemctlError(f"{' '.join(argv)}: {err}") from None
    if proc.returncode != 0:
        raise SystemctlError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[:200]}",
                             exit_code=proc.returncode)  # fmt: skip
    return f"systemctl {action} --no-block {unit}"


def end_container_wait(
    done: str, runtime: str | None, container: str | None, why: str, *, timeout_s: float = ACTION_TIMEOUT_S
) -> str:
    """After a stop or restart was asked (`done`): `RUNTIME kill CONTAINER`. The unit's stop lets the
    requests in flight finish for up to vLLM's --shutdown-timeout; an engine that cannot drain (`why`)
    finishes none, so that stop would last the whole timeout: the kill only ends the wait. What happened,
    after `done`; never raised (a kill that fails leaves the unit's own timeouts to end it)."""
    if runtime is None or container is None:
        return done
    argv = [runtime, "kill", container]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{done}; {' '.join(argv)}: {err} (the stop waits for the unit's own timeouts)"
    if proc.returncode != 0:
        return (f"{done}; {' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[:200]} "
                "(the stop waits for the unit's own timeouts)")  # fmt: skip
    return f"{done}, then {' '.join(argv)} ({why})"
