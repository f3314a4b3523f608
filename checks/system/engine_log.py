"""Why a real vLLM engine died under a booted station: read from its journal and its container's state.

A vLLM CPU engine runs three processes (API server, EngineCore, worker). When the worker dies, the
EngineCore's reads are cancelled (`shm_broadcast … RuntimeError: cancelled`), the API server answers
500 (`EngineDeadError`) and exits — the last lines then say nothing of the first death. These helpers
find the first cause in the whole log, so a failure message names it: the worker's exit code and
signal, an OOM kill of the container, or the engine's own error.
"""

from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass
from pathlib import Path

MEMORY_CGROUP = Path("/sys/fs/cgroup/memory")

# vLLM 0.32: v1/executor/multiproc_executor.py and v1/engine/utils.py
_WORKER_DIED = re.compile(r"Worker proc (\S+) died unexpectedly \(exit code: (-?\d+)\)")
_ENGINE_SIGNS = ("EngineDeadError", "RuntimeError: cancelled", "Engine core initialization failed")


@dataclass(frozen=True)
class EngineDeath:
    reason: str  # one line: what died and how
    signal: str | None  # "SIGKILL", … when a process was killed by one
    log: str  # the whole journal the reason was read from


def signal_name(exit_code: int) -> str | None:
    """multiprocessing's exit code −N (killed by signal N), or a shell-style 128+N, as a signal name."""
    number = -exit_code if exit_code < 0 else exit_code - 128 if 128 < exit_code < 160 else 0
    try:
        return signal.Signals(number).name if number else None
    except ValueError:
        return f"signal {number}"


def engine_death(journal: str, container_state: str = "") -> EngineDeath | None:
    """How the engine died, or None when the journal shows no engine death (a failure of another kind).

    `container_state` is `docker inspect --format '{{json .State}}'` of the serving container ("" if none).
    """
    state = _json_object(container_state)
    causes: list[str] = []
    sig: str | None = None
    worker = _WORKER_DIED.search(journal)
    if worker is not None:
        code = int(worker.group(2))
        sig = signal_name(code)
        causes.append(f"worker {worker.group(1)} died with exit code {code}" + (f" ({sig})" if sig else ""))
    if state.get("OOMKilled") is True:
        causes.append("the container was OOM-killed")
        sig = sig or "SIGKILL"
    signs = [s for s in _ENGINE_SIGNS if s in journal]
    if not causes and not signs:
        return None
    if signs:
        causes.append("the engine reported " + ", ".join(signs))
    code = state.get("ExitCode")
    if isinstance(code, int) and code:
        causes.append(f"the container exited {code}" + (f" ({signal_name(code)})" if signal_name(code) else ""))
    return EngineDeath("; ".join(causes), sig, journal)


def machine_memory(machine: str, root: Path = MEMORY_CGROUP) -> str:
    """The memory cgroups' own figures for a station machine (its cap) and its runtime's containers."""
    lines = []
    for group in (root / f"station-system-{machine}", root / f"station-{machine}"):
        if not group.is_dir():
            lines.append(f"memory cgroup {group}: absent")
            continue
        values = {
            name: _read(group / f"memory.{name}")
            for name in ("limit_in_bytes", "max_usage_in_bytes", "failcnt")
        }
        oom = dict(line.split(maxsplit=1) for line in _read(group / "memory.oom_control").splitlines() if " " in line)
        lines.append(
            f"memory cgroup {group}: limit {_mib(values['limit_in_bytes'])}, peak {_mib(values['max_usage_in_bytes'])}, "
            f"failcnt {values['failcnt'] or '?'}, oom_kill {oom.get('oom_kill', '?')}"
        )
    return "\n".join(lines)


def _json_object(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _mib(value: str) -> str:
    return f"{int(value) // 2**20} MiB" if value.isdigit() and int(value) < 2**60 else "none" if value else "?"
