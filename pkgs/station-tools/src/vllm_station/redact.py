"""The one place secrets are taken out of what `station` prints, logs or writes.

A secret is registered once, where it is read: `load_api_key` registers the API key, `split_base_url`
the password of a `http://user:password@host` URL (and its percent-decoded form). From then on:

* `redact(text)` masks every registered secret in `text` (as `***`), in every form a server or a
  report format can give it back, not only the literal one: JSON-escaped (a key holding `"` or `\\`,
  escaped once or twice, `\\u00XX` in either case of hex), `\\xXX`, percent-encoded (either case, also
  double-encoded `%25XX`, `+` for a space), HTML character references (`&quot;`, `&#34;`, `&#x22;`), and
  split by whitespace or line breaks (literal or escaped as `\\n`, `%0A`, …) between any two of its
  characters, and base64 (standard and URL-safe alphabets, at each of the three byte alignments, so the
  secret is masked inside a longer encoded text too: `Authorization: Basic base64(user:password)`).
  Everything that shortens server text for a message (`api.sse.excerpt`, bench's failure
  examples) redacts *before* cutting, so a secret that crosses the cut cannot leave a prefix behind.
* `install()` (called by `station`'s `main`) wraps `sys.stdout` and `sys.stderr`: every line written to
  the terminal, a pipe or a log — tables, `--json`, logging records, `--debug`, tracebacks — passes through
  `redact`. The wrapper holds back a tail that could be the start of a secret (in any of its forms, a line
  break included), so a secret split over several `write()` calls or lines is still masked.
* Files are written by `vllm_station.output`, which redacts every byte (text, JSON, CSV, HTML, the text
  drawn into PNG plots) before it reaches the disk.

A secret must be at least `MIN_SECRET_LEN` characters: masking a 2-character string would garble every
message, so `load_api_key` and `split_base_url` refuse shorter keys and URL passwords (exit 2).
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import re
import sys
import threading
from typing import TextIO
from urllib.parse import unquote

MASK = "***"
MIN_SECRET_LEN = 8
MAX_SPLIT = 16  # separator tokens (whitespace, escaped line breaks) allowed between two characters

_lock = threading.Lock()
_registered: tuple[str, ...] = ()  # what was registered (and its percent-decoded form)
_secrets: tuple[str, ...] = ()  # those and their base64 forms, longest first (a secret inside another is
# masked as the longer one)
_patterns: tuple[re.Pattern[str], ...] = ()  # one per secret, same order
_steps: tuple[tuple[re.Pattern[str], ...], ...] = ()  # per secret: one pattern per character (held tail)

_HEX = "0123456789abcdef"
# a backslash as an escape, itself written plainly, percent-encoded or as an HTML reference
_BS = r"(?:\\|%(?:25){0,2}5[cC]|&(?:amp;){0,2}(?:#0*92|#[xX]0*5[cC]|bsol);)"
# possessive (`{1,8}+`): a run of backslashes is never re-split, so a long run costs O(1) per position
_BACKSLASHES = _BS + "{1,8}+"
# between two characters of a secret: whitespace, or a line break/tab written as an escape
_SEP_TOKEN = (
    rf"(?:\s|{_BS}{{1,8}}+[nrt]|%(?:25){{0,2}}(?:0[aAdD9]|20)|\+"
    r"|&(?:amp;){0,2}#(?:0*(?:9|10|13|32)|[xX]0*(?:[9aAdD]|20));)"
)
_SEP = f"{_SEP_TOKEN}{{0,{MAX_SPLIT}}}"
# an unfinished encoding at the very end of the text (the start of `\\u00XX`, `%XX`, `&#…;`)
_PARTIAL_BODY = (
    r"(?:\\{1,8}(?:[uU][0-9a-fA-F]{0,3}|[xX][0-9a-fA-F]?)?"
    r"|(?:%(?:25){0,2}[0-9a-fA-F]{2}){0,3}%(?:25){0,2}[0-9a-fA-F]?|(?:%(?:25){0,2}[0-9a-fA-F]{2}){1,3}"
    r"|&[#xX0-9a-zA-Z;]{0,12})"
)
# what may follow a character of a secret at the end of the text: separators, then an unfinished form
_TAIL = re.compile(f"{_SEP}{_PARTIAL_BODY}?\\Z")


def _hex(n: int, width: int) -> str:
    digits = f"{n:0{width}x}"
    return "".join(f"[{d}{d.upper()}]" if d in _HEX[10:] else d for d in digits)


def _char_forms(c: str) -> str:
    """A regex matching `c` in every form redaction knows (see the module docstring)."""
    code = ord(c)
    plain = [re.escape(c), "".join("%(?:25){0,2}" + _hex(b, 2) for b in c.encode("utf-8"))]
    if c == " ":
        plain.append(r"\+")
    plain.append(f"&(?:amp;){{0,2}}#0*{code};")
    plain.append(f"&(?:amp;){{0,2}}#[xX]0*{_hex(code, len(f'{code:x}'))};")
    named = {'"': "quot", "&": "amp", "<": "lt", ">": "gt", "'": "apos", "\\": "bsol"}
    if c in named:
        plain.append(f"&(?:amp;){{0,2}}{named[c]};")
    escapes = []  # only after a backslash
    if code < 0x10000:
        escapes.append("[uU]" + _hex(code, 4))
    else:
        hi, lo = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        escapes.append("[uU]" + _hex(hi, 4) + _BACKSLASHES + "[uU]" + _hex(lo, 4))
        escapes.append("U" + _hex(code, 8))
    if code < 0x100:
        escapes.append("[xX]" + _hex(code, 2))
    # the escapes first: `\\u005C` is one backslash, not a backslash and then "u005C"
    escaped = f"{_BACKSLASHES}(?:{'|'.join(escapes)})"
    if c == "\\":  # a backslash, escaped any number of times (`\\`, `\\\\`), in any encoding
        return f"(?:{escaped}|{_BS}{{1,9}}+)"
    return f"(?:{escaped}|{_BS}{{0,8}}+(?:{'|'.join(plain)}))"


def _base64_char(c: str) -> str:
    """A base64 character as servers give it back: itself, `+` `/` `=` also percent-encoded (in a URL)."""
    encoded = {"+": "2[bB]", "/": "2[fF]", "=": "3[dD]"}
    return f"(?:{re.escape(c)}|%(?:25){{0,2}}{encoded[c]})" if c in encoded else re.escape(c)


def _compile(secret: str, *, encoded: bool = False) -> tuple[re.Pattern[str], tuple[re.Pattern[str], ...]]:
    """The pattern of `secret` in every form (a base64 form, `encoded`: itself, split by line breaks as
    MIME wraps it, its `+/=` percent-encoded), and one pattern per character for the held tail."""
    chars = [_base64_char(c) if encoded else _char_forms(c) for c in secret]
    steps = [chars[0], *(f"{_SEP}{c}" for c in chars[1:])]
    # every form of the first character starts with it, a backslash, `%`, `&` (or `+` for a space): a
    # lookahead the regex engine tests in one step at each position (7x faster on a long text)
    first = "[" + re.escape(secret[0]) + r"\\%&" + ("+" if secret[0] == " " else "") + "]"
    if encoded:  # a base64 form starts with its literal first character (`+/=` aside): re's own prefix scan
        first = "" if chars[0] == re.escape(secret[0]) else f"[{re.escape(secret[0])}%]"
    lookahead = f"(?={first})" if first else ""
    return re.compile(lookahead + _SEP.join(chars)), tuple(re.compile(step) for step in steps)


def base64_forms(secret: str) -> set[str]:
    """The base64 characters that encode `secret` whatever precedes it: for each of the three byte
    alignments, the characters made of the secret's bits alone (the ones that share bits with a byte
    before or after it differ from text to text), in the standard and the URL-safe alphabet."""
    raw = secret.encode("utf-8")
    out: set[str] = set()
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + raw).decode("ascii")
        core = enc[-(-8 * k // 6) : 8 * (k + len(raw)) // 6]
        out |= {core, core.translate(str.maketrans("+/", "-_"))}
    return out


def register(secret: str | None) -> None:
    """Mask `secret` (its percent-decoded form, and their base64 forms) in everything printed from now on."""
    global _registered, _secrets, _patterns, _steps
    if not secret:
        return
    forms = {s for s in (secret, unquote(secret)) if len(s) >= MIN_SECRET_LEN}
    with _lock:
        registered = set(_registered) | forms
        encoded = {b for s in registered for b in base64_forms(s) if len(b) >= MIN_SECRET_LEN} - registered
        ordered = tuple(sorted(registered | encoded, key=len, reverse=True))
        compiled = [_compile(s, encoded=s in encoded) for s in ordered]
        _registered = tuple(sorted(registered, key=len, reverse=True))
        _secrets, _patterns, _steps = ordered, tuple(p for p, _ in compiled), tuple(s for _, s in compiled)


def forget_all() -> None:
    """Drop every registered secret (tests)."""
    global _registered, _secrets, _patterns, _steps
    with _lock:
        _registered, _secrets, _patterns, _steps = (), (), (), ()


def secrets() -> tuple[str, ...]:
    """The registered secrets (and their percent-decoded forms), longest first; base64 forms not listed."""
    return _registered


def redact(text: str) -> str:
    """`text` with every registered secret, in any of its known forms, replaced by `***`."""
    for pattern in _patterns:
        text = pattern.sub(MASK, text)
    return text


def _spellings(c: str) -> tuple[str, ...]:
    """The multi-character forms of `c`, lower-cased, without leading backslashes (see `_char_forms`)."""
    code = ord(c)
    out = [f"u{code:04x}", f"#{code};", f"#x{code:x};"]
    if code < 0x100:
        out.append(f"x{code:02x}")
    out.append("".join(f"%{b:02x}" for b in c.encode("utf-8")))
    return tuple(out)


def _starts_first(secret: str, tail: str) -> bool:
    """Whether `tail` is an unfinished form of the secret's first character (`\\u00`, `%2`, `&#3`)."""
    low = tail.lstrip("\\").lower()
    if not low:
        return True  # only backslashes: an escape to come
    if tail[0] == "\\":
        return any(s.startswith(low) for s in _spellings(secret[0]) if s[0] in "ux")
    if tail[0] == "&":
        return any(("&" + s).startswith(low) for s in _spellings(secret[0]) if s[0] == "#")
    if low in ("%", "%2"):  # `%2` may begin `%25`, a percent sign encoded again
        return True
    while low.startswith("%25"):
        low = "%" + low[3:]
    return any(s.startswith(low) for s in _spellings(secret[0]) if s[0] == "%")


def _partial_from(secret: str, steps: tuple[re.Pattern[str], ...], text: str, start: int) -> bool:
    """Whether `text[start:]` is an unfinished form of `secret` (`steps`: its first character, then
    separators and the next character, one pattern each)."""
    pos = last = start
    for i, step in enumerate(steps):
        m = step.match(text, pos)
        if m is None:
            if i == 0:
                return text[pos] in "\\%&" and _starts_first(secret, text[pos:])
            # the rest is separators and an unfinished form; or the last character matched was itself
            # the start of a longer form (`\\` of `\\u005C`)
            return _TAIL.match(text, pos) is not None or (i > 1 and _TAIL.match(text, last) is not None)
        last, pos = pos, m.end()
        if pos == len(text):
            return i < len(steps) - 1
    return False  # the whole secret: `redact` masked it already


def _held_tail(text: str) -> int:
    """Length of the longest tail of `text` that could be the start of a secret (in any form); 0 if none."""
    if not _steps:
        return 0
    window = max(len(s) for s in _secrets) * (20 + MAX_SPLIT)
    first = max(0, len(text) - window)
    for start in range(first, len(text)):
        if any(_partial_from(s, steps, text, start) for s, steps in zip(_secrets, _steps, strict=True)):
            return len(text) - start
    return 0


class RedactingStream(io.TextIOBase):
    """A text stream that redacts each line before it reaches `raw` (see the module docstring)."""

    def __init__(self, raw: TextIO) -> None:
        super().__init__()
        self.raw = raw
        self._pending = ""
        self._write_lock = threading.Lock()  # threads print too (copy's rsync reader, bench's progress)
        self.failed: OSError | None = None  # the error of a write to `raw` (a full disk: `>/dev/full`)

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
            try:
                return self._write(s)
            except BrokenPipeError:
                raise
            except OSError as exc:
                self.failed = exc
                raise

    def discard(self) -> None:
        """Drop what is held back and what `raw` buffers: writing it failed (`main` reports that)."""
        self._pending = ""
        with contextlib.suppress(OSError, ValueError):
            buffer = getattr(self.raw, "buffer", None)
            raw_io = getattr(buffer, "raw", None)
            if raw_io is not None:
                self.raw = io.TextIOWrapper(open(os.devnull, "wb"), encoding="utf-8")  # noqa: SIM115

    def _write(self, s: str) -> int:
        if not _secrets:
            self.raw.write(self._pending + s)
            self._pending = ""
            return len(s)
        text = redact(self._pending + s)
        cut = max(text.rfind("\n"), text.rfind("\r")) + 1
        cut = min(cut, len(text) - _held_tail(text))  # a secret may go on in the next write, past a newline
        self._pending = text[cut:]
        if cut:
            self.raw.write(text[:cut])
        return len(s)

    def flush(self) -> None:
        with self._write_lock:
            try:
                self._flush()
            except BrokenPipeError:
                raise
            except OSError as exc:
                self.failed = exc
                raise

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
            try:
                self._close_pending()
            except BrokenPipeError:
                raise
            except OSError as exc:
                self.failed = exc
                raise

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
