"""File names of a Hugging Face safetensors checkpoint, and what its configuration says about
quantization (the ModelOpt/NVFP4 layout keeps it in `hf_quant_config.json`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vllm_station.checkpoint.files import load_json

CONFIG_NAME = "config.json"
QUANT_CONFIG_NAME = "hf_quant_config.json"
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


@dataclass(frozen=True)
class KvCacheQuant:
    """The KV-cache quantization a checkpoint asks for (`kv_cache_quant_algo`, e.g. "FP8")."""

    algo: str | None  # None: the checkpoint names none (vLLM then caches in the model dtype)
    source: str  # where it was read, e.g. "config.json quantization_config.kv_cache_quant_algo"


def read_kv_cache_quant(directory: Path) -> KvCacheQuant:
    """`config.json` → `quantization_config.kv_cache_quant_algo`, else `hf_quant_config.json` →
    `quantization.kv_cache_quant_algo`. Raises ValueError naming a file that is there but unreadable."""
    # (file, the object in it that holds kv_cache_quant_algo), in order of precedence
    for name, section in ((CONFIG_NAME, "quantization_config"), (QUANT_CONFIG_NAME, "quantization")):
        path = directory / name
        if not path.is_file():
            continue
        try:
            data = load_json(path)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc
        block = data.get(section) if isinstance(data, dict) else None
        if isinstance(block, dict) and isinstance(block.get("kv_cache_quant_algo"), str):
            return KvCacheQuant(block["kv_cache_quant_algo"], f"{name} {section}.kv_cache_quant_algo")
    return KvCacheQuant(None, f"no kv_cache_quant_algo in {CONFIG_NAME} or {QUANT_CONFIG_NAME}")
