"""checks/system/engine_log.py: the first cause of a real vLLM engine's death, read from a whole journal."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from system.common import require_tools
from system.engine_log import engine_death, machine_memory, signal_name

# The shape of a CPU engine dying at its first request under a station's unit (vLLM 0.32's own lines).
DIED = """\
(APIServer pid=1) INFO 12-01 16:18:01 [api_server.py:1] Starting vLLM API server 0 on http://127.0.0.1:8899
(EngineCore pid=26) ERROR 12-01 16:19:41 [multiproc_executor.py:316] Worker proc VllmWorker-0 died unexpectedly (exit code: -9), shutting down executor.
(EngineCore pid=26) ERROR 12-01 16:19:41 [core.py:1] File "vllm/distributed/device_communicators/shm_broadcast.py", in acquire_read
(EngineCore pid=26) ERROR 12-01 16:19:41 [core.py:1] RuntimeError: cancelled
(APIServer pid=1) ERROR 12-01 16:19:41 [async_llm.py:1] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.
INFO:     127.0.0.1:46148 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error
"""
TIMEOUT = """\
(APIServer pid=1) INFO 12-01 16:18:01 [api_server.py:1] Starting vLLM API server 0 on http://127.0.0.1:8899
not ready after 600.0 s (120 tries): /health: connection refused
"""


@pytest.mark.parametrize(
    ("code", "name"),
    [(-9, "SIGKILL"), (-11, "SIGSEGV"), (-4, "SIGILL"), (-7, "SIGBUS"), (137, "SIGKILL"), (139, "SIGSEGV"),
     (0, None), (1, None), (128, None), (160, None), (-64, "SIGRTMAX"), (-65, "signal 65")],
)  # fmt: skip
def test_signal_name(code: int, name: str | None) -> None:
    assert signal_name(code) == name


def test_a_worker_killed_by_a_signal_is_the_first_cause() -> None:
    death = engine_death(DIED, json.dumps({"Status": "exited", "ExitCode": 1, "OOMKilled": False}))
    assert death is not None
    assert death.reason == (
        "worker VllmWorker-0 died with exit code -9 (SIGKILL); "
        "the engine reported EngineDeadError, RuntimeError: cancelled; the container exited 1"
    )
    assert death.signal == "SIGKILL" and death.log == DIED


def test_an_oom_killed_container_is_named_even_when_the_log_was_cut() -> None:
    death = engine_death(TIMEOUT, json.dumps({"ExitCode": 137, "OOMKilled": True}))
    assert death is not None
    assert death.reason == "the container was OOM-killed; the container exited 137 (SIGKILL)"
    assert death.signal == "SIGKILL"


def test_the_engine_error_alone_is_a_death_without_a_signal() -> None:
    death = engine_death(DIED.replace("(exit code: -9)", "(exit code: 1)"), "")
    assert death is not None and death.signal is None
    assert death.reason.startswith("worker VllmWorker-0 died with exit code 1; the engine reported EngineDeadError")


@pytest.mark.parametrize("state", ["", "not json", "[]", json.dumps({"ExitCode": 0, "OOMKilled": False})])
def test_no_engine_death_is_none(state: str) -> None:
    """A start that timed out, or failed otherwise, is not taken for an environmental death."""
    assert engine_death(TIMEOUT, state) is None


def test_machine_memory_reads_each_group(tmp_path: Path) -> None:
    group = tmp_path / "station-system-cpu"
    group.mkdir()
    (group / "memory.limit_in_bytes").write_text(f"{8 << 30}\n")
    (group / "memory.max_usage_in_bytes").write_text(f"{5 << 30}\n")
    (group / "memory.failcnt").write_text("3\n")
    (group / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    text = machine_memory("cpu", tmp_path)
    assert text.splitlines() == [
        f"memory cgroup {group}: limit 8192 MiB, peak 5120 MiB, failcnt 3, oom_kill 2",
        f"memory cgroup {tmp_path / 'station-cpu'}: absent",
    ]
    (group / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # cgroup v1's "no limit"
    assert ": limit none, peak 5120 MiB" in machine_memory("cpu", tmp_path)


@pytest.mark.parametrize("cache", ["/tmp/cache", "/var/tmp/x/y"])
def test_a_cache_the_machines_cannot_see_is_refused_with_the_fix(cache: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("require_tools skips first without root")
    with pytest.raises(pytest.fail.Exception, match=r"replaces with its own tmpfs.*use a directory elsewhere"):
        require_tools(Path(cache))
