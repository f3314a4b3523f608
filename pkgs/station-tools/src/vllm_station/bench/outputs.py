"""Where a bench run's results go, checked before the first request and written so none is lost.

`check_file()` / `check_dir()` run before anything is sent: a `--json`/`--csv` file or a `--plots` /
`--save-responses` directory that could not be written then is a usage error (exit 2) now, naming the
option and the reason. The check creates nothing that stays: it opens an existing file for appending
(without writing) or creates and removes a probe file in the directory that will hold the output.

`write_outputs()` writes every requested output after the run (or after Ctrl-C, with the levels that
finished). One output failing (a disk that filled up meanwhile) does not stop the others; the report is
then also saved to a file in the temporary directory, and the failure is an error naming both.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from vllm_station.errors import StationError, UsageError

log = logging.getLogger("vllm_station.bench")


def _probe_dir(option: str, target: Path, directory: Path) -> None:
    try:
        fd, probe = tempfile.mkstemp(prefix=".station-bench-probe-", dir=directory)
    except OSError as exc:
        raise UsageError(
            f"{option} {target}: cannot write in {directory} ({exc.strerror or exc}); nothing was sent"
        ) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def check_file(option: str, path: Path) -> None:
    """`path` can be written as a file: an existing regular file or character device we may write, or a
    new name in an existing, writable directory."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # ENOTDIR: a parent is a file; ELOOP; EACCES
        raise UsageError(f"{option} {path}: {exc.strerror or exc}; nothing was sent") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{option} {path}: is a directory; give a file name")
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode)):
            raise UsageError(f"{option} {path}: not a regular file (a FIFO or socket); give a file name")
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC))
        except OSError as exc:
            raise UsageError(f"{option} {path}: cannot write it ({exc.strerror or exc})") from None
        return
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(
            f"{option} {path}: the directory {parent} does not exist; create it first (nothing was sent)"
        )
    _probe_dir(option, path, parent)


def check_dir(option: str, path: Path) -> None:
    """`path` is, or can be created as, a writable directory (its nearest existing ancestor is probed)."""
    probe = path
    while True:
        try:
            st = os.stat(probe)
        except FileNotFoundError:
            if probe.parent == probe:
                raise UsageError(f"{option} {path}: no existing directory above it") from None
            probe = probe.parent
            continue
        except OSError as exc:
            raise UsageError(f"{option} {path}: {exc.strerror or exc}; nothing was sent") from None
        break
    if not stat.S_ISDIR(st.st_mode):
        what = "is not a directory" if probe == path else f"cannot be created: {probe} is not a directory"
        raise UsageError(f"{option} {path}: {what}")
    _probe_dir(option, path, probe)


def check_plots_backend() -> None:
    """`--plots` needs matplotlib: say so before the run, not after it."""
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--plots needs matplotlib, which is not installed; drop --plots or install it")


@dataclass
class Written:
    paths: list[Path] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def write_file(path: Path, text: str, written: Written, option: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        written.failed.append(f"{option} {path}: {exc.strerror or exc}")
    else:
        written.paths.append(path)


def rescue(json_text: str, written: Written) -> None:
    """After a failed write: keep the report in a temporary file and raise, naming both."""
    try:
        fd, name = tempfile.mkstemp(prefix="station-bench-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json_text)
        kept = f"; the JSON report was saved to {name}"
    except OSError as exc:
        kept = f"; the report could not be saved elsewhere either ({exc.strerror or exc})"
    raise StationError("could not write " + "; ".join(written.failed) + kept)
