"""The one reader of a unit's state from systemd: `systemctl show --property=… UNIT`, as a dict.

Every verb that asks systemd about a unit (the watchdog's look at the serving unit, the pair's worker
waiting for its head to stop, the after-start checks finding the current start's journal) asks here, so
the bound on the call (`SHOW_TIMEOUT_S`) and the wording of its failures are written once.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

SHOW_TIMEOUT_S = 30.0  # systemd answers `show` from memory; one busy past this is itself the news


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
