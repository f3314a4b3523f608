"""`station drain` / `station undrain` on real files: the flags nginx tests (their existence), their JSON, the
status, and the errors an operator sees. What nginx does with them: checks/test_gateway_drain.py."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_station import drainflag


def station(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        drainflag.DIR_ENV: str(tmp_path / "drain"),
        drainflag.STOPPING_ENV: str(tmp_path / "run" / "stopping"),
    }
    return subprocess.run([sys.executable, "-m", "vllm_station", *args], env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def test_drain_writes_the_flag_whole_and_undrain_removes_it(tmp_path: Path) -> None:
    out = station(tmp_path, "drain", "--reason", "kernel update", "--json")
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    flag = tmp_path / "drain" / "drained"
    assert status == {
        "routed": False,
        "changed": True,
        "drained": {"path": str(flag), "present": True, "since": status["drained"]["since"],
                    "reason": "kernel update"},
        "stopping": {"path": str(tmp_path / "run" / "stopping"), "present": False, "since": None,
                     "reason": None},
    }  # fmt: skip
    assert stat.S_IMODE(flag.stat().st_mode) == 0o644  # nginx's workers test it as another user
    assert json.loads(flag.read_text())["reason"] == "kernel update"
    assert [p.name for p in flag.parent.iterdir()] == ["drained"]  # no temporary file left

    again = json.loads(station(tmp_path, "drain", "--reason", "other", "--json").stdout)
    assert again["changed"] is False and again["drained"]["reason"] == "kernel update"
    assert again["drained"]["since"] == status["drained"]["since"]

    out = station(tmp_path, "undrain", "--json")
    assert out.returncode == 0, out.stderr
    back = json.loads(out.stdout)
    assert back["routed"] is True and back["changed"] is True and not flag.exists()
    assert json.loads(station(tmp_path, "undrain", "--json").stdout)["changed"] is False


def test_the_stopping_flag_is_not_the_operators(tmp_path: Path) -> None:
    out = station(tmp_path, "drain", "--stopping")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "run" / "stopping").exists()
    assert not (tmp_path / "drain" / "drained").exists()
    assert "routed: no" in out.stdout and "stopping: since" in out.stdout
    out = station(tmp_path, "undrain")
    assert out.returncode == 0
    assert (tmp_path / "run" / "stopping").exists(), "undrain leaves the serving unit's flag to systemd"
    assert "the serving unit is stopping" in out.stderr


def test_status_changes_nothing_and_reads_any_flag(tmp_path: Path) -> None:
    out = station(tmp_path, "drain", "--status")
    assert out.returncode == 0 and out.stdout.startswith("routed: yes")
    assert not (tmp_path / "drain").exists()
    # A flag written by hand (touch) drains too: nginx tests existence only.
    (tmp_path / "drain").mkdir()
    (tmp_path / "drain" / "drained").write_text("")
    st = json.loads(station(tmp_path, "drain", "--status", "--json").stdout)
    assert st["routed"] is False and st["drained"]["present"] and st["drained"]["reason"] is None


def test_an_unwritable_flag_directory_is_exit_1_naming_it(tmp_path: Path) -> None:
    (tmp_path / "drain").write_text("a file where the directory should be")
    out = station(tmp_path, "drain")
    assert out.returncode == 1
    assert f"station drain: error: cannot write {tmp_path / 'drain' / 'drained'}" in out.stderr
    assert "Traceback" not in out.stderr


def test_stopping_and_status_are_exclusive(tmp_path: Path) -> None:
    out = station(tmp_path, "drain", "--stopping", "--status")
    assert out.returncode == 2 and "not allowed with" in out.stderr


def test_the_default_paths_are_the_contracts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(drainflag.DIR_ENV, raising=False)
    monkeypatch.delenv(drainflag.STOPPING_ENV, raising=False)
    assert drainflag.drain_flag() == Path("/var/lib/vllm-station-drain/drained")
    assert drainflag.stopping_flag() == Path("/run/vllm-station/stopping")
