"""Every file `station` reads is read through here: a regular file, opened without blocking, within a size.

    data = read_bytes(path, limit=CONFIG_LIMIT)            # raises FileRefused (an OSError)
    text = read_text(path, limit=KEY_LIMIT)                 # UTF-8 (errors="strict" unless told)
    with open_regular(path) as f: ...                       # streamed reads (shards, hashes)

`config.json` that is a symlink to `/dev/zero`, a shard that is a FIFO, a log that never ends: each is
a `FileRefused` whose `strerror` says what is wrong, so every caller's existing `except OSError`
reports it like any other unreadable file. Opening uses `O_NONBLOCK` (a FIFO would block the open
itself; regular files ignore the flag) and the kind is checked on the open descriptor (`fstat`), so a
file swapped after a check cannot slip through. A regular file that keeps growing past `limit` while it
is read (or a procfs file that reports size 0) is refused at `limit` + 1 bytes: memory stays bounded.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path

KiB = 1024
MiB = 1024 * KiB

# Limits of the files station reads (each far above any real file of its kind).
KEY_LIMIT = 64 * KiB  # an API key or token file
CONFIG_LIMIT = 64 * MiB  # config.json, model.safetensors.index.json, tokenizer/preflight JSON, a stamp
SYSFS_LIMIT = 4 * MiB  # one /sys or /proc file
LOG_LIMIT = 256 * MiB  # a saved container log (read whole: nccl-check, weights-check)


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
