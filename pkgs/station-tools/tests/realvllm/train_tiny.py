"""Train the tiny tool-calling test model (run inside the vLLM venv; deterministic, CPU only).

A 4-layer Qwen2-style model (~4 M parameters) with a byte-level BPE tokenizer trained here on the synthetic
chats of tiny_data.py, and the compact Hermes chat template. Served by vLLM with
`--enable-auto-tool-choice --tool-call-parser hermes`, tool_choice=auto yields real parsed tool calls.
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

import tiny_data
import torch
from chat_templates import HERMES_COMPACT
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SEED = 1234
VOCAB = 2048
STEPS = 400  # ~1.0 s/step on 2 free cores: ~7 min; the loss is flat from ~350
BATCH = 48
THREADS = 2  # fixed: the thread count changes float reductions, hence the weights
LR = 3e-3
WARMUP = 40
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TAGS = ["<tool_call>", "</tool_call>", "<tools>", "</tools>", "<tool_response>", "</tool_response>"]


def log(msg: str) -> None:
    print(f"train_tiny: {msg}", file=sys.stderr, flush=True)


def build_tokenizer() -> PreTrainedTokenizerFast:
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        min_frequency=2,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(tiny_data.corpus_lines(random.Random(SEED + 1), 4000), trainer)
    # The tags are ordinary (non-special) added tokens: one id each, kept when special tokens are skipped.
    tk.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAGS])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=2048,
    )
    tok.chat_template = HERMES_COMPACT
    return tok


def encode(tok: PreTrainedTokenizerFast, ex: tiny_data.Example) -> tuple[list[int], int]:
    prompt = tok.apply_chat_template(ex.messages, tools=ex.tools, add_generation_prompt=True, tokenize=False)
    p_ids = tok.encode(str(prompt), add_special_tokens=False)
    a_ids = tok.encode(ex.answer + "<|im_end|>", add_special_tokens=False)
    return p_ids + a_ids, len(p_ids)


def batches(tok: PreTrainedTokenizerFast, r: random.Random, n: int) -> list[dict[str, torch.Tensor]]:
    out = []
    pad = tok.pad_token_id
    for _ in range(n):
        seqs = [encode(tok, tiny_data.example(r)) for _ in range(BATCH)]
        width = max(len(s) for s, _ in seqs)
        ids = torch.full((BATCH, width), pad, dtype=torch.long)
        labels = torch.full((BATCH, width), -100, dtype=torch.long)
        mask = torch.zeros((BATCH, width), dtype=torch.long)
        for i, (s, plen) in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            labels[i, plen : len(s)] = torch.tensor(s[plen:])
            mask[i, : len(s)] = 1
        out.append({"input_ids": ids, "labels": labels, "attention_mask": mask})
    return out


def build_model(tok: PreTrainedTokenizerFast) -> Qwen2ForCausalLM:
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        bos_token_id=tok.convert_tokens_to_ids("<|im_start|>"),
        eos_token_id=eos,
        pad_token_id=tok.pad_token_id,
        use_sliding_window=False,
        dtype="float32",
    )
    config.architectures = ["Qwen2ForCausalLM"]
    return Qwen2ForCausalLM(config)


def train(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast) -> float:
    data_rng = random.Random(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.98), weight_decay=0.01)

    def lr_at(step: int) -> float:
        if step < WARMUP:
            return LR * (step + 1) / WARMUP
        frac = (step - WARMUP) / max(1, STEPS - WARMUP)
        return LR * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))

    model.train()
    t0 = time.monotonic()
    loss_avg = 0.0
    chunk = 50
    step = 0
    while step < STEPS:
        for batch in batches(tok, data_rng, min(chunk, STEPS - step)):
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            loss = model(**batch).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            loss_avg = 0.9 * loss_avg + 0.1 * loss.item() if step else loss.item()
            step += 1
            if step % 25 == 0 or step == STEPS:
                el = time.monotonic() - t0
                log(
                    f"step {step}/{STEPS} loss {loss_avg:.4f} lr {lr_at(step - 1):.2e} "
                    f"{el:.0f} s ({el / step:.2f} s/step)"
                )
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
        max_new_tokens=64,
        do_sample=False,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    return str(tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True))


def evaluate(model: Qwen2ForCausalLM, tok: PreTrainedTokenizerFast) -> dict[str, Any]:
    model.eval()
    r = random.Random(SEED + 99)
    exact = 0
    n = 60
    with torch.no_grad():
        for _ in range(n):
            ex = tiny_data.example(r)
            exact += generate(model, tok, ex.messages, ex.tools).strip() == ex.answer
        # the smoke check's shape: get_weather alone, an everyday question
        weather = [tiny_data.TOOLS["get_weather"]]
        probes = [
            "What is the weather in Paris?",
            "What's the weather like in Berlin today?",
            "What's the weather in Boston, MA?",
            "How is the weather in Tokyo in fahrenheit?",
        ]
        calls = []
        for q in probes:
            text = generate(model, tok, [{"role": "user", "content": q}], weather)
            try:
                body = json.loads(text.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0])
                ok = body["name"] == "get_weather" and bool(body["arguments"].get("location"))
            except (IndexError, ValueError, KeyError, AttributeError):
                ok = False
            calls.append({"prompt": q, "output": text, "ok": ok})
        plain = generate(model, tok, [{"role": "user", "content": "Say hello in one word."}], None)
    return {"exact_match": exact / n, "weather_probes": calls, "plain": plain}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    threads = THREADS
    torch.set_num_threads(threads)
    random.seed(SEED)
    torch.manual_seed(SEED)
    t0 = time.monotonic()
    tok = build_tokenizer()
    model = build_model(tok)
    n_params = sum(p.numel() for p in model.parameters())
    log(
        f"tokenizer: {len(tok)} tokens ({time.monotonic() - t0:.1f} s); "
        f"model: {n_params / 1e6:.2f} M params; "
        f"{STEPS} steps x {BATCH} on {threads} threads"
    )
    seconds = train(model, tok)
    report = evaluate(model, tok)
    log(f"eval: {json.dumps(report)}")
    bad = [c for c in report["weather_probes"] if not c["ok"]]
    if bad or not report["plain"].strip():
        raise SystemExit(f"train_tiny: the trained model fails its own probes: {bad or report['plain']!r}")
    args.out.mkdir(parents=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    gen = {
        "bos_token_id": model.config.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        "do_sample": False,
    }
    (args.out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    (args.out / "train-report.json").write_text(
        json.dumps(
            {
                "train_seconds": round(seconds, 1),
                "steps": STEPS,
                "batch": BATCH,
                "threads": threads,
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
