"""Probe until done or a deadline: the loop that `station wait-ready`, `station pair wait-*`,
`station nccl-check --wait` and `station weights-check --wait` share.

    polled = poll(probe, timeout_s=300, interval_s=5, progress=say)
    latest = poll_latest(read_log_and_judge, final=lambda r: r.final, wait_s=60, interval_s=5)

`probe(tick)` runs at once and then every `interval_s` (the time a probe takes counts against the
interval). It returns a value to end the wait, or None to keep going. Between tries, `progress(tick)`
is called once (never after the last try), so a caller prints one line per interval. At the deadline
`poll` returns with `value` None. A timeout of 0 means exactly one try.

`poll_latest` is the same loop for a reading that is always worth keeping (a verdict from a log): it
re-reads until the reading is final or the wait is over, and returns the last reading either way, with
whether the deadline cut the wait short (`still_pending` words the summary of such a reading).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from vllm_station.errors import UsageError

T = TypeVar("T")


@dataclass(frozen=True)
class Tick:
    attempt: int  # 1 for the first try
    elapsed_s: float  # since the wait began
    left_s: float  # until the deadline, >= 0 (a probe bounds its own request timeout with it)


@dataclass(frozen=True)
class Polled(Generic[T]):
    value: T | None  # what the probe returned to end the wait; None: the deadline passed
    attempts: int
    elapsed_s: float


def check_seconds(option: str, value: float, *, zero_ok: bool = False) -> float:
    """A finite number of seconds, > 0 (or >= 0 with `zero_ok`); else a UsageError naming `option`."""
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        bound = "0 or more" if zero_ok else "positive"
        raise UsageError(f"{option} must be {bound} seconds, got {value:g}")
    return value


def poll(
    probe: Callable[[Tick], T | None],
    *,
    timeout_s: float,
    interval_s: float,
    progress: Callable[[Tick], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Polled[T]:
    check_seconds("--timeout", timeout_s, zero_ok=True)
    check_seconds("--interval", interval_s)
    start = clock()
    deadline = start + timeout_s
    attempt = 0
    while True:
        attempt += 1
        probe_start = clock()
        value = probe(Tick(attempt, probe_start - start, max(0.0, deadline - probe_start)))
        now = clock()
        if value is not None or now >= deadline:
            return Polled(value, attempt, now - start)
        if progress is not None:
            progress(Tick(attempt, now - start, deadline - now))
        sleep(max(0.0, min(interval_s - (now - probe_start), deadline - now)))


@dataclass(frozen=True)
class Latest(Generic[T]):
    value: T  # the last reading
    timed_out: bool  # the wait ended at its deadline, the reading not final
    wait_s: float  # how long it waited at the most (0: one reading)
    attempts: int
    elapsed_s: float


def poll_latest(
    read: Callable[[], T],
    *,
    final: Callable[[T], bool],
    wait_s: float | None,
    interval_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Latest[T]:
    """`read()` once when `wait_s` is None (its reading is the answer, final or not); else every
    `interval_s` until `final(reading)` or `wait_s` seconds have passed (0: one reading)."""
    last: list[T] = []  # the latest reading only

    def probe(_tick: Tick) -> T | None:
        last[:] = [read()]
        return last[0] if wait_s is None or final(last[0]) else None

    timeout_s = wait_s or 0.0
    polled = poll(probe, timeout_s=timeout_s, interval_s=interval_s, clock=clock, sleep=sleep)
    return Latest(last[0], polled.value is None, timeout_s, polled.attempts, polled.elapsed_s)


def still_pending(summary: str, wait_s: float) -> str:
    """The summary of a reading that was not final when the wait of `wait_s` seconds ended."""
    return f"still pending after {wait_s:g} s: {summary}"
