"""The one place secrets are taken out of what `station` prints, logs or writes.

A secret is registered once, where it is read: `load_api_key` registers the API key, `split_base_url`
the password of a `http://user:password@host` URL (and its percent-decoded form). From then on:

* `redact(text)` masks every registered secret in `text` (as `***`). Everything that shortens server text
  for a message (`api.sse.excerpt`, bench's failure examples) redacts *before* cutting, so a secret that
  crosses the cut cannot leave a prefix behind.
* `install()` (called by `station`'s `main`) wraps `sys.stdout` and `sys.stderr`: every line written to
  the terminal, a pipe or a log — tables, `--json`, logging records, `--debug`, tracebacks — passes through
  `redact`. The wrapper is line-buffered: a secret split over several `write()` calls is still masked,
  and on `flush()` it holds back only a tail that could be the start of a secret.
* `write_text(path, text)` is how reports go to files (`--json FILE`, CSV): redacted, then written.

A secret must be at least `MIN_SECRET_LEN` characters: masking a 2-character string would garble every
message, so `load_api_key` and `split_base_url` refuse shorter keys and URL passwords (exit 2).
"""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path
from typing import TextIO
from urllib.parse import unquote

MASK = "***"
MIN_SECRET_LEN = 8

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()  # longest first, so a secret inside another is masked as the longer one


def register(secret: str | None) -> None:
    """Mask `secret` (and its percent-decoded form) in everything printed from now on."""
    global _secrets
    if not secret:
        return
    forms = {secret, unquote(secret)}
    with _lock:
        new = set(_secrets) | {s for s in forms if len(s) >= MIN_SECRET_LEN}
        _secrets = tuple(sorted(new, key=len, reverse=True))


def forget_all() -> None:
    """Drop every registered secret (tests)."""
    global _secrets
    with _lock:
        _secrets = ()


def secrets() -> tuple[str, ...]:
    return _secrets


def redact(text: str) -> str:
    """`text` with every registered secret replaced by `***`."""
    for s in _secrets:
        if s in text:
            text = text.replace(s, MASK)
    return text


def _held_tail(text: str) -> int:
    """Length of the longest tail of `text` that is a proper prefix of a secret (0 if none)."""
    best = 0
    for s in _secrets:
        for n in range(min(len(s) - 1, len(text)), best, -1):
            if s.startswith(text[-n:]):
                best = n
                break
    return best


class RedactingStream(io.TextIOBase):
    """A text stream that redacts each line before it reaches `raw` (see the module docstring)."""

    def __init__(self, raw: TextIO) -> None:
        super().__init__()
        self.raw = raw
        self._pending = ""
        self._write_lock = threading.Lock()  # threads print too (copy's rsync reader, bench's progress)

    # what callers ask of sys.stdout / sys.stderr
    @property
    def encoding(self) -> str:  # type: ignore[override]  # TextIOBase declares it read-only
        return getattr(self.raw, "encoding", "utf-8") or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.raw, "errors", None)

    def fileno(self) -> int:
        return self.raw.fileno()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def writable(self) -> bool:
        return True

    @property
    def buffer(self) -> object:  # binary writes bypass redaction; nothing in station writes secrets there
        return self.raw.buffer

    def write(self, s: str) -> int:
        with self._write_lock:
            return self._write(s)

    def _write(self, s: str) -> int:
        if not _secrets:
            self.raw.write(self._pending + s)
            self._pending = ""
            return len(s)
        text = self._pending + s
        cut = max(text.rfind("\n"), text.rfind("\r")) + 1
        self._pending = text[cut:]
        if cut:
            self.raw.write(redact(text[:cut]))
        return len(s)

    def flush(self) -> None:
        with self._write_lock:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            text = redact(self._pending)
            hold = _held_tail(text) if _secrets else 0
            self._pending = text[len(text) - hold :] if hold else ""
            out = text[: len(text) - hold]
            if out:
                self.raw.write(out)
        self.raw.flush()

    def close_pending(self) -> None:
        """Write whatever is held back (redacted): the process is about to end."""
        with self._write_lock:
            self._close_pending()

    def _close_pending(self) -> None:
        if self._pending:
            self.raw.write(redact(self._pending))
            self._pending = ""
        self.raw.flush()


def install() -> None:
    """Route `sys.stdout` and `sys.stderr` through `RedactingStream` (idempotent)."""
    if not isinstance(sys.stdout, RedactingStream) and sys.stdout is not None:
        sys.stdout = RedactingStream(sys.stdout)
    if not isinstance(sys.stderr, RedactingStream) and sys.stderr is not None:
        sys.stderr = RedactingStream(sys.stderr)


def finish() -> None:
    """Flush what the wrappers hold back (end of `main`)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, RedactingStream):
            stream.close_pending()


def write_text(path: str | Path, text: str) -> None:
    """Write a report to a file, redacted."""
    Path(path).write_text(redact(text), encoding="utf-8")
