"""Timing profiles: the simulator's schedule calibrated to what a recipe measured on its hardware.

A profile is a small model of one serving engine, with three parts:

- **Prefill** is one queue: the engine prefills one request at a time, each taking
  `prefill_step + prompt tokens / prefill_rate` seconds (× `--time-scale`), in arrival order. A request
  waits for the prefills ahead of it, so a burst of 32 users sees TTFTs of 1, 2, … 32 steps (median
  16.5 steps), and a closed loop whose requests arrive spread out sees about one step. `ttft_fixed` is
  added to every request's first token on its own (not queued).
- **Decode**: every token after the first comes `1 / decode_rate(n)` seconds after the one before it,
  where `n` is the number of requests in the engine at that moment (queued for prefill, prefilling or
  decoding). `decode_rate` interpolates the measured points linearly in log2(n) (log-linear in
  concurrency) and holds the first and last point's rate outside them.
- The served model name and context length of the recipe.

`gb300-flash-1m` (GLM-5.3-Flash, full 1M context, one DGX Station GB300), from the recipe's go-live record:
one user decodes at 145.9 tok/s with a TTFT of 0.061 s (at the bench's default 128-token prompt); 32 users
at 55.6 tok/s each (median TTFT 0.985 s, 1,464 tok/s aggregate); 256 users at 2,517 tok/s aggregate; the
needle at 968,377 prompt tokens answers in 33.5–37.0 s, which sets the prefill rate (968,377 tokens /
35.25 s, the middle of that range). The record gives no per-user rate at 256 users, so the point at 256 is
the rate at which this model's 256-user burst of 256-token answers makes 2,517 tok/s (`burst`).

`tp2-pair` (GLM-5.3 at TP=2 across two stations, MTP speculative decoding), from the recipe's
measured sweep (C=1, 8, 16, 32): per-user rate = 1 / mean inter-token latency (8.78, 19.01, 23.77,
77.90 ms), TTFT 0.480 s at one user. The recipe publishes no prefill rate: the single station's is used.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass

DEFAULT = "gb300-flash-1m"
FLAT = "flat"  # no profile: the fixed --ttft/--itl schedule
BENCH_PROMPT_TOKENS = 128  # `station bench`'s default --input-len, at which the recipes' TTFTs are read

# GB300: the needle's 968,377 tokens in 33.5–37.0 s; TTFT 0.061 s at one user and a 128-token prompt
_GB300_PREFILL_RATE = 968_377 / ((33.5 + 37.0) / 2)
_GB300_STEP = 0.061 - BENCH_PROMPT_TOKENS / _GB300_PREFILL_RATE


@dataclass(frozen=True)
class Profile:
    name: str
    model: str
    max_model_len: int
    decode_points: tuple[tuple[int, float], ...]  # (requests in the engine, per-user tok/s)
    prefill_rate: float  # prompt tokens per second of the prefill queue
    prefill_step: float  # seconds per prefill beyond its tokens (queued)
    ttft_fixed: float = 0.0  # seconds added to every first token, not queued
    summary: str = ""

    def decode_rate(self, n: int) -> float:
        """Per-user tok/s with n requests in the engine: linear in log2(n) between the points."""
        pts = self.decode_points
        if n <= pts[0][0]:
            return pts[0][1]
        for (c0, r0), (c1, r1) in itertools.pairwise(pts):
            if n == c1:
                return r1
            if n < c1:
                f = (math.log2(n) - math.log2(c0)) / (math.log2(c1) - math.log2(c0))
                return r0 + f * (r1 - r0)
        return pts[-1][1]

    def prefill_seconds(self, prompt_tokens: int, time_scale: float = 1.0) -> float:
        """One request's time in the prefill queue (the queue's step, not the wait before it)."""
        return (self.prefill_step + prompt_tokens / self.prefill_rate) * time_scale

    def ttft_alone(self, prompt_tokens: int, time_scale: float = 1.0) -> float:
        """TTFT of a request that finds the engine idle."""
        return self.ttft_fixed + self.prefill_seconds(prompt_tokens, time_scale)


@dataclass(frozen=True)
class BurstModel:
    """What the model predicts for C users released together, each asking N tokens (as `station bench
    burst` measures it): aggregate tok/s over the burst, median per-user tok/s (1 / ITL), median TTFT."""

    tok_s: float
    user_tok_s: float
    ttft_p50: float


def burst(profile: Profile, users: int, output_tokens: int, prompt_tokens: int = BENCH_PROMPT_TOKENS,
          time_scale: float = 1.0) -> BurstModel:  # fmt: skip
    """The profile's schedule for a burst, worked out event by event exactly as the server emits it."""
    step = profile.prefill_seconds(prompt_tokens, time_scale)
    first = [profile.ttft_fixed + (k + 1) * step for k in range(users)]
    left = [output_tokens - 1] * users
    end = list(first)
    active = users
    heap = [(t, i) for i, t in enumerate(first)]
    heapq.heapify(heap)
    while heap:
        t, i = heapq.heappop(heap)
        if left[i] == 0:
            end[i] = t
            active -= 1
            continue
        left[i] -= 1
        heapq.heappush(heap, (t + 1.0 / profile.decode_rate(active), i))
    if output_tokens > 1:
        user = sorted((output_tokens - 1) / (end[i] - first[i]) for i in range(users))
    else:
        user = [0.0]
    return BurstModel(
        tok_s=users * output_tokens / max(end),
        user_tok_s=_median(user),
        ttft_p50=_median(sorted(first)),
    )


def _median(s: list[float]) -> float:
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


# The GB300 point at 256 users: the rate at which `burst(gb300, 256, 256)` makes the record's 2,517 tok/s
# (found by bisection, pinned by tests/test_sim_profiles.py)
_GB300_RATE_256 = 14.455

PROFILES: dict[str, Profile] = {
    "gb300-flash-1m": Profile(
        name="gb300-flash-1m",
        model="glm-5.3-flash",
        max_model_len=1_048_576,
        decode_points=((1, 145.9), (32, 55.6), (256, _GB300_RATE_256)),
        prefill_rate=_GB300_PREFILL_RATE,
        prefill_step=_GB300_STEP,
        summary="GLM-5.3-Flash, 1M context, one DGX Station GB300",
    ),
    "tp2-pair": Profile(
        name="tp2-pair",
        model="glm-5.3",
        max_model_len=98_304,
        decode_points=((1, 1000 / 8.78), (8, 1000 / 19.01), (16, 1000 / 23.77), (32, 1000 / 77.90)),
        prefill_rate=_GB300_PREFILL_RATE,
        prefill_step=0.0,
        ttft_fixed=0.480 - BENCH_PROMPT_TOKENS / _GB300_PREFILL_RATE,
        summary="GLM-5.3 at TP=2 across two DGX Stations GB300",
    ),
}
NAMES = (*PROFILES, FLAT)
