"""Fine-tune tiny-tools into tiny-tools-glm: the same chats in GLM-4.5/4.7's format (vLLM venv, CPU only).

Starts from the trained tiny-tools weights and tokenizer (`--init-from`), adds GLM's turn markers and the
think/argument tags as tokens (their embeddings start at the mean of the others), and trains on
tiny_data.py's chats rendered by glm_format.py. Served by vLLM with the glm53 presets' flags
`--enable-auto-tool-choice --tool-call-parser glm47 --reasoning-parser glm45`, tool_choice=auto yields
real parsed tool calls and the thought comes back as reasoning content. Deterministic for a given
tiny-tools build; fails (writes nothing) when the result misses its own probes.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import glm_format
import tiny_data
import torch
import train_tiny
from tokenizers import AddedToken
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

SEED = 4321
STEPS = 150  # starts trained: the format is learnt in ~100 steps (~1.3 s/step on 2 free cores)
BATCH = 32
LR = 1.5e-3
WARMUP = 10
THREADS = train_tiny.THREADS  # fixed: the thread count changes float reductions, hence the weights


def log(msg: str) -> None:
    print(f"train_tiny_glm: {msg}", file=sys.stderr, flush=True)


def load(init: Path) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    tok = PreTrainedTokenizerFast.from_pretrained(init)
    tok.add_special_tokens({"additional_special_tokens": glm_format.SPECIAL})  # type: ignore[dict-item]
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in glm_format.TAGS])
    tok.eos_token = "<|endoftext|>"  # as GLM's tokenizer; the turn-end tokens come from generation_config
    tok.chat_template = glm_format.GLM_COMPACT
    model = Qwen2ForCausalLM.from_pretrained(init, dtype=torch.float32)
    model.resize_token_embeddings(len(tok), mean_resizing=True)
    stops = [
        tok.convert_tokens_to_ids(t)
        for t in ("<|endoftext|>", glm_format.END_OF_TEXT, glm_format.END_OF_CALL)
    ]
    model.config.eos_token_id = stops
    model.config.bos_token_id = None
    model.generation_config.eos_token_id = stops
    return model, tok


def encode(tok: PreTrainedTokenizerFast, ex: tiny_data.Example) -> tuple[list[int], int]:
    prompt = tok.apply_chat_template(
        glm_format.glm_messages(ex.messages), tools=ex.tools, add_generation_prompt=True, tokenize=False
    )
    p_ids = tok.encode(str(prompt), add_special_tokens=False)
    a_ids = tok.encode(glm_format.glm_answer(ex), add_special_tokens=False)
    return p_ids + a_ids, len(p_ids)


def batch(tok: PreTrainedTokenizerFast, r: random.Random) -> dict[str, torch.Tensor]:
    seqs = [encode(tok, tiny_data.example(r)) for _ in range(BATCH)]
    width = max(len(s) for s, _ in seqs)
    ids = torch.full((BATCH, width), tok.pad_token_id, dtype=torch.long)
    labels = torch.full((BATCH, width), -100, dtype=torch.long)
    mask = torch.zeros((BATCH, width), dtype=torch.long)
    for i, (s, plen) in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        labels[i, plen : len(s)] = torch.tensor(s[plen:])
        mask[i, : len(s)] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def train(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast) -> float:
    r = random.Random(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.98), weight_decay=0.01)

    def lr_at(step: int) -> float:
        if step < WARMUP:
            return LR * (step + 1) / WARMUP
        return LR * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (step - WARMUP) / (STEPS - WARMUP))))

    model.train()
    t0 = time.monotonic()
    loss_avg = 0.0
    for step in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        loss = model(**batch(tok, r)).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_avg = 0.9 * loss_avg + 0.1 * loss.item() if step else loss.item()
        if (step + 1) % 25 == 0 or step + 1 == STEPS:
            el = time.monotonic() - t0
            log(f"step {step + 1}/{STEPS} loss {loss_avg:.4f} {el:.0f} s ({el / (step + 1):.2f} s/step)")
    return time.monotonic() - t0


def generate(
    model: Qwen2ForCausalLM,
    tok: PreTrainedTokenizerFast,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
) -> str:
    prompt = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    ids = torch.tensor([tok.encode(str(prompt), add_special_tokens=False)])
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=96,
        do_sample=False,
        eos_token_id=model.generation_config.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    return str(tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True))


def evaluate(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast) -> dict[str, Any]:
    model.eval()
    r = random.Random(SEED + 99)
    n, exact = 30, 0
    weather = [tiny_data.TOOLS["get_weather"]]
    probes = [
        "What is the weather in Paris in celsius?",  # smoke's own request
        "What is the weather in Paris?",
        "What's the weather like in Berlin today?",
        "What's the weather in Boston, MA?",
        "How is the weather in Tokyo in fahrenheit?",
    ]
    with torch.no_grad():
        for _ in range(n):
            ex = tiny_data.example(r)
            want = glm_format.glm_answer(ex).rsplit("<|", 1)[0]  # without the (skipped) end-of-turn token
            exact += generate(model, tok, glm_format.glm_messages(ex.messages), ex.tools).strip() == want
        calls = []
        for q in probes:
            text = generate(model, tok, [{"role": "user", "content": q}], weather)
            call = glm_format.parse_glm_call(text)
            ok = (
                "</think>" in text
                and call is not None
                and call[0] == "get_weather"
                and bool(call[1].get("location"))
            )
            calls.append({"prompt": q, "output": text, "ok": ok})
        plain = generate(model, tok, [{"role": "user", "content": "Say hello."}], None)
    return {"exact_match": exact / n, "weather_probes": calls, "plain": plain}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--init-from", type=Path, required=True, help="the built tiny-tools directory")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    random.seed(SEED)
    torch.manual_seed(SEED)
    model, tok = load(args.init_from)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"from {args.init_from}: {len(tok)} tokens, {n_params / 1e6:.2f} M params; {STEPS} steps x {BATCH}")
    seconds = train(model, tok)
    t0 = time.monotonic()
    report = evaluate(model, tok)
    log(f"eval ({time.monotonic() - t0:.0f} s): {json.dumps(report)}")
    bad = [c for c in report["weather_probes"] if not c["ok"]]
    plain = report["plain"].split("</think>", 1)
    if bad or len(plain) != 2 or not plain[1].strip():
        raise SystemExit(f"train_tiny_glm: the model fails its own probes: {bad or report['plain']!r}")
    args.out.mkdir(parents=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    gen = {
        "eos_token_id": model.generation_config.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        "do_sample": False,
    }
    (args.out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    (args.out / "train-report.json").write_text(
        json.dumps(
            {
                "init_from": args.init_from.name,
                "train_seconds": round(seconds, 1),
                "steps": STEPS,
                "batch": BATCH,
                "threads": THREADS,
                "params": n_params,
                **report,
            },
            indent=2,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
