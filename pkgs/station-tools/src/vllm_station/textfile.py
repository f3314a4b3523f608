"""The one writer of node_exporter textfile-collector files (`*.prom`): probe, watchdog, prestart, preflight,
nccl-check.

node_exporter's textfile collector (`--collector.textfile.directory=DIR`) reads every `DIR/*.prom` at each
scrape. A reader must never see half a file, so `write` renders the whole exposition, writes it to a
temporary file in the same directory (its name does not end in `.prom`, so the collector ignores it),
makes it world-readable (node_exporter runs as its own user; the units' UMask is 0077) and renames it
over the target: the rename is atomic on one filesystem. No fsync: the files are rewritten every look or
probe, and a reader needs only the rename's atomicity.

The directory is a contract with the NixOS module (modules/lib/contract.nix `textfileDir`, pinned equal to
`DEFAULT_DIR` by checks/test_monitoring_rules.py); `$STATION_TEXTFILE_DIR` overrides it (tests, a station
laid out differently). prestart and preflight export their page-cache figures only where that directory
exists (`services.vllm-station.monitoring` creates it): without monitoring they write nothing.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_station import bounded, output
from vllm_station.errors import StationError, UsageError

log = logging.getLogger(__name__)

DEFAULT_DIR = Path("/var/lib/vllm-station-metrics")  # modules/lib/contract.nix: textfileDir
DIR_ENV = "STATION_TEXTFILE_DIR"
FILE_MODE = 0o644  # node_exporter reads it as another user

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\.prom")
TYPES = ("gauge", "counter", "untyped")

# The page-cache figures prestart and preflight export (one family set, one HELP text per name).
PAGE_CACHE_FILE = "station-page-cache-{source}.prom"
PAGE_CACHE_SOURCES = ("prestart", "preflight")


class TextfileError(StationError):
    """A textfile could not be written (the message names the file and the error)."""


@dataclass(frozen=True)
class Sample:
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Family:
    """One metric family: `# HELP`, `# TYPE`, then its samples."""

    name: str
    help: str
    type: str
    samples: tuple[Sample, ...]

    @classmethod
    def one(cls, name: str, help_text: str, value: float, type_: str = "gauge", **labels: str) -> Family:
        return cls(name, help_text, type_, (Sample(value, labels),))


def default_dir() -> Path:
    value = os.environ.get(DIR_ENV)
    return Path(value) if value else DEFAULT_DIR


def _value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if float(v).is_integer() and abs(v) < 2**53:
        return str(int(v))
    return repr(float(v))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def render(families: Iterable[Family]) -> str:
    """The Prometheus text exposition of `families` (names and labels checked: a bad one is a UsageError)."""
    out: list[str] = []
    seen: set[str] = set()
    for fam in families:
        if not _METRIC_NAME.fullmatch(fam.name):
            raise UsageError(f"textfile: {fam.name!r} is not a Prometheus metric name")
        if fam.name in seen:
            raise UsageError(f"textfile: metric family {fam.name} given twice")
        if fam.type not in TYPES:
            raise UsageError(f"textfile: {fam.name}: type {fam.type!r} is not one of {', '.join(TYPES)}")
        seen.add(fam.name)
        out.append(f"# HELP {fam.name} {_help(fam.help)}")
        out.append(f"# TYPE {fam.name} {fam.type}")
        for s in fam.samples:
            for key in s.labels:
                if not _LABEL_NAME.fullmatch(key) or key.startswith("__"):
                    raise UsageError(f"textfile: {fam.name}: {key!r} is not a label name")
            labels = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(s.labels.items()))
            out.append(
                f"{fam.name}{{{labels}}} {_value(s.value)}" if labels else f"{fam.name} {_value(s.value)}"
            )
    return "\n".join(out) + "\n"


def write(directory: Path, name: str, families: Iterable[Family]) -> Path:
    """Replace `directory/name` (a `*.prom` file name) with the exposition of `families`, atomically."""
    if not _FILE_NAME.fullmatch(name):
        raise UsageError(f"textfile: {name!r} must be a plain file name ending in .prom")
    text = render(families)
    target = directory / name
    try:
        output.replace_text(target, text, option="textfile", mode=FILE_MODE)
    except output.OutputError as err:
        raise TextfileError(f"cannot write {target}: {err}") from None
    return target


def write_if_present(directory: Path, name: str, families: Iterable[Family]) -> Path | None:
    """`write` when `directory` exists (monitoring is on); None without writing when it does not.

    Never raises: a metrics file must not fail the start it describes. A failed write is logged.
    """
    if not directory.is_dir():
        log.debug("no textfile directory %s: metrics not exported", directory)
        return None
    try:
        return write(directory, name, families)
    except StationError as err:
        log.warning("%s", err)
        return None


def page_cache_families(source: str, details: Mapping[str, Any], now: float) -> list[Family]:
    """The page-cache figures of one check (`details`: node, file_pages_bytes, threshold_bytes, cdmm)."""
    if source not in PAGE_CACHE_SOURCES:
        raise UsageError(
            f"textfile: page-cache source {source!r} is not one of {', '.join(PAGE_CACHE_SOURCES)}"
        )
    labels = {"source": source, "node": str(details.get("node", ""))}
    fams = [
        Family(
            "station_page_cache_gpu_memory_numa",
            "1 when the GPU's memory is a NUMA node (the page-cache trap can occur), 0 under CDMM",
            "gauge",
            (Sample(0.0 if details.get("cdmm") else 1.0, labels),),
        ),
        Family(
            "station_page_cache_check_timestamp_seconds",
            "When prestart/preflight last read the GPU node's FilePages (Unix time)",
            "gauge",
            (Sample(now, labels),),
        ),
    ]
    threshold = details.get("threshold_bytes")
    if isinstance(threshold, int | float):
        fams.append(
            Family(
                "station_page_cache_threshold_bytes",
                "FilePages above which prestart refuses the start / preflight fails",
                "gauge",
                (Sample(float(threshold), labels),),
            )
        )
    pages = details.get("file_pages_bytes")
    if isinstance(pages, int | float):
        fams.append(
            Family(
                "station_page_cache_file_pages_bytes",
                "FilePages of the GPU's NUMA node (page cache in HBM) at the last prestart/preflight",
                "gauge",
                (Sample(float(pages), labels),),
            )
        )
    return fams


def export_page_cache(source: str, details: Mapping[str, Any], directory: Path | None = None) -> Path | None:
    """prestart's and preflight's one call: their page-cache figures, where monitoring is on. Never raises."""
    try:
        fams = page_cache_families(source, details, time.time())
    except StationError as err:
        log.warning("%s", err)
        return None
    return write_if_present(directory or default_dir(), PAGE_CACHE_FILE.format(source=source), fams)


NCCL_FILE = "station-nccl.prom"
NCCL_VERDICTS = ("pass", "warn", "fail", "pending")


def export_nccl_transport(verdict: str, directory: Path | None = None) -> Path | None:
    """`station nccl-check`'s one call: its verdict (PASS/WARN/FAIL/PENDING), where monitoring is on."""
    v = verdict.lower()
    fams = [
        Family(
            "station_nccl_transport_verdict",
            "The last nccl-check verdict on the pair's NCCL transport (1 for it, 0 for the others)",
            "gauge",
            tuple(Sample(1.0 if name == v else 0.0, {"verdict": name}) for name in NCCL_VERDICTS),
        ),
        Family.one("station_nccl_check_timestamp_seconds", "When nccl-check last judged", time.time()),
    ]
    return write_if_present(directory or default_dir(), NCCL_FILE, fams)


def read(path: Path) -> dict[str, float]:
    """A textfile read back (tests, `station watchdog --json`): `name{labels}` -> value."""
    out: dict[str, float] = {}
    for line in bounded.read_text(path, limit=bounded.SYSFS_LIMIT).splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        out[key] = float(value)
    return out
