"""Where a bench run's results go, checked before the first request and written so none is lost.

`check_file()` / `check_dir()` run before anything is sent: a `--json`/`--csv` file or a `--plots` /
`--save-responses` directory that could not be written then is a usage error (exit 2) now, naming the
option and the reason (the checks are `vllm_station.output`'s, shared by every command).

`write_outputs()` writes every requested output after the run (or after Ctrl-C, with the levels that
finished). One output failing (a disk that filled up meanwhile) does not stop the others; the report is
then also saved to a file in the temporary directory, and the failure is an error naming both.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass, field
from pathlib import Path

from vllm_station import output
from vllm_station.errors import StationError, UsageError

log = logging.getLogger("vllm_station.commands.bench")

check_file = output.check_file  # the shared checks, under the names bench has always called
check_dir = output.check_dir


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
        output.write_text(path, text, option=option)
    except output.OutputError as exc:
        written.failed.append(str(exc))
    else:
        written.paths.append(path)


def rescue(json_text: str, written: Written) -> None:
    """After a failed write: keep the report in a temporary file and raise, naming both."""
    kept = output.rescue(json_text, "station-bench-")
    raise StationError("could not write " + "; ".join(written.failed) + "; " + kept)
