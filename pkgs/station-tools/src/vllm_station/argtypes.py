"""Bounded argparse types: every numeric option of every command is checked here, at parse time.

    parser.add_argument("--timeout", type=argtypes.seconds(hi=DAY), default=60.0, ...)
    parser.add_argument("--keep-logs", type=argtypes.number(int, lo=1, hi=10_000), ...)

A value outside its range, `nan`, `inf` or a non-number is an argparse error: exit 2 with
"argument --timeout: must be a number of seconds from 0.001 to 86400, got 'nan'" and nothing run.
Each type carries its range (`.lo`, `.hi`) so a test can walk every command's options and feed them
hostile values (tests/test_argtypes_walk.py); a plain `type=int`/`type=float` fails that test.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Generic, TypeVar

N = TypeVar("N", int, float)

DAY = 86_400.0
WEEK = 7 * DAY


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
        raw = text.strip()
        try:
            value = self.kind(raw)
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
