"""Prompts of an exact token count, different for every request (so prefix caching cannot shortcut them).

A prompt is a seeded random sequence of common English words that are one token each in the usual BPE and
SentencePiece vocabularies (space-separated, so pre-tokenisers never merge across words). The chat-template
overhead is measured once; then `words = target − overhead` and the count is checked — through the server's
`/tokenize` (vLLM: `{"model", "messages"}` → `{"count"}`), else a local tokenizer (`--tokenizer PATH`, with
`transformers` or `tokenizers` importable), else not at all (the report says the lengths are approximate;
the server's `usage.prompt_tokens` is what the metrics use either way).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_station.errors import UsageError

log = logging.getLogger("vllm_station.commands.bench")

_WORD_TEXT = (  # one token each in common BPE/SentencePiece vocabularies
    "the of and to in is it that was for on are as with his they at be this from have or one had by but "
    "not what all were we when your can said there use an each which she do how their if will up other "
    "about out many then them these so some her would make like him into time has look two more write go "
    "see number no way could people my than first water been call who its now find long down day did get "
    "come made may part over new sound take only little work know place year live me back give most very "
    "after thing our just name good man think say great where help through much before line right too "
    "mean old any same tell boy follow came want show also around form three small set put end does "
    "another well large must big even such because turn here why ask went men read need land different "
    "home us move try kind hand picture again change off play spell air away animal house point page "
    "letter mother answer found study still learn should world high every near add food between own below "
    "country plant last school father keep tree never start city earth eye light thought head under story "
    "saw left few while along might close something seem next hard open example begin life always those "
    "both paper together got group often run"
)
WORDS = _WORD_TEXT.split()

Counter = Callable[[list[dict[str, Any]]], Awaitable[int | None]]


def messages_for(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def random_text(n_words: int, rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=max(0, n_words)))


@dataclass
class PromptSet:
    texts: list[str]
    target: int
    counted_by: str  # "server /tokenize" | "local tokenizer <path>" | "none (approximate)"
    verified: int  # how many prompts were checked
    exact: bool  # every checked prompt had exactly `target` tokens


def local_counter(path: Path) -> Counter:
    """A counter from a local tokenizer directory; raises UsageError naming what is missing."""
    try:
        from transformers import AutoTokenizer  # type: ignore[import-not-found,unused-ignore]

        tok: Any = AutoTokenizer.from_pretrained(str(path))

        async def count_tf(messages: list[dict[str, Any]]) -> int | None:
            if getattr(tok, "chat_template", None):
                ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
                return len(ids)
            return len(tok.encode(messages[-1]["content"]))

        return count_tf
    except ImportError:
        pass
    try:
        from tokenizers import Tokenizer  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise UsageError(
            f"--tokenizer {path}: neither transformers nor tokenizers is importable; install one, "
            "or bench a server that serves /tokenize"
        ) from None
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise UsageError(f"--tokenizer: {file} does not exist")
    tk: Any = Tokenizer.from_file(str(file))
    log.warning("tokenizers only: prompt counts exclude the chat template (no transformers)")

    async def count_tk(messages: list[dict[str, Any]]) -> int | None:
        return len(tk.encode(messages[-1]["content"]).ids)

    return count_tk


async def build(
    n: int,
    target: int,
    counter: Counter | None,
    counted_by: str,
    seed: int,
    *,
    verify: int = 3,
) -> PromptSet:
    """`n` distinct prompts of `target` tokens (template included). Checks the first `verify` exactly."""
    if counter is None:
        approx = [random_text(target, random.Random(f"{seed}:{target}:{i}")) for i in range(n)]
        return PromptSet(approx, target, "none (approximate: one word per token)", 0, False)
    probe = random_text(32, random.Random(f"{seed}:probe"))
    c32 = await counter(messages_for(probe))
    if c32 is None:
        raise UsageError("the tokenizer gave no count")
    overhead = c32 - 32
    words = max(1, target - overhead)
    texts: list[str] = []
    checked = 0
    exact = True
    for i in range(n):
        rng = random.Random(f"{seed}:{target}:{i}")
        text = random_text(words, rng)
        if i < verify:
            for _ in range(6):  # adjust a word at a time until the count matches
                got = await counter(messages_for(text))
                if got is None or got == target:
                    break
                parts = text.split(" ")
                if got > target:
                    parts = parts[: max(1, len(parts) - (got - target))]
                else:
                    parts += rng.choices(WORDS, k=target - got)
                text = " ".join(parts)
            else:
                got = await counter(messages_for(text))
            checked += 1
            exact = exact and got == target
            if i == 0 and got is not None:
                words = len(text.split(" "))
        texts.append(text)
    return PromptSet(texts, target, counted_by, checked, exact)
