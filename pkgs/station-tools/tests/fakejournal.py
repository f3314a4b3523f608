"""A stand-in for `journalctl` and `systemctl show` on PATH, for the verbs that read a unit's journal
(nccl-check, weights-check): it records each call and answers from environment variables.

    bindir = install(tmp_path, monkeypatch)     # PATH is bindir; calls go to tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_JOURNAL", log)     # what journalctl prints
    monkeypatch.setenv("FAKE_INVOCATION", id)   # systemctl's InvocationID ("" : the unit is not running)
    monkeypatch.setenv("FAKE_LOADSTATE", "not-found")   # default "loaded"
    monkeypatch.setenv("FAKE_DENIED", "1")      # journalctl's hint that this user sees no system journal
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

FAKE_TOOL = """#!{python}
import os, sys
with open(os.environ["FAKE_CALLS"], "a") as f:
    f.write(os.path.basename(sys.argv[0]) + " " + " ".join(sys.argv[1:]) + "\\n")
name = os.path.basename(sys.argv[0])
if name == "systemctl":
    print("InvocationID=" + os.environ.get("FAKE_INVOCATION", ""))
    print("LoadState=" + os.environ.get("FAKE_LOADSTATE", "loaded"))
    sys.exit(0)
if os.environ.get("FAKE_DENIED"):
    sys.stderr.write("Hint: You are currently not seeing messages from other users and the system.\\n")
with open(os.environ["FAKE_JOURNAL"], "rb") as f:
    sys.stdout.buffer.write(f.read())
"""


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`journalctl` and `systemctl` in tmp_path/bin, the only directory on PATH; calls logged to
    tmp_path/calls.log (empty at first). Returns the bin directory."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("journalctl", "systemctl"):
        path = bindir / name
        path.write_text(FAKE_TOOL.format(python=sys.executable))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    calls = tmp_path / "calls.log"
    calls.write_text("")
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    return bindir
