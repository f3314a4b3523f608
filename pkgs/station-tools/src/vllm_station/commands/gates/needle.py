"""`station gates needle`: long-context retrieval at exact prompt lengths up to ~90 % of `max_model_len`.

A haystack of plain sentences (seeded, no digits) hides needles — `The special magic number for KEY is
NNNNNNN.` — at a depth of 0–100 % of the prompt; the question asks for one key's number. Variants:

* `single`    one needle, asked for (every length × every depth);
* `multikey`  four needles with different keys, one asked for; the others are distractors (depth 50 %);
* `tool`      one needle; the model must call `record_number(key, number)` with it (depth 50 %) — a tool
              call near full context, where parsers with speculative decoding (MTP) have broken.

Prompts are built to an exact token count with the server's `/tokenize` (chat template included):

1. calibration (two calls, cached per server, model and vLLM version in the calibration file): tokens
   per haystack sentence and the prompt's fixed overhead;
2. one call measures the prompt built from the calibration; when it is off, pad words (or fewer
   sentences) correct it and one more call verifies — 1–2 calls per prompt, 3–4 for the first.

Per length and depth the report has: retrieved or not, TTFT, prefill tok/s (prompt tokens / TTFT), the
request's wall time, the prompt tokens the server counted, and the /tokenize calls spent. A failure that
passes at a shorter length with the same variant and depth is `long_context`; otherwise `needle_missed`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_station import bounded, output
from vllm_station.api import ApiClient, ApiError, ApiUnreachable, ChatChunk
from vllm_station.api.served import MAX_CONTEXT
from vllm_station.api.sse import excerpt
from vllm_station.batteries import classes as C
from vllm_station.batteries.needles import NEEDLE, QUESTION, RECORD_TOOL, TOOL_QUESTION
from vllm_station.commands.gates.checker import parse_arguments
from vllm_station.commands.gates.common import Progress, Sampling, ask_stream, stopped_by
from vllm_station.errors import UsageError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
VARIANTS = ("single", "multikey", "tool")
MULTIKEY_NEEDLES = 4
# The recipe's go-live record on one GB300 (GLM-5.3-Flash, 1,048,576-token context).
RECORD_PROMPT_TOKENS = 968_377
RECORD_WALL_S = (33.5, 37.0)

# ---- the haystack ----------------------------------------------------------------------------------
FILLER_VERSION = 2  # part of the calibration key: change it when the sentences change
# Every slot has a fixed number of common words, so sentences cost nearly the same tokens everywhere and
# the calibration's rate holds for a million tokens.
_SUBJECTS = (
    "the sailor", "a teacher", "the baker", "our neighbour", "the student", "a painter", "the guard",
    "the farmer", "a doctor", "the driver",
)  # fmt: skip
_VERBS = (
    "carried", "painted", "studied", "repaired", "described", "collected", "measured", "followed",
    "ignored", "admired",
)  # fmt: skip
_OBJECTS = (
    "a boat", "the clock", "a basket", "the bridge", "a lamp", "the garden", "a letter", "the wall",
    "a kite", "the train",
)  # fmt: skip
_PLACES = (
    "near the river", "behind the market", "under the sky", "at the edge", "before the sunrise",
    "in the harbour", "along the road", "beside the library", "after the rain", "on the hill",
)  # fmt: skip
_KEY_A = (
    "amber",
    "crimson",
    "silent",
    "golden",
    "hidden",
    "northern",
    "velvet",
    "frozen",
    "bright",
    "distant",
)
_KEY_B = ("harbor", "falcon", "meadow", "lantern", "river", "summit", "orchard", "comet", "canyon", "willow")
UNDERSHOOT = 0.001  # of the target: the first build aims this much short
PAD_WORD = "the"  # one token in the common BPE and SentencePiece vocabularies


def sentences(n: int, seed: int) -> list[str]:
    """`n` haystack sentences (no digits, so the needle is the only number)."""
    rng = random.Random(f"needle-filler:{seed}")
    out: list[str] = []
    for _ in range(n):
        s = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_PLACES)}."
        out.append(s[0].upper() + s[1:])
    return out


@dataclass(frozen=True)
class Needle:
    key: str
    value: str


# ---- building prompts of an exact length -------------------------------------------------------------


@dataclass
class Calibration:
    tokens_per_sentence: float
    overhead: int  # tokens of the prompt besides the haystack (template, needle, question)
    source: str  # "measured" | "cached"


class PromptBuilder:
    """Prompts of exactly `target` tokens, counted by the server's /tokenize; counts its calls."""

    SAMPLE = 400  # sentences in the calibration sample

    def __init__(
        self,
        api: ApiClient,
        model: str,
        cache: Path | None,
        seed: int = 0,
        timeout: float = 600.0,
        template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.api, self.model, self.cache, self.seed, self.timeout = api, model, cache, seed, timeout
        self.template_kwargs = template_kwargs  # the requests' chat_template_kwargs: the same rendering
        self.calls = 0
        self.calibration: Calibration | None = None
        self._pool: list[str] = []
        # (target, needles, question kind) -> (sentences, pad words) that hit it last time
        self._fit: dict[tuple[int, int, str], tuple[int, int]] = {}

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
        """POST /tokenize (chat template, tools and generation prompt included): the prompt's token count."""
        self.calls += 1
        body: dict[str, Any] = {"model": self.model, "messages": messages, "add_generation_prompt": True}
        if tools:
            body["tools"] = tools
        if self.template_kwargs:
            body["chat_template_kwargs"] = self.template_kwargs
        obj = self.api.post_json("/tokenize", body, timeout=self.timeout)  # vLLM's own endpoint, at the root
        n = obj.get("count") if isinstance(obj, dict) else None
        if not isinstance(n, int) or isinstance(n, bool):
            raise UsageError(f"/tokenize answered without a count: {json.dumps(obj)[:200]}")
        if not 0 < n <= 4 * MAX_CONTEXT:  # a server-reported size: prompts are sized from it
            raise UsageError(f"/tokenize answered a count of {n:,} tokens, outside 1 to {4 * MAX_CONTEXT:,}")
        return n

    def pool(self, n: int) -> list[str]:
        if len(self._pool) < n:
            self._pool = sentences(max(n, 2 * len(self._pool), 1024), self.seed)
        return self._pool[:n]

    def _cache_key(self) -> str:
        try:
            version = str((self.api.get_json("/version", timeout=30) or {}).get("version"))
        except ApiError:
            version = "unknown"
        raw = f"{self.api.root_url}|{self.model}|{version}|filler{FILLER_VERSION}"
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    def calibrate(self) -> Calibration:
        if self.calibration is not None:
            return self.calibration
        key = self._cache_key() if self.cache is not None else ""
        cached = _read_cache(self.cache).get(key) if self.cache is not None else None
        rate, overhead = (cached.get("tokens_per_sentence"), cached.get("overhead")) if isinstance(
            cached, dict) else (None, None)  # fmt: skip
        if (
            isinstance(rate, int | float) and not isinstance(rate, bool) and 0 < rate <= 10_000
            and isinstance(overhead, int) and not isinstance(overhead, bool) and 0 <= overhead <= MAX_CONTEXT
        ):  # fmt: skip  # an entry out of any real range is not trusted: calibrate afresh
            self.calibration = Calibration(float(rate), overhead, "cached")
            return self.calibration
        probe = [Needle("amber-harbor", "1234567")]
        question = QUESTION.format(key="amber-harbor")
        small = self.count(_messages(self.pool(self.SAMPLE), probe, 0.5, 0, question))
        large = self.count(_messages(self.pool(2 * self.SAMPLE), probe, 0.5, 0, question))
        rate = (large - small) / self.SAMPLE
        if not 0.5 <= rate <= 1000:  # a sentence of ~9 words: anything else would size prompts wrongly
            raise UsageError(
                f"/tokenize counts do not grow with the prompt as text does ({small} then {large} tokens)"
            )
        self.calibration = Calibration(rate, round(small - rate * self.SAMPLE), "measured")
        if self.cache is not None:
            data = _read_cache(self.cache)
            data[key] = {
                "tokens_per_sentence": rate,
                "overhead": self.calibration.overhead,
                "at": time.time(),
            }
            _write_cache(self.cache, data)
        return self.calibration

    def build(
        self,
        target: int,
        needles: Sequence[Needle],
        depth: float,
        question: str,
        *,
        tools: list[dict[str, Any]] | None = None,
        max_rounds: int = 6,
    ) -> tuple[list[dict[str, Any]], int]:
        """(messages, their token count): exactly `target` unless the tokenizer makes it impossible."""
        cal = self.calibrate()
        # Aim a little short (padding up costs one more call, cutting back two), and shorter still by a
        # generous guess at what this prompt has beyond the calibration's: more needles, a longer
        # question, tools in the template.
        rate = cal.tokens_per_sentence
        margin = max(2, math.ceil(target * UNDERSHOOT))
        margin += math.ceil((len(needles) - 1) * 3 * rate) + 2 * max(0, len(question.split()) - 20)
        margin += len(json.dumps(tools)) // 2 if tools else 0
        n = max(0, math.floor((target - cal.overhead - margin) / rate))
        pad = 0
        shape = (target, len(needles), question.split(" ", 1)[0])
        if shape in self._fit:  # another depth or key of a prompt built before: the same sentences fit
            n, pad = self._fit[shape]
        pad_rate = 1.0
        last: tuple[int, int] | None = None  # (pad words, count) of the previous measurement
        for _ in range(max_rounds):
            messages = _messages(self.pool(n), needles, depth, pad, question)
            got = self.count(messages, tools)
            if got == target:
                self._fit[shape] = (n, pad)
                return messages, got
            if last is not None and last[0] != pad and last[1] != got:
                pad_rate = max(0.25, (got - last[1]) / (pad - last[0]))
            last = (pad, got)
            diff = target - got
            if diff > 0:
                pad = min(pad + max(1, round(diff / pad_rate)), target)  # never more words than tokens
            elif pad >= round(-diff / pad_rate) >= 1:
                pad -= round(-diff / pad_rate)
            else:  # too long even without pad words: drop sentences, then pad back up
                n = max(0, n - math.ceil(-diff / cal.tokens_per_sentence) - 1)
                pad, last = 0, None
        messages = _messages(self.pool(n), needles, depth, pad, question)
        return messages, self.count(messages, tools)


def _messages(
    filler: list[str], needles: Sequence[Needle], depth: float, pad: int, question: str
) -> list[dict[str, Any]]:
    body = list(filler)
    if pad:
        body.append(" ".join([PAD_WORD] * pad))
    # the first needle (the one asked for) at `depth`; distractors spread evenly after it
    for i, nd in reversed(list(enumerate(needles))):
        d = (depth + i / len(needles)) % 1.0 if i else depth
        body.insert(round(d * len(body)), NEEDLE.format(key=nd.key, value=nd.value))
    return [{"role": "user", "content": " ".join(body) + "\n\n" + question}]


def _read_cache(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        obj = bounded.read_json(path, limit=bounded.CONFIG_LIMIT)
    except (OSError, ValueError):  # unreadable, not a regular file, too large or deep: calibrate afresh
        return {}
    return obj if isinstance(obj, dict) else {}


def _write_cache(path: Path, data: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        output.replace_text(path, json.dumps(data, indent=1) + "\n", option="--calibration-cache")
    except OSError as exc:  # output.OutputError is one
        log.warning("cannot write the needle calibration cache %s: %s", path, exc)


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vllm-station" / "needle-calibration.json"


# ---- the cases (their lengths and depths: `batteries.needles`) -------------------------------------


@dataclass(frozen=True)
class NeedleCase:
    variant: str
    length: int
    depth: int  # percent

    @property
    def id(self) -> str:
        return f"{self.variant}-{self.length}-d{self.depth}"


def plan(lengths: Sequence[int], depths: Sequence[int], variants: Sequence[str]) -> list[NeedleCase]:
    out: list[NeedleCase] = []
    for length in lengths:
        for v in variants:
            for d in depths if v == "single" else [50]:
                out.append(NeedleCase(v, length, d))
    return out


# ---- running ------------------------------------------------------------------------------------


@dataclass
class NeedleResult:
    id: str
    variant: str
    length: int  # the target prompt tokens
    depth: int
    retrieved: bool
    cls: str | None  # the failure class, None when retrieved
    detail: str
    prompt_tokens: int | None  # as the server counted them (usage), else /tokenize's count
    exact: bool  # /tokenize counted exactly `length`
    tokenize_calls: int
    build_s: float
    ttft_s: float | None
    prefill_tok_s: float | None
    wall_s: float | None
    answer: str | None = None


@dataclass
class NeedleReport:
    schema: int
    gate: str
    base_url: str
    model: str
    max_model_len: int
    tokenizer: str  # how prompts were counted
    calibration: dict[str, Any]
    tokenize_calls: int
    record: dict[str, Any]
    cases: int
    passed: int
    result: str
    by_class: dict[str, int]
    results: list[NeedleResult] = field(default_factory=list)
    partial: bool = False  # stopped early (Ctrl-C, the server went away): `stopped` says why
    stopped: str | None = None


def _needles(case: NeedleCase, rng: random.Random) -> list[Needle]:
    count = MULTIKEY_NEEDLES if case.variant == "multikey" else 1
    keys: list[str] = []
    while len(keys) < count:
        k = f"{rng.choice(_KEY_A)}-{rng.choice(_KEY_B)}"
        if k not in keys:
            keys.append(k)
    return [Needle(k, str(rng.randrange(1_000_000, 10_000_000))) for k in keys]


def _judge(case: NeedleCase, needles: list[Needle], content: str, calls: list[Any]) -> tuple[bool, str]:
    want = needles[0]
    if case.variant == "tool":
        for call in calls:
            args, _ = parse_arguments(call.arguments)
            if call.name == "record_number" and args is not None and str(args.get("number")) == want.value:
                return True, f"record_number({want.key}, {want.value})"
        shown = ", ".join(f"{c.name}({c.arguments[:60]})" for c in calls) or "no call"
        return False, f"expected record_number with {want.value}; got {shown}"
    digits = re.sub(r"[\s,.]", "", content)
    if want.value in digits:
        return True, f"answered {want.value}"
    other = next((n for n in needles[1:] if n.value in digits), None)
    if other is not None:
        return False, f"answered the number of the distractor {other.key} ({other.value}), not {want.value}"
    return False, f"expected {want.value}; answered {content.strip()[:80]!r}"


def run_case(api: ApiClient, model: str, builder: PromptBuilder, case: NeedleCase, sampling: Sampling,
             max_model_len: int, seed: int) -> NeedleResult:  # fmt: skip
    rng = random.Random(f"needle:{seed}:{case.id}")
    needles = _needles(case, rng)
    question = (TOOL_QUESTION if case.variant == "tool" else QUESTION).format(key=needles[0].key)
    calls_before = builder.calls
    t0 = time.perf_counter()
    tools = [RECORD_TOOL] if case.variant == "tool" else None
    messages, counted = builder.build(case.length, needles, case.depth / 100, question, tools=tools)
    build_s = time.perf_counter() - t0
    room = max(1, max_model_len - counted)
    ask = Sampling(min(sampling.max_tokens, room), sampling.temperature, sampling.seed, sampling.extra)
    chunks: list[ChatChunk] = []
    ans = ask_stream(
        api, model, messages, ask, tools=tools, tool_choice="auto" if tools else None, chunks_out=chunks
    )
    common = dict(
        id=case.id, variant=case.variant, length=case.length, depth=case.depth, exact=counted == case.length,
        tokenize_calls=builder.calls - calls_before, build_s=round(build_s, 3),
    )  # fmt: skip
    if not ans.ok:
        return NeedleResult(**common, retrieved=False, cls=C.REQUEST_FAILED, detail=ans.error or "",  # type: ignore[arg-type]
                            prompt_tokens=counted, ttft_s=None, prefill_tok_s=None, wall_s=None)  # fmt: skip
    first = next(
        (c.elapsed_s for c in chunks if c.content or c.reasoning_content or c.tool_calls),
        chunks[0].elapsed_s if chunks else None,
    )
    usage = next((c.usage for c in reversed(chunks) if c.usage is not None), None)
    prompt_tokens = usage.prompt_tokens if usage is not None and usage.prompt_tokens else counted
    ok, detail = _judge(case, needles, ans.content or "", ans.calls)
    return NeedleResult(
        **common,  # type: ignore[arg-type]
        retrieved=ok,
        cls=None if ok else C.NEEDLE_MISSED,
        detail=detail,
        prompt_tokens=prompt_tokens,
        ttft_s=None if first is None else round(first, 4),
        prefill_tok_s=round(prompt_tokens / first, 1) if first else None,
        wall_s=round(ans.latency_s, 4),
        answer=(ans.content or "")[:200] or None,
    )


def classify(results: list[NeedleResult]) -> None:
    """A miss that passes at a shorter length (same variant and depth) breaks with length: long_context."""
    for r in results:
        if r.retrieved or r.cls != C.NEEDLE_MISSED:
            continue
        if any(
            o.retrieved and o.variant == r.variant and o.depth == r.depth and o.length < r.length
            for o in results
        ):
            r.cls = C.LONG_CONTEXT


def run_battery(
    api: ApiClient,
    model: str,
    cases: Sequence[NeedleCase],
    sampling: Sampling,
    *,
    max_model_len: int,
    cache: Path | None,
    seed: int = 0,
    quiet: bool = False,
) -> NeedleReport:
    kwargs = sampling.extra.get("chat_template_kwargs")
    builder = PromptBuilder(
        api,
        model,
        cache,
        seed,
        timeout=api.timeout,
        template_kwargs=kwargs if isinstance(kwargs, dict) else None,
    )
    progress = Progress(len(cases), quiet, "needle ")
    results: list[NeedleResult] = []
    stopped: str | None = None
    try:
        for case in cases:
            try:
                r = run_case(api, model, builder, case, sampling, max_model_len, seed)
            except ApiUnreachable:
                raise
            except ApiError as err:  # /tokenize failed: the case cannot be built
                r = NeedleResult(case.id, case.variant, case.length, case.depth, False, C.REQUEST_FAILED,
                                 str(err), None, False, 0, 0.0, None, None, None)  # fmt: skip
            results.append(r)
            wall = f", {r.wall_s:.2f} s" if r.wall_s is not None else ""
            # a request that failed never asked the model: "request failed" and why (the error without its
            # "POST … at URL: " prefix), not a miss
            why = excerpt(r.detail.partition(": ")[2] or r.detail, 100)
            verdict = "retrieved" if r.retrieved else (
                f"request failed: {why}" if r.cls == C.REQUEST_FAILED else "MISSED"
            )
            progress.step(f"{r.id}: {verdict} ({r.prompt_tokens} tokens{wall})")
    except (KeyboardInterrupt, ApiUnreachable) as exc:  # a partial report of the cases that ran
        stopped = stopped_by(exc)
    classify(results)
    cal = builder.calibration
    by_class: dict[str, int] = {}
    for r in results:
        if r.cls:
            by_class[r.cls] = by_class.get(r.cls, 0) + 1
    passed = sum(r.retrieved for r in results)
    return NeedleReport(
        schema=SCHEMA_VERSION,
        gate="needle",
        base_url=api.api_url,
        model=model,
        max_model_len=max_model_len,
        tokenizer="server /tokenize (chat template included)",
        calibration={}
        if cal is None
        else {
            "tokens_per_sentence": round(cal.tokens_per_sentence, 4),
            "overhead": cal.overhead,
            "source": cal.source,
        },
        tokenize_calls=builder.calls,
        record={"prompt_tokens": RECORD_PROMPT_TOKENS, "wall_s": list(RECORD_WALL_S)},
        cases=len(results),
        passed=passed,
        # nothing run, or stopped early: not held
        result="pass" if results and passed == len(results) and stopped is None else "fail",
        by_class=dict(sorted(by_class.items())),
        results=results,
        partial=stopped is not None,
        stopped=stopped,
    )


def render(report: NeedleReport) -> str:
    from vllm_station import report as table

    rows = [
        (r.variant, r.length, f"{r.depth}%", "yes" if r.retrieved else "NO", r.prompt_tokens, r.ttft_s,
         r.prefill_tok_s, r.wall_s, r.tokenize_calls, r.cls or "")
        for r in report.results
    ]  # fmt: skip
    head = ["variant", "length", "depth", "retrieved", "prompt_tok", "ttft_s", "prefill_tok_s", "wall_s",
            "tokenize", "class"]  # fmt: skip
    lines = [table.table(head, rows)]
    for r in report.results:
        if not r.retrieved:
            lines.append(f"  {r.id}: {r.cls}: {r.detail}")
    cal = report.calibration
    lines.append(
        f"prompts counted by the server's /tokenize: {report.tokenize_calls} calls; calibration "
        f"{cal.get('source', '-')} ({cal.get('tokens_per_sentence', '-')} tokens per sentence)"
    )
    rec = report.record
    lines.append(
        f"recipe record: {rec['prompt_tokens']:,} prompt tokens retrieved in "
        f"{rec['wall_s'][0]}–{rec['wall_s'][1]} s per request (GLM-5.3-Flash, one GB300)"
    )
    verdict = "PASS" if report.result == "pass" else "FAIL"
    lines.append(
        f"{verdict}: needles {report.passed}/{report.cases} "
        f"({report.model}, max_model_len {report.max_model_len:,})"
    )
    return "\n".join(lines)
