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
    config_path = directory / CONFIG_NAME
    if config_path.is_file():
        try:
            config = load_json(config_path)
        except ValueError as exc:
            raise ValueError(f"{config_path}: {exc}") from exc
        qc = config.get("quantization_config") if isinstance(config, dict) else None
        if isinstance(qc, dict) and isinstance(qc.get("kv_cache_quant_algo"), str):
            source = f"{CONFIG_NAME} quantization_config.kv_cache_quant_algo"
            return KvCacheQuant(qc["kv_cache_quant_algo"], source)
    quant_path = directory / QUANT_CONFIG_NAME
    if quant_path.is_file():
        try:
            hq = load_json(quant_path)
        except ValueError as exc:
            raise ValueError(f"{quant_path}: {exc}") from exc
        q = hq.get("quantization") if isinstance(hq, dict) else None
        if isinstance(q, dict) and isinstance(q.get("kv_cache_quant_algo"), str):
            source = f"{QUANT_CONFIG_NAME} quantization.kv_cache_quant_algo"
            return KvCacheQuant(q["kv_cache_quant_algo"], source)
    return KvCacheQuant(None, f"no kv_cache_quant_algo in {CONFIG_NAME} or {QUANT_CONFIG_NAME}")
