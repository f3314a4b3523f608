"""`station copy rsync://HOST:PORT/MODULE --dir DIR --revision REV`: pull the other station's verified
checkpoint over the rail with rsync, bound to NUMA node 0, then verify it here.

Station A (head) shares its checkpoint read-only with an rsync daemon (`vllm-station-checkpoint-share`,
module = the download entry's name); station B's download unit runs this command. Order of work (each step
fails with an operator message; nothing is marked verified on any failure):

1. Bind this process's memory to ``--membind`` nodes (default 0) *before any I/O*; rsync, started later,
   inherits the policy, so the page cache the copy fills lands in LPDDR, not in the GPU's HBM node.
2. Fetch A's stamp (``.station-verified.json``) alone into a temporary directory inside DIR and read it:
   A unreachable → exit 3; no stamp or an unusable one → exit 1 ("A's copy is not verified"); a stamp of
   another revision → exit 1 naming both.
3. Remove DIR's own stamp, then ``rsync --recursive --times --partial --partial-dir=.rsync-partial
   --delete …`` (the stamp itself excluded) as a filter, not a mirror: no device node, FIFO or socket is
   created, no symlink out of the tree, every mode is 755/644 (no setuid bit from A). Progress lines on
   stderr, SIGTERM/SIGINT stop rsync with its partial file kept in ``.rsync-partial/`` so a rerun resumes
   from it (rsync's delta transfer uses it as the basis).
4. The files in DIR must be exactly A's stamped list (paths and sizes); then the shared verify core runs
   with the expectations and records ``--repo`` (default: A's) and ``--revision`` in DIR's new stamp.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

from vllm_station import checkpoint_args, options
from vllm_station.checkpoint.layout import CONFIG_NAME
from vllm_station.checkpoint.stamp import (
    STAMP_NAME,
    Stamp,
    StampError,
    StampMissing,
    read_stamp,
    remove_stamp,
)
from vllm_station.checkpoint.verification import (
    Expectations,
    VerifyReport,
    failure_message,
    list_files,
    report_text,
    verify_checkpoint,
)
from vllm_station.errors import EXIT_INTERRUPTED, CheckFailed, StationError, Unreachable, UsageError
from vllm_station.report import dump_json

PARTIAL_DIR = ".rsync-partial"
TMP_PREFIX = ".station-copy-"
DEFAULT_PORT = 873  # rsync's own default; the share unit listens on 8730
HEADROOM_BYTES = 16 * 1024 * 1024
PROGRESS_EVERY_S = 5.0  # a progress line at least this often while bytes move …
PROGRESS_EVERY_PCT = 5  # … and at every 5 % step (never more than one a second)
KILL_AFTER_S = 30.0  # rsync still running this long after SIGTERM: SIGKILL (its partial file may be lost)
MIN_RSYNC = (3, 1)  # --info=progress2 and --no-inc-recursive
MODULE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# rsync exit codes (rsync(1) EXIT VALUES)
RSYNC_PROTOCOL_START = 5  # "@ERROR: Unknown module", "@ERROR: access denied"
RSYNC_SOCKET = 10
RSYNC_FILE_IO = 11
RSYNC_STREAM = 12
RSYNC_SIGNAL = 20
RSYNC_PARTIAL = 23
RSYNC_VANISHED = 24
RSYNC_IO_TIMEOUT = 30
RSYNC_CONNECT_TIMEOUT = 35
NETWORK_CODES = frozenset({RSYNC_SOCKET, RSYNC_STREAM, RSYNC_IO_TIMEOUT, RSYNC_CONNECT_TIMEOUT})


class CopyFailed(StationError):
    pass


class CopyInterrupted(StationError):
    exit_code = EXIT_INTERRUPTED


@dataclass(frozen=True)
class Source:
    host: str
    port: int
    module: str

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"rsync://{host}:{self.port}/{self.module}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class TransferStats:
    """rsync's --stats summary (the numbers this command reports)."""

    files: int = 0  # regular files in the source (its stamp excluded)
    bytes: int = 0  # their total size ("Total file size")
    transferred_files: int = 0  # "Number of regular files transferred"
    transferred_file_bytes: int = 0  # "Total transferred file size": the sizes of the files that changed
    literal_bytes: int = 0  # "Literal data": file data sent over the wire
    matched_bytes: int = 0  # "Matched data": data reused from a partial file / the old file in DIR
    deleted_files: int = 0
    received_bytes: int = 0  # "Total bytes received": on the wire, protocol included


@dataclass
class CopyReport:
    source: str
    dir: str
    repo: str | None
    revision: str
    membind: str | None
    source_verified_at: str | None
    source_sha256_checked: bool
    files: int
    bytes: int
    transferred_files: int
    transferred_bytes: int
    resumed_bytes: int
    up_to_date_bytes: int
    deleted_files: int
    received_bytes: int
    copy_seconds: float
    rate_bytes_per_s: float | None
    seconds: float
    verify: VerifyReport | None = None
    warnings: list[str] = field(default_factory=list)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source",
        metavar="rsync://HOST:PORT/MODULE",
        help="the other station's share, e.g. rsync://A:8730/glm53",
    )
    parser.add_argument(
        "--dir", required=True, type=Path, metavar="DIR", help="target directory (the checkpoint here)"
    )
    parser.add_argument(
        "--revision", required=True, metavar="REV", help="the revision A's stamp must record (the commit)"
    )
    parser.add_argument(
        "--repo", metavar="REPO", help="recorded in the new stamp (default: A's stamp's repo)"
    )
    checkpoint_args.add_membind(parser, "this process and rsync")
    checkpoint_args.add_expectations(parser)
    parser.add_argument(
        "--sha256", action="store_true", help="verify: also compare full sha256 with the copied hash record"
    )
    options.add_timeout(
        parser, default=30.0, what="to connect to A's daemon, and the most rsync may go without data"
    )
    parser.add_argument(
        "--bwlimit",
        metavar="RATE",
        help="rsync --bwlimit (e.g. 500M: bytes/s with K/M/G suffixes); default none",
    )
    options.add_json(parser)


def parse_source(text: str) -> Source:
    """rsync://HOST[:PORT]/MODULE[/] (HOST may be [IPv6]). Raises UsageError."""
    usage = f"source {text!r} is not rsync://HOST:PORT/MODULE (e.g. rsync://192.168.100.1:8730/glm53)"
    try:
        parts = urlsplit(text)
        host = parts.hostname  # "[::1" (no closing bracket) raises here or above
    except ValueError as exc:
        raise UsageError(f"{usage}: {exc}") from None
    if (
        parts.scheme != "rsync"
        or not host
        or not parts.hostname
        or parts.query
        or parts.fragment
        or parts.username
    ):
        raise UsageError(usage)
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise UsageError(f"{usage}: bad port") from None
    module = parts.path.strip("/")
    if not MODULE_RE.fullmatch(module):
        raise UsageError(f"{usage}: the path must be just the module name")
    return Source(host=parts.hostname, port=port, module=module)


def _gb(n: float) -> str:
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= div:
            return f"{n / div:,.1f} {unit}"
    return f"{int(n)} B"


def find_rsync() -> str:
    path = shutil.which("rsync")
    if path is None:
        raise CopyFailed(
            f"rsync not found (PATH={os.environ.get('PATH', '')}): install rsync 3.1 or newer "
            "(the NixOS download unit puts it on its path when copyFrom is set)"
        )
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise CopyFailed(f"cannot run {path} --version: {exc}") from exc
    m = re.search(r"version\s+(\d+)\.(\d+)", out)
    if m is None or (int(m.group(1)), int(m.group(2))) < MIN_RSYNC:
        found = f"{m.group(1)}.{m.group(2)}" if m else "an unknown version"
        raise CopyFailed(f"{path} is {found}: station copy needs rsync 3.1 or newer (--info=progress2)")
    return path


def _error_lines(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith(("rsync:", "rsync error:", "@ERROR", "[Receiver]"))]


def _first_error(lines: list[str]) -> str:
    errs = _error_lines(lines) or lines
    return errs[0].strip() if errs else "no message"


def unreachable(source: Source, code: int, lines: list[str]) -> StationError | None:
    """The error for a daemon that cannot be reached or refuses this station, else None."""
    text = "\n".join(lines)
    first = _first_error(lines)
    if code == RSYNC_PROTOCOL_START and "Unknown module" in text:
        return Unreachable(
            f"the rsync daemon at {source.address} has no module {source.module!r} ({first}): the share on A "
            "exports the download entry's name; fix the module in the source URL (copyFrom)"
        )
    if code == RSYNC_PROTOCOL_START and "access denied" in text:
        return Unreachable(
            f"the rsync daemon at {source.address} refuses this station ({first}): A's share allows only "
            "B's rail address (hosts allow); copy over the rail, or fix the peer address in A's share"
        )
    if code in NETWORK_CODES or code == RSYNC_PROTOCOL_START:
        return Unreachable(
            f"cannot reach the rsync daemon at {source.address} ({first}): is "
            f"vllm-station-checkpoint-share running on A (systemctl status vllm-station-checkpoint-share), "
            f"does A's firewall open TCP {source.port} on the rail, is the rail up (ping {source.host})?"
        )
    return None


def fetch_stamp(rsync: str, source: Source, directory: Path, timeout: float) -> Stamp:
    """A's stamp, fetched alone. Raises Unreachable (exit 3) or CopyFailed (exit 1)."""
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=directory))
    try:
        cmd = [rsync, f"--contimeout={int(timeout)}", f"--timeout={int(timeout)}", "--no-motd",
               f"{source.url}/{STAMP_NAME}", f"{tmp}/"]  # fmt: skip
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=3 * timeout + 30)
        except subprocess.TimeoutExpired as exc:
            raise Unreachable(
                f"no answer from the rsync daemon at {source.address} within {3 * timeout + 30:.0f} s: is "
                "vllm-station-checkpoint-share running on A, is the rail up?"
            ) from exc
        lines = (r.stdout + r.stderr).splitlines()
        if r.returncode != 0:
            err = unreachable(source, r.returncode, lines)
            if err is not None:
                raise err
            if "No such file or directory" in r.stderr:
                raise CopyFailed(
                    f"A's copy is not verified: {source.url} has no {STAMP_NAME}; "
                    "run station verify on A first"
                )
            raise CopyFailed(
                f"rsync could not fetch {STAMP_NAME} from {source.url} (exit {r.returncode}): "
                f"{_first_error(lines)}"
            )
        try:
            return read_stamp(tmp / STAMP_NAME)
        except StampMissing as exc:  # e.g. the name is not a regular file on A
            raise CopyFailed(
                f"A's copy is not verified ({exc.problem}): run station verify on A first"
            ) from exc
        except StampError as exc:
            raise CopyFailed(
                f"A's copy is not verified: its {STAMP_NAME} is unusable ({exc.problem}); "
                "run station verify on A first"
            ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_target(directory: Path) -> None:
    """rsync --delete empties DIR of everything A lacks: refuse a non-empty DIR that holds no checkpoint."""
    try:
        names = {p.name for p in directory.iterdir()}
    except OSError as exc:
        raise CopyFailed(f"cannot list {directory}: {exc.strerror or exc}") from exc
    names = {n for n in names if not n.startswith(TMP_PREFIX)}
    known = {CONFIG_NAME, STAMP_NAME, ".station-hashes.json", PARTIAL_DIR, ".cache"}
    if names and not names & known and not any(n.endswith(".safetensors") for n in names):
        shown = ", ".join(sorted(names)[:5])
        raise UsageError(
            f"--dir {directory} is not empty and holds no checkpoint ({shown}…): the copy deletes whatever "
            "the source lacks; pick an empty directory or the checkpoint's own"
        )


def check_space(directory: Path, stamp: Stamp) -> None:
    """The stamped files not already here at their size, plus headroom, must fit in DIR's file system."""
    needed = 0
    for f in stamp.files:
        p = directory / f.path
        with contextlib.suppress(OSError):
            if p.is_file() and p.stat().st_size == f.size:
                continue
        needed += f.size or 0
    free = shutil.disk_usage(directory).free
    if needed + HEADROOM_BYTES > free:
        raise CopyFailed(
            f"not enough disk space in {directory}: A's checkpoint needs {_gb(needed)} more plus "
            f"{HEADROOM_BYTES // 2**20} MiB headroom, only {_gb(free)} free; "
            "free space or choose another --dir"
        )


# ------------------------------------------------------------------------------------------- progress

PROGRESS_RE = re.compile(
    r"^\s*(?P<bytes>[\d,]+)\s+(?P<pct>\d+)%\s+(?P<rate>\S+/s)\s+(?P<time>\d+:\d\d:\d\d)"
    r"(?:\s+\(xfr#(?P<xfr>\d+), (?:to|ir)-chk=(?P<left>\d+)/(?P<total>\d+)\))?\s*$"
)
STATS_RE = {
    "files": re.compile(r"^Number of files: [\d,]+ \(reg: (?P<n>[\d,]+)"),
    "deleted_files": re.compile(r"^Number of deleted files: (?P<n>[\d,]+)"),
    "transferred_files": re.compile(r"^Number of regular files transferred: (?P<n>[\d,]+)"),
    "bytes": re.compile(r"^Total file size: (?P<n>[\d,]+) bytes"),
    "transferred_file_bytes": re.compile(r"^Total transferred file size: (?P<n>[\d,]+) bytes"),
    "literal_bytes": re.compile(r"^Literal data: (?P<n>[\d,]+) bytes"),
    "matched_bytes": re.compile(r"^Matched data: (?P<n>[\d,]+) bytes"),
    "received_bytes": re.compile(r"^Total bytes received: (?P<n>[\d,]+)"),
}
MAX_FORWARDED = 20  # rsync error lines echoed to stderr; the rest are counted


class Progress:
    """Reads rsync's merged stdout/stderr (--info=progress2 --stats): bounded progress lines on stderr,
    the --stats numbers, and the last lines for error messages."""

    def __init__(self, *, every_s: float = PROGRESS_EVERY_S, every_pct: int = PROGRESS_EVERY_PCT) -> None:
        self.every_s = every_s
        self.every_pct = every_pct
        self.stats = TransferStats()
        self.tail: collections.deque[str] = collections.deque(maxlen=200)
        self.lines_printed = 0
        self.forwarded = 0
        self._buf = b""
        self._last_t = time.monotonic()
        self._last_pct = -1
        self._last_bytes = 0
        self._pending: str | None = None

    def feed(self, chunk: bytes) -> None:
        self._buf += chunk
        *parts, self._buf = re.split(rb"[\r\n]", self._buf)
        for raw in parts:
            self._line(raw.decode("utf-8", "replace"))

    def close(self) -> None:
        if self._buf:
            self._line(self._buf.decode("utf-8", "replace"))
            self._buf = b""
        if self._pending is not None:  # the last state rsync reported, when it was not printed yet
            self._emit(self._pending)

    def _emit(self, text: str) -> None:
        print(f"station copy: {text}", file=sys.stderr, flush=True)
        self.lines_printed += 1
        self._pending = None

    def _line(self, line: str) -> None:
        if not line.strip():
            return
        m = PROGRESS_RE.match(line)
        if m is None:
            self.tail.append(line)
            for key, rx in STATS_RE.items():
                sm = rx.match(line)
                if sm:
                    setattr(self.stats, key, int(sm.group("n").replace(",", "")))
            if _error_lines([line]):
                if self.forwarded < MAX_FORWARDED:
                    print(line, file=sys.stderr, flush=True)
                self.forwarded += 1
            return
        nbytes = int(m.group("bytes").replace(",", ""))
        pct = int(m.group("pct"))
        when = f"ETA {m.group('time')}" if m.group("xfr") is None else f"elapsed {m.group('time')}"
        left = f", {m.group('left')}/{m.group('total')} files left to check" if m.group("left") else ""
        text = f"{_gb(nbytes)} ({pct}%) at {m.group('rate')}, {when}{left}"
        if nbytes == self._last_bytes and pct == self._last_pct:
            return
        now = time.monotonic()
        step = pct // self.every_pct > max(self._last_pct, 0) // self.every_pct
        if now - self._last_t >= self.every_s or (step and now - self._last_t >= 1.0):
            self._emit(text)
            self._last_t = now
            self._last_pct = pct
        else:
            self._pending = text
        self._last_bytes = nbytes


# ---------------------------------------------------------------------------------------------- the pull


class _Stop:
    """SIGTERM/SIGINT: while rsync runs, stop it (its partial file is kept); otherwise interrupt Python."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.at = 0.0

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.signum = self.signum or signum
        child = self.child
        if child is not None and child.poll() is None:
            self.at = self.at or time.monotonic()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
            return
        raise KeyboardInterrupt


def pull_command(
    rsync: str, source: Source, directory: Path, timeout: float, bwlimit: str | None
) -> list[str]:
    cmd = [
        rsync,
        # A filter, not a mirror (never -a: it would take devices, FIFOs, owners and setuid modes from A):
        "--recursive", "--times",  # times: a rerun skips complete files by size+mtime
        "--no-devices", "--no-specials",  # no device node, FIFO or socket is ever created here
        "--links", "--safe-links",  # a symlink arrives only when it stays inside the tree
        "--perms", "--chmod=D755,F644",  # every mode set here: no setuid/setgid bit, nothing world-writable
        "--partial", f"--partial-dir={PARTIAL_DIR}",  # an interrupted file is kept there: the next basis
        "--delete",  # files A does not have (another revision's shards) go
        f"--exclude={STAMP_NAME}",  # only verify writes DIR's stamp
        f"--exclude={PARTIAL_DIR}",
        "--exclude=*.incomplete",  # huggingface_hub's dead partial files on A
        "--info=progress2", "--no-inc-recursive",  # one progress line for the whole copy, a true percentage
        "--stats", "--no-motd",
        f"--contimeout={int(timeout)}", f"--timeout={int(timeout)}",
    ]  # fmt: skip
    if bwlimit:
        cmd.append(f"--bwlimit={bwlimit}")
    return [*cmd, f"{source.url}/", f"{directory.absolute()}/"]  # absolute: "a:b/" would name a host


def pull(cmd: list[str], stop: _Stop, progress: Progress) -> int:
    """Run rsync (its own process group, inheriting this process's memory policy); its exit code."""
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             process_group=0)  # fmt: skip
    stop.child = child
    assert child.stdout is not None
    fd = child.stdout.fileno()
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                if stop.at and time.monotonic() - stop.at > KILL_AFTER_S:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(child.pid, signal.SIGKILL)
                if not sel.select(timeout=1.0):
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                progress.feed(chunk)
        progress.close()
        return child.wait()
    finally:
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        child.stdout.close()
        stop.child = None


def pull_failure(source: Source, directory: Path, code: int, progress: Progress) -> StationError:
    lines = list(progress.tail)
    first = _first_error(lines)
    resume = f"run the same command again to resume (partial files kept in {directory / PARTIAL_DIR})"
    if code in NETWORK_CODES:
        return Unreachable(f"the copy from {source.url} was cut off (rsync exit {code}: {first}); {resume}")
    err = unreachable(source, code, lines)
    if err is not None:
        return err
    if any("No space left on device" in ln for ln in lines):
        free = shutil.disk_usage(directory).free
        return CopyFailed(f"disk full in {directory} ({_gb(free)} free now): free space, then {resume}")
    return CopyFailed(f"rsync from {source.url} failed (exit {code}: {first}); {resume}")


def compare_with_stamp(directory: Path, stamp: Stamp) -> None:
    """DIR must hold exactly A's stamped files at their sizes (A's verify already vouched for them)."""
    entries, problems = list_files(directory)
    have = {e.path: e.size for e in entries}
    want = stamp.file_sizes()
    missing = sorted(set(want) - set(have))
    extra = sorted(set(have) - set(want))
    differ = sorted(p for p in set(want) & set(have) if want[p] is not None and want[p] != have[p])
    bad = [f"missing: {', '.join(missing[:5])}"] if missing else []
    bad += [f"not in A's stamp: {', '.join(extra[:5])}"] if extra else []
    bad += [f"size differs from A's stamp: {', '.join(differ[:5])}"] if differ else []
    bad += [f"{p.path}: {p.problem}" for p in problems[:5]]
    if bad:
        raise CopyFailed(
            f"{directory} does not match the file list of A's stamp after the copy ({'; '.join(bad)}): "
            "A's checkpoint changed after it was verified? run station verify on A, then copy again"
        )


# ------------------------------------------------------------------------------------------------- run


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    # 1. the binding comes first: every page this process and rsync cache from here on lands on these nodes
    membind = checkpoint_args.membind(args, "copy")
    if membind:
        print(
            f"station copy: memory bound to {membind} (kernel read-back; rsync inherits it)", file=sys.stderr
        )
    source = parse_source(args.source)
    expect = checkpoint_args.expectations(args)
    if not args.revision.strip():
        raise UsageError("--revision is empty: give the commit A's stamp records")
    if not 1 <= args.timeout <= 3600:
        raise UsageError(f"--timeout must be between 1 and 3600 seconds, got {args.timeout}")
    if args.bwlimit is not None and not re.fullmatch(r"\d+(\.\d+)?[KMGkmg]?", args.bwlimit):
        raise UsageError(f"--bwlimit {args.bwlimit!r}: a rate like 500M, 20000K or 1G")
    stop = _Stop()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
    directory: Path = args.dir
    try:
        return _run(args, source, directory, membind, expect, stop, started)
    except KeyboardInterrupt:
        name = signal.Signals(stop.signum).name if stop.signum else "SIGINT"
        raise CopyInterrupted(
            f"interrupted ({name}) before the copy finished; run again to resume (partial files kept); "
            f"{directory} has no stamp"
        ) from None


def _run(args: argparse.Namespace, source: Source, directory: Path, membind: str | None,
         expect: Expectations, stop: _Stop, started: float) -> int:  # fmt: skip
    rsync = find_rsync()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CopyFailed(f"cannot create {directory}: {exc.strerror or exc}") from exc
    check_target(directory)

    # 2. A's stamp, alone: reachable, verified, the revision asked for
    stamp = fetch_stamp(rsync, source, directory, args.timeout)
    if not stamp.revision:
        raise CopyFailed(
            f"A's copy is not verified for a revision: its stamp records none; run "
            f"station verify --revision {args.revision} on A first"
        )
    if stamp.revision != args.revision:
        raise CopyFailed(
            f"A's stamp ({source.url}) records revision {stamp.revision}, but --revision {args.revision} was "
            "asked for: update A (or this station's revision) so both serve the same commit"
        )
    repo = args.repo or stamp.repo
    print(
        f"station copy: {source.url} holds {stamp.repo or '-'}@{stamp.revision}, verified "
        f"{stamp.verified_at or '-'} ({len(stamp.files)} files, "
        f"{_gb(sum(f.size or 0 for f in stamp.files))})",
        file=sys.stderr,
    )

    # 3. a half-copied directory must never look verified: DIR's stamp goes before rsync touches anything
    try:
        if remove_stamp(directory):
            print(
                f"station copy: removed {directory / STAMP_NAME} (re-verified after the copy)",
                file=sys.stderr,
            )
    except OSError as exc:
        raise CopyFailed(f"cannot remove {directory / STAMP_NAME}: {exc.strerror or exc}") from exc
    check_space(directory, stamp)
    partial = sum(p.stat().st_size for p in (directory / PARTIAL_DIR).rglob("*") if p.is_file()) if (
        directory / PARTIAL_DIR).is_dir() else 0  # fmt: skip
    if partial:
        print(f"station copy: resuming: {_gb(partial)} of partial files from an earlier run", file=sys.stderr)
    progress = Progress()
    t0 = time.monotonic()
    code = pull(pull_command(rsync, source, directory, args.timeout, args.bwlimit), stop, progress)
    copy_seconds = round(time.monotonic() - t0, 3)
    if stop.signum is not None:
        name = signal.Signals(stop.signum).name
        raise CopyInterrupted(
            f"interrupted ({name}); run again to resume (partial files kept in {directory / PARTIAL_DIR}); "
            f"{directory} has no stamp"
        )
    if code != 0:
        raise pull_failure(source, directory, code, progress)

    # 4. exactly A's files, then the shared verify core writes DIR's stamp only when everything passes
    compare_with_stamp(directory, stamp)
    s = progress.stats
    result = verify_checkpoint(directory, expect, sha256=args.sha256, repo=repo, revision=args.revision)
    result.membind = membind if args.sha256 else None
    report = CopyReport(
        source=source.url, dir=str(directory), repo=repo, revision=args.revision, membind=membind,
        source_verified_at=stamp.verified_at, source_sha256_checked=stamp.sha256_checked,
        files=s.files, bytes=s.bytes, transferred_files=s.transferred_files,
        transferred_bytes=s.literal_bytes, resumed_bytes=s.matched_bytes,
        up_to_date_bytes=max(0, s.bytes - s.transferred_file_bytes), deleted_files=s.deleted_files,
        received_bytes=s.received_bytes, copy_seconds=copy_seconds,
        rate_bytes_per_s=round(s.literal_bytes / copy_seconds, 1) if copy_seconds > 0 else None,
        seconds=round(time.monotonic() - started, 3), verify=result, warnings=list(result.warnings),
    )  # fmt: skip
    if args.json:
        dump_json(report)
    else:
        rate = f" at {_gb(report.rate_bytes_per_s)}/s" if report.rate_bytes_per_s else ""
        print(
            f"copy {report.source} → {report.dir}: {report.repo or '-'}@{report.revision}, "
            f"{report.files} files, "
            f"{_gb(report.bytes)}; sent {_gb(report.transferred_bytes)} in {report.transferred_files} files"
            f"{rate} ({report.copy_seconds:.1f} s), resumed {_gb(report.resumed_bytes)}, already here "
            f"{_gb(report.up_to_date_bytes)}, {report.deleted_files} deleted; membind {membind or 'none'}; "
            f"{report.seconds:.1f} s in all"
        )
        print(report_text(result))
        for w in result.warnings:
            print(f"warning: {w}", file=sys.stderr)
    if not result.ok:
        raise CheckFailed("copy finished but " + failure_message(result))
    return 0
