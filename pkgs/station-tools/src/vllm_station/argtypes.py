"""Bounded argparse types: every numeric option of every command is checked here, at parse time.

    parser.add_argument("--timeout", type=argtypes.seconds(hi=DAY), default=60.0, ...)
    parser.add_argument("--keep-logs", type=argtypes.number(int, lo=1, hi=10_000), ...)

A value outside its range, `nan`, `inf`, a non-number or digits outside ASCII (`٣`, `³`: Python's int()
reads them) is an argparse error: exit 2 with
"argument --timeout: must be a number of seconds from 0.001 to 86400, got 'nan'" and nothing run.
Lists (`int_list`: `1,8,32`) and request counts (`request_count`: `40` or `3x`) are checked here too,
and a config file's values go through the same types (`from_config`: a UsageError naming the key and
the file), so a number read from JSON has the range its command-line option has.
Each type carries its range (`.lo`, `.hi`) so a test can walk every command's options and feed them
hostile values (tests/test_argtypes_walk.py); a plain `type=int`/`type=float` fails that test.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

from vllm_station.errors import UsageError

N = TypeVar("N", int, float)

DAY = 86_400.0
WEEK = 7 * DAY

# ASCII only (Python's int() and float() also read "٣", "３" and "1_000"); at most 30 digits.
INT_TEXT = re.compile(r"[+-]?[0-9]{1,30}")
FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][+-]?[0-9]{1,4})?")


def parse_int(text: str) -> int:
    """An ASCII whole number (ValueError otherwise): the one place a command turns text into an int."""
    raw = text.strip()
    if not INT_TEXT.fullmatch(raw):
        raise ValueError(f"not a whole number: {text!r}")
    return int(raw)


def parse_float(text: str) -> float:
    """A finite ASCII decimal number (ValueError otherwise; no nan, inf, unicode digits or underscores)."""
    raw = text.strip()
    if not FLOAT_TEXT.fullmatch(raw):
        raise ValueError(f"not a number: {text!r}")
    value = float(raw)
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {text!r}")
    return value


def _fmt(value: float) -> str:
    """1 -> "1", 4294967295 -> "4,294,967,295", 0.001 -> "0.001", 86400.0 -> "86,400"."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:g}"


@dataclass(frozen=True)
class Bounded(Generic[N]):
    """`type=` for argparse: a number of `kind` in [lo, hi] (or (lo, hi] with `lo_open`)."""

    kind: type[N]
    lo: N
    hi: N
    what: str = "a number"
    lo_open: bool = False

    @property
    def __name__(self) -> str:  # argparse names the type in some messages
        return self.kind.__name__

    def describe(self) -> str:
        lo = f"more than {_fmt(self.lo)}" if self.lo_open else _fmt(self.lo)
        return f"{self.what} from {lo} to {_fmt(self.hi)}"

    def __call__(self, text: str) -> N:
        try:
            value: N = parse_int(text) if self.kind is int else parse_float(text)  # type: ignore[assignment]
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}")
        below = value <= self.lo if self.lo_open else value < self.lo
        if below or value > self.hi:
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}")
        return value


def number(kind: type[N], *, lo: N, hi: N, what: str | None = None, lo_open: bool = False) -> Bounded[N]:
    """An int or float in [lo, hi]."""
    default_what = "a whole number" if kind is int else "a number"
    return Bounded(kind, lo, hi, what or default_what, lo_open)


def seconds(*, lo: float = 0.0, hi: float = DAY, zero_ok: bool = False) -> Bounded[float]:
    """A duration: more than 0 (or from 0 with `zero_ok`) up to `hi` (default a day)."""
    return Bounded(float, lo, hi, "a number of seconds", lo_open=not zero_ok and lo == 0.0)


def port(*, zero_ok: bool = False) -> Bounded[int]:
    """A TCP port, 1–65535 (0, "pick a free one", only with `zero_ok`)."""
    return Bounded(int, 0 if zero_ok else 1, 65535, "a port number")


def count(*, lo: int = 1, hi: int) -> Bounded[int]:
    """A count of things (tokens, logs, shards, ranks): a whole number in [lo, hi]."""
    return Bounded(int, lo, hi, "a whole number")


def int_list(hi: int, *, k: bool = False, max_items: int = 32, lo: int = 1) -> Callable[[str], list[int]]:
    """`1,8,32` (with `k`: `8k,32k` = x1024): lo…hi each, at most `max_items` of them."""
    top = f"{hi // 1024}k" if k and hi % 1024 == 0 else f"{hi:,}"
    eg = "8k,32k" if k else "1,8,32"
    usage = f"must be whole numbers from {lo} to {top} (e.g. {eg})"

    def conv(text: str) -> list[int]:
        out: list[int] = []
        for part in text.split(","):
            p = part.strip().lower()
            if not p:
                continue
            mult = 1024 if k and p.endswith("k") else 1
            digits = p[:-1] if mult > 1 else p
            if not INT_TEXT.fullmatch(digits) or not lo <= int(digits) * mult <= hi:
                raise argparse.ArgumentTypeError(f"{usage}, got {part.strip()!r}")
            out.append(int(digits) * mult)
        if not out:
            raise argparse.ArgumentTypeError(f"{usage}, got {text!r}")
        if len(out) > max_items:
            raise argparse.ArgumentTypeError(f"must be at most {max_items} values, got {len(out)}")
        return out

    return conv


def request_count(*, lo: int, hi: int, per_user_hi: int) -> Callable[[str], str]:
    """`N` (lo…hi) or `Nx` (x concurrency, lo…per_user_hi): the checked text, normalised (`"3x"`)."""

    def conv(text: str) -> str:
        t = text.strip().lower()
        per_user = t.endswith("x")
        digits = t[:-1] if per_user else t
        top = per_user_hi if per_user else hi
        if not INT_TEXT.fullmatch(digits) or not lo <= int(digits) <= top:
            raise argparse.ArgumentTypeError(
                f"must be a count from {lo} to {hi:,}, or {lo}x to {per_user_hi:,}x (x concurrency), "
                f"got {text!r}"
            )
        return f"{int(digits)}{'x' if per_user else ''}"

    return conv


_JSON_TYPE = {bool: "true/false", int: "a whole number", float: "a number", str: "a string",
              list: "a list", dict: "an object", type(None): "null"}  # fmt: skip


def json_type(value: object) -> str:
    """How a JSON value's type reads in an error ("a string", "a list", …)."""
    return _JSON_TYPE.get(type(value), type(value).__name__)


def from_config(
    convert: Callable[[str], Any], value: object, where: str, *, kinds: Sequence[type] = (int,)
) -> Any:
    """A config file's value through the same `convert` as its command-line option.

    `kinds` are the JSON types the key takes (a list means a list of whole numbers); anything else, a
    boolean for a number included, or a value `convert` refuses is a UsageError naming `where` (the key
    and the file)."""
    want = " or ".join(_JSON_TYPE.get(k, k.__name__) for k in kinds)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, tuple(kinds)):
        raise UsageError(f"{where}: must be {want}, got {json_type(value)} {value!r}"[:300])
    if isinstance(value, list):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise UsageError(f"{where}: must be a list of whole numbers, got {value!r}"[:300])
        text = ",".join(str(v) for v in value)
    elif isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{where}: must be a finite number, got {value!r}")
    else:
        text = str(value)
    try:
        return convert(text)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        raise UsageError(f"{where}: {exc}"[:300]) from None


_UNIT = re.compile(r"[A-Za-z0-9:_.\\@-]{1,255}")


def unit_name(text: str) -> str:
    """A systemd unit name (`vllm-station.service`, `vllm-station-probe@x.service`), passed to systemctl
    and journalctl as an argument: never an option (`--unit=--host=…`), never empty or odd characters."""
    if not _UNIT.fullmatch(text) or text.startswith(("-", ".")):
        raise argparse.ArgumentTypeError(
            "must be a systemd unit name (letters, digits and :_.\\@-, not starting with - or .), "
            f"got {text!r}"
        )
    return text


def http_url(text: str) -> str:
    """argparse `type=` for a URL station connects to: http(s)://HOST[:PORT]/…, HOST may be [IPv6]."""
    eg = "http://192.168.100.2:29510/ready"
    usage = f"must be an http:// or https:// URL with a host (e.g. {eg}), got {text!r}"
    try:
        parts = urlsplit(text.strip())
        host, _port = parts.hostname, parts.port  # a bad port or "[::1" raises ValueError
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{usage} ({exc})") from None
    if parts.scheme not in ("http", "https") or not host:
        raise argparse.ArgumentTypeError(usage)
    return text.strip()
