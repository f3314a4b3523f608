"""Every file `station` reads is read through here: a regular file, opened without blocking, within a size.

    data = read_bytes(path, limit=CONFIG_LIMIT)            # raises FileRefused (an OSError)
    text = read_text(path, limit=KEY_LIMIT)                 # UTF-8 (errors="strict" unless told)
    with open_regular(path) as f: ...                       # streamed reads (shards, hashes)
    obj = read_json(path, limit=CONFIG_LIMIT)              # ... parsed, nested at most MAX_JSON_DEPTH
    obj = loads_json(text)                                  # JSON from anywhere (a server, an option)

`config.json` that is a symlink to `/dev/zero`, a shard that is a FIFO, a log that never ends: each is
a `FileRefused` whose `strerror` says what is wrong, so every caller's existing `except OSError`
reports it like any other unreadable file. Opening uses `O_NONBLOCK` (a FIFO would block the open
itself; regular files ignore the flag) and the kind is checked on the open descriptor (`fstat`), so a
file swapped after a check cannot slip through. A regular file that keeps growing past `limit` while it
is read (or a procfs file that reports size 0) is refused at `limit` + 1 bytes: memory stays bounded.
JSON nested deeper than `MAX_JSON_DEPTH` (a RecursionError in the parser, or later in any code that
walks the value) is a `JsonTooDeep`, a ValueError like any other bad JSON, found before parsing.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

KiB = 1024
MiB = 1024 * KiB

# Limits of the files station reads (each far above any real file of its kind).
KEY_LIMIT = 64 * KiB  # an API key or token file
CONFIG_LIMIT = 64 * MiB  # config.json, model.safetensors.index.json, tokenizer/preflight JSON, a stamp
SYSFS_LIMIT = 4 * MiB  # one /sys or /proc file
LOG_LIMIT = 256 * MiB  # a saved container log (read whole: nccl-check, weights-check)
STREAM_LIMIT = 1024 * MiB  # a log read from stdin (nccl-check -): scanned line by line, then no more
LINE_LIMIT = 64 * KiB  # one line of a streamed log: the rest of a longer line is dropped
MAX_JSON_DEPTH = 100  # nested arrays/objects: real configs, schemas and answers stay below 20


class FileRefused(OSError):
    """Not a regular file, or larger than its limit. `strerror` is the operator's message."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | os.PathLike[str]) -> io.BufferedReader:
    """`path` opened for binary reading, refused (FileRefused) unless it is a regular file."""
    p = Path(path)
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = _kind(info.st_mode)
            raise FileRefused(
                errno.EISDIR if kind == "a directory" else errno.EINVAL,
                f"it is {kind}, not a regular file" if kind != "not a regular file" else kind,
                str(p),
            )
        os.set_blocking(fd, True)
        return io.open(fd, "rb")  # noqa: UP020 - os.fdopen is typed as BinaryIO, without readinto
    except BaseException:
        os.close(fd)
        raise


def check_regular_or_absent(path: str | os.PathLike[str]) -> None:
    """A path station will read and later replace (a cache): absent, or a regular file (FileRefused).

    Checked before any work, so `--calibration-cache /dev/zero` is refused at once, not replaced."""
    p = Path(path)
    try:
        info = os.stat(p)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        kind = _kind(info.st_mode)
        raise FileRefused(errno.EINVAL, f"it is {kind}, not a regular file", str(p))


def _too_large(path: Path, limit: int, size: int | None = None) -> FileRefused:
    have = f"{size:,} bytes" if size is not None else "more than that"
    return FileRefused(errno.EFBIG, f"it is {have}, over the {limit:,}-byte limit for this file", str(path))


def read_bytes(path: str | os.PathLike[str], *, limit: int) -> bytes:
    """The whole file, at most `limit` bytes (FileRefused beyond that or for a non-regular file)."""
    p = Path(path)
    with open_regular(p) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise _too_large(p, limit, size)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise _too_large(p, limit)
    return data


def read_text(
    path: str | os.PathLike[str], *, limit: int, encoding: str = "utf-8", errors: str = "strict"
) -> str:
    """`read_bytes` decoded (UnicodeDecodeError with errors="strict")."""
    return read_bytes(path, limit=limit).decode(encoding, errors)


def read_tail(path: str | os.PathLike[str], *, limit: int) -> tuple[bytes, bool]:
    """(the last `limit` bytes, whether anything before them was skipped) — for logs that may be huge."""
    p = Path(path)
    with open_regular(p) as f:
        size = os.fstat(f.fileno()).st_size
        skipped = size > limit
        if skipped:
            f.seek(size - limit)
        data = f.read(limit + 1)
    if len(data) > limit:  # grew while read
        data, skipped = data[-limit:], True
    return data, skipped


class JsonTooDeep(json.JSONDecodeError):
    """JSON nested deeper than the limit: a JSONDecodeError (so a ValueError), so every caller's existing
    `except json.JSONDecodeError` / `except ValueError` reports it like any other bad JSON."""

    def __init__(self, max_depth: int) -> None:
        super().__init__(f"JSON nested more than {max_depth} levels deep", "", 0)

    def __str__(self) -> str:
        return self.msg


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_INNERMOST = re.compile(r"\[\]|\{\}")


def json_too_deep(text: str, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether `text`'s arrays and objects nest deeper than `max_depth` (brackets in strings do not
    count). Each pass removes the innermost pairs; `max_depth` passes empty any text within the limit."""
    if text.count("[") + text.count("{") <= max_depth:  # an upper bound of the depth: most texts stop here
        return False
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    # more openers in a row than the limit: too deep at once (the passes below remove one pair each there)
    if re.search(r"[\[{]{%d}" % (max_depth + 1), brackets):  # noqa: UP031 - {} are the regex's own
        return True
    for _ in range(max_depth):
        inner = _INNERMOST.sub("", brackets)
        if not inner or inner == brackets:  # within the limit, or unbalanced (json.loads says so)
            return False
        brackets = inner
    return bool(brackets)


def loads_json(text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, **hooks: Any) -> Any:
    """`json.loads(text, **hooks)`, refusing JSON nested deeper than `max_depth` (JsonTooDeep) before it is
    parsed."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8")
    if json_too_deep(text, max_depth):
        raise JsonTooDeep(max_depth)
    try:
        return json.loads(text, **hooks)
    except RecursionError:  # never expected after the scan: still a clear error, never a traceback
        raise JsonTooDeep(max_depth) from None


def read_json(path: str | os.PathLike[str], *, limit: int = CONFIG_LIMIT) -> Any:
    """A regular file of at most `limit` bytes, UTF-8 JSON nested at most MAX_JSON_DEPTH deep.

    Raises FileRefused/OSError (unreadable, not a regular file, too large), UnicodeDecodeError or
    ValueError (not JSON, JsonTooDeep) — each with a message for the operator."""
    return loads_json(read_text(path, limit=limit))


class LineSplitter:
    """Lines out of a byte stream in bounded memory: each line cut at `max_line` bytes (the rest of it
    dropped until its newline), so a stream with no newline at all (`/dev/zero`) never grows a buffer."""

    def __init__(self, max_line: int = LINE_LIMIT) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._skipping = False  # inside a line already cut at max_line

    def feed(self, chunk: bytes) -> list[bytes]:
        out: list[bytes] = []
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            piece = chunk[start:] if nl < 0 else chunk[start:nl]
            if not self._skipping:
                self._buf += piece[: self.max_line - len(self._buf)]
                self._skipping = len(self._buf) >= self.max_line and nl < 0
            if nl < 0:
                return out
            out.append(bytes(self._buf))
            self._buf.clear()
            self._skipping = False
            start = nl + 1

    def flush(self) -> bytes:
        """The last line when the stream ended without a newline ("" when none)."""
        rest = bytes(self._buf)
        self._buf.clear()
        self._skipping = False
        return rest
