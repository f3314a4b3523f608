"""The one output layer: every byte a `station` command writes to a file passes here.

The terminal (stdout, stderr, logs) is `vllm_station.redact`'s stream wrapper, installed by `station`'s
`main`. Files — `--json FILE`, `--csv`, `--output`, `--out` (golive.json, golive.html), `--save-responses`,
`--plots`, the gateway's key maps, textfiles for node_exporter, stamps and caches — go through this
module, which gives every command the same guards without the command having to remember them:

* **Redacted.** Text is passed through `redact.redact` (the API key and URL passwords, in every form a
  server can give them back) right before it reaches the disk. Plots are drawn by `save_figure`, which
  redacts the text of every title, label, tick and legend of the figure first and draws it as plain text
  (matplotlib's math syntax off: a model named `$\\frac{a}{` cannot break the drawing).
* **Checked before any work.** Output options take the argparse types `out_file` / `out_dir`, which run
  `check_file` / `check_dir` while the command line is parsed: an output that could not be written is a
  usage error (exit 2) before anything ran, naming the option, the path and the reason (a path that comes
  from a config file is checked with the same functions before the first request). The check leaves
  nothing behind. An architecture test requires these types on every output option of every command.
* **Never replaces what is not a regular file.** `write_text` writes an existing character device
  (`/dev/null`, `/dev/stdout`) in place and refuses a FIFO, socket, block device or directory;
  `replace_text` (a whole file swapped in atomically: key maps, stamps) refuses any existing path that is
  not a regular file, so `--out /dev/full` can never turn a device node into a file.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from vllm_station import redact
from vllm_station.errors import StationError, UsageError


class OutputError(StationError, OSError):
    """A file could not be written after the work was done (exit 1); the message names option and path.

    Also an OSError, so code that handled a failed write as one (a stamp, a hash record) still does."""


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISCHR(mode):
        return "a character device"
    return "not a regular file"


def _probe_dir(option: str, target: Path, directory: Path) -> None:
    try:
        fd, probe = tempfile.mkstemp(prefix=".station-probe-", dir=directory)
    except OSError as exc:
        raise UsageError(
            f"{option} {target}: cannot write in {directory} ({_why(exc)}); nothing was run"
        ) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def check_file(option: str, path: Path, *, device_ok: bool = True) -> None:
    """`path` can be written as a file: an existing regular file (or, if `device_ok`, a character device)
    that we may write, or a new name in an existing, writable directory. Else a UsageError (exit 2)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # ENOTDIR: a parent is a file; ELOOP; EACCES
        raise UsageError(f"{option} {path}: {_why(exc)}; nothing was run") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{option} {path}: is a directory; give a file name (nothing was run)")
        if not (stat.S_ISREG(st.st_mode) or (device_ok and stat.S_ISCHR(st.st_mode))):
            raise UsageError(
                f"{option} {path}: is {_kind(st.st_mode)}, not a regular file; give a file name "
                "(nothing was run)"
            )
        if not device_ok:  # replaced whole (a new file renamed over it): only the directory is written
            _probe_dir(option, path, path.parent)  # (the old file may well be read-only: a key map, 0400)
            return
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC))
        except OSError as exc:
            raise UsageError(f"{option} {path}: cannot write it ({_why(exc)}); nothing was run") from None
        return
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(
            f"{option} {path}: the directory {parent} does not exist; create it first (nothing was run)"
        )
    _probe_dir(option, path, parent)


def check_dir(option: str, path: Path, *, files: tuple[str, ...] = ()) -> None:
    """`path` is, or can be created as, a writable directory (its nearest existing ancestor is probed);
    each of `files` that already exists in it can be written (`check_file`)."""
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
            raise UsageError(f"{option} {path}: {_why(exc)}; nothing was run") from None
        break
    if not stat.S_ISDIR(st.st_mode):
        what = "is not a directory" if probe == path else f"cannot be created: {probe} is not a directory"
        raise UsageError(f"{option} {path}: {what} (nothing was run)")
    _probe_dir(option, path, probe)
    for name in files if probe == path else ():
        if os.path.lexists(path / name):
            check_file(option, path / name, device_ok=False)


class OutPath:
    """An argparse type for an output option: the path is checked when the command line is parsed
    (`check_file` or `check_dir`), so a bad one is exit 2 before the command does anything.

    `kind`: "file" or "dir"; `dash`: "-" (stdout) passes unchecked, as the string "-"; `replaced`: the
    file is replaced whole (`replace_text`), so an existing character device is refused as well;
    `files`: names inside a "dir" that will be written (each checked if it exists)."""

    def __init__(
        self, kind: str, *, dash: bool = False, replaced: bool = False, files: tuple[str, ...] = ()
    ) -> None:
        self.kind, self.dash, self.replaced, self.files = kind, dash, replaced, files

    def __call__(self, text: str) -> Path:
        if self.dash and text == "-":
            return text  # type: ignore[return-value]  # stdout: the caller tests `== "-"`
        if not text:
            raise argparse.ArgumentTypeError("an empty path")
        path = Path(text)
        try:
            if self.kind == "dir":
                check_dir("", path, files=self.files)
            else:
                check_file("", path, device_ok=not self.replaced)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(str(exc).strip()) from None
        return path

    def __repr__(self) -> str:  # argparse names the type in some messages
        return f"output {self.kind}"


def out_file(*, dash: bool = False, replaced: bool = False) -> OutPath:
    """The argparse type of a file output option (`--output FILE`, `--csv FILE`, `--json FILE|-`)."""
    return OutPath("file", dash=dash, replaced=replaced)


def out_dir(*, files: tuple[str, ...] = ()) -> OutPath:
    """The argparse type of a directory output option (`--out DIR`, `--plots DIR`)."""
    return OutPath("dir", files=files)


def make_dir(option: str, path: Path) -> Path:
    """Create the output directory `path` (and its parents); an OutputError names the option."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot create it ({_why(exc)})") from None
    return path


def _write_fd(path: Path, data: bytes, option: str) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot write it ({_why(exc)})") from None
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode)):
            raise OutputError(f"{option} {path}: is {_kind(st.st_mode)}; not written")
        if stat.S_ISREG(st.st_mode):
            os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise OutputError(f"{option} {path}: {_why(exc)}") from None
    finally:
        os.close(fd)


def write_text(path: Path, text: str, *, option: str) -> Path:
    """Write `text`, redacted, to `path` (a regular file, new or replaced in place, or a character device)."""
    _write_fd(Path(path), redact.redact(text).encode("utf-8"), option)
    return Path(path)


def dumps_json(obj: Any) -> str:
    """`obj` (dataclasses, lists, dicts, scalars) as indented JSON text with a final newline (unredacted)."""
    from vllm_station.report import to_jsonable

    return json.dumps(to_jsonable(obj), indent=2, ensure_ascii=False) + "\n"


def write_json(path: Path, obj: Any, *, option: str) -> Path:
    """`obj` as indented JSON, redacted, to `path` (see `write_text`)."""
    return write_text(path, dumps_json(obj), option=option)


def write_bytes(path: Path, data: bytes, *, option: str) -> Path:
    """Binary output (a PNG drawn by `save_figure`): the same checks as `write_text`; bytes are not redacted,
    so text inside them must have been (see `save_figure`)."""
    _write_fd(Path(path), data, option)
    return Path(path)


def replace_text(path: Path, text: str, *, option: str, mode: int = 0o644, fsync: bool = False) -> Path:
    """Replace `path` whole with `text`, redacted unless `mode` says the file holds secrets on purpose
    (0o400/0o600: the gateway's key maps), via a temporary file beside it and a rename.

    An existing `path` that is not a regular file (a device node, FIFO, socket, directory) is refused:
    it is never replaced."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"{option} {path}: {_why(exc)}") from None
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
        raise OutputError(f"{option} {path}: is {_kind(st.st_mode)}; it is not replaced")
    if st is not None and stat.S_ISLNK(st.st_mode):
        try:
            target = os.stat(path)
        except OSError:
            target = None
        if target is not None and not stat.S_ISREG(target.st_mode):
            raise OutputError(f"{option} {path}: points to {_kind(target.st_mode)}; it is not replaced")
    private = not (mode & 0o077)
    data = (text if private else redact.redact(text)).encode("utf-8")
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot write in {path.parent} ({_why(exc)})") from None
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{option} {path}: cannot write it ({_why(exc)})") from None
    return path


def rescue(text: str, prefix: str) -> str:
    """Keep a report whose file could not be written in a new temporary file: its path, or why not."""
    try:
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=".json")
        os.close(fd)
        write_text(Path(name), text, option="(rescue)")
    except (OSError, OutputError) as exc:
        return f"the report could not be saved elsewhere either ({exc})"
    return f"the JSON report was saved to {name}"


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, with math syntax and TeX off for every text drawn."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False
    matplotlib.rcParams["text.usetex"] = False
    import matplotlib.pyplot as plt

    return plt


def plain_figure(fig: Any) -> None:
    """Redact every text drawn in `fig` and draw it as plain text (no math syntax, no TeX)."""
    from matplotlib.text import Text

    for t in fig.findobj(Text):
        t.set_usetex(False)
        t.set_parse_math(False)
        raw = t.get_text()
        if raw:
            t.set_text(redact.redact(raw))


def save_figure(fig: Any, path: Path | None = None, *, option: str = "--plots", **kwargs: Any) -> bytes:
    """Draw `fig` as PNG (text redacted and plain, see `plain_figure`); write it to `path` if given.

    Returns the PNG bytes (golive.html inlines them)."""
    plain_figure(fig)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", **kwargs)
    except (ValueError, RuntimeError) as exc:  # a text matplotlib still cannot lay out: say which figure
        raise OutputError(f"{option}: cannot draw the plot ({exc})") from None
    data = buf.getvalue()
    if path is not None:
        write_bytes(path, data, option=option)
    return data
