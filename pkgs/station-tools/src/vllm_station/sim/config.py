"""What the simulator is told: its timing schedule, its tokenizer and its failure injection.

Schedule per request (all times from the moment the request's bytes arrive), without a profile:
    first token at  ttft + prefill_per_token × prompt_tokens (+ jitter)
    token k at      first + k × itl (+ jitter, uniform in ±jitter, never before the previous token)
With a profile (`profiles.py`): one prefill queue, and each token's gap from the number of requests in the
engine at that moment.

Tokenizer (also `/tokenize`): one whitespace-separated word is one token; each chat message adds
`MESSAGE_OVERHEAD` tokens and the generation prompt `GENERATION_OVERHEAD`.

Failure injection (`--fail KIND=RATE,...`, seeded): `5xx` (HTTP 500 JSON error before streaming), `4xx`
(HTTP 400), `truncate` (connection dropped after half the tokens, no terminating chunk), `stall` (role chunk,
then nothing until the client gives up), `error_event` (an SSE `{"error": …}` event mid-stream, like vLLM's
GenerationError, then `[DONE]`).

Engine modes (`--engine`, or at run time `POST /sim/engine {"mode": …}`), for `station watchdog`:
`normal`; `wedge` (vLLM's engine core dead behind a live API server: /health 200, `/metrics` frozen at the
moment of the wedge with nothing running, no request ever gets a token); `serial` (one engine that
prefills one request at a time, as vLLM's chunked prefill does with a long prompt: a request waits behind
a long prefill, counted in `num_requests_waiting`, while `kv_cache_usage_perc` grows with the prefill's
progress and the token counters move only at its first token, as vLLM's do).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm_station.errors import UsageError
from vllm_station.sim.profiles import Profile

MESSAGE_OVERHEAD = 4
GENERATION_OVERHEAD = 3
FAIL_KINDS = ("5xx", "4xx", "truncate", "stall", "error_event")
ENGINE_MODES = ("normal", "wedge", "serial")
WORD_TEXT = (  # one token each in common BPE/SentencePiece vocabularies
    "the of and to in is it that was for on are as with his they at be this from have or one had by word "
    "but not what all were we when your can said there use an each which she do how their if will up "
    "other about out many then them these so some her would make like him into time has look two more "
    "write go see number no way could people my than first water been call who oil its now find long down "
    "day did get come made may part"
)
WORDS = WORD_TEXT.split()


@dataclass
class SimConfig:
    model: str = "sim"
    ttft: float = 0.05
    itl: float = 0.01
    jitter: float = 0.0
    prefill_per_token: float = 0.0
    output_len: int = 64
    eos_after: int | None = None
    max_model_len: int = 131072
    fail: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    tokenize: bool = True
    api_key: str | None = None
    stall_seconds: float = 300.0
    engine: str = "normal"  # ENGINE_MODES
    gates: str | None = None  # None, or `tools.MODES`: answer the quality gates (reference or one fault)
    profile: Profile | None = None  # a calibrated schedule (profiles.py) instead of ttft/itl
    time_scale: float = 1.0  # multiplies the profile's prefill time (never its decode)

    def first_token_delay(self, prompt_tokens: int) -> float:
        if self.profile is not None:
            return self.profile.ttft_alone(prompt_tokens, self.time_scale)
        return self.ttft + self.prefill_per_token * prompt_tokens


def count_tokens(messages: list[dict[str, Any]] | None, prompt: str | None = None) -> int:
    """The simulator's tokenizer: words, plus a fixed template overhead per message."""
    if prompt is not None:
        return len(prompt.split())
    total = GENERATION_OVERHEAD
    for msg in messages or []:
        content = msg.get("content")
        if isinstance(content, list):  # [{"type": "text", "text": ...}]
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += MESSAGE_OVERHEAD + len(str(content or "").split())
    return total


def parse_fail(spec: str | None) -> dict[str, float]:
    out: dict[str, float] = {}
    if not spec:
        return out
    for part in spec.split(","):
        kind, _, rate = part.strip().partition("=")
        if kind not in FAIL_KINDS:
            raise UsageError(f"--fail: unknown kind {kind!r}; choose from {', '.join(FAIL_KINDS)}")
        try:
            out[kind] = float(rate)
        except ValueError:
            raise UsageError(f"--fail: {part!r} is not KIND=RATE (e.g. 5xx=0.1)") from None
    if sum(out.values()) > 1:
        raise UsageError("--fail: the rates add up to more than 1")
    return out
