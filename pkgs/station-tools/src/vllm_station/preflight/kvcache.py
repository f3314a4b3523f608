"""KV-cache capacity: how many tokens the GPU memory left after the weights holds, per KV dtype.

The formula (docs/preflight.md has the derivation)::

    budget_bytes    = round(gpu_memory_total × gpu_memory_utilization) − weights_bytes − overhead_bytes
    bytes_per_token = kv_layers × elements_per_token_per_layer × dtype_bytes
        MLA (DeepSeek/GLM-5 style):  elements = kv_lora_rank + qk_rope_head_dim   (one latent, no separate V)
        MHA/GQA:                     elements = 2 × num_key_value_heads × head_dim (K and V)
    kv_tokens       = floor(budget_bytes / bytes_per_token)
    full_requests   = kv_tokens / max_model_len
    demand_tokens   = max_model_len × max_num_seqs

Geometry comes from the checkpoint's config.json when the model directory has one; otherwise from a
built-in profile (GLM-5.3-Flash). Weights come from the checkpoint's *.safetensors sizes when present.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GB = 10**9
GiB = 1024**3

# bytes per element of the KV cache for vLLM's --kv-cache-dtype values ("auto" = the model dtype, bf16)
DTYPE_BYTES: dict[str, int] = {
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "auto": 2,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "half": 2,
    "float32": 4,
}


@dataclass(frozen=True)
class KvGeometry:
    attention: str  # "MLA" | "GQA"
    kv_layers: int  # layers that keep a per-token cache
    elements_per_token_layer: int
    source: str

    def bytes_per_token(self, dtype_bytes: int) -> int:
        return self.kv_layers * self.elements_per_token_layer * dtype_bytes


@dataclass(frozen=True)
class ModelProfile:
    """Assumptions for a model whose checkpoint is not on this machine."""

    name: str
    pattern: str  # regex matched against the configured model (repo id or path)
    geometry: KvGeometry
    weights_bytes: int
    gpu_memory_bytes: int  # the station's GPU memory when NVML cannot say
    overhead_bytes: int


# vLLM's non-KV runtime memory (activation peak of chunked prefill, CUDA graphs, NCCL, allocator
# slack), calibrated so the seed's GLM-5.3-Flash configuration gives vLLM's measured 5,933,986 tokens:
#   round(252e9 × 0.94) − 191e9 − 5,933,986 × 6,912 = 4,864,288,768 bytes ≈ 4.53 GiB
DEFAULT_OVERHEAD_BYTES = 4_864_288_768

GLM53_FLASH = ModelProfile(
    name="GLM-5.3-Flash profile",
    pattern=r"glm-5\.3-flash",
    # Assumption: GLM-5-family MLA latent cache (kv_lora_rank 512 + qk_rope_head_dim 64 = 576 elements per
    # token and layer) in 12 full-attention layers. The checkpoint's config is not on this machine; this
    # is the only geometry of the family consistent with the seed's figures (191 GB of weights on a
    # 252 GB GPU at 0.94 leaves ~45.9 GB: at most ~7.7 kB per token for 5.93 M tokens).
    geometry=KvGeometry("MLA", 12, 512 + 64, "assumed: GLM-5.3-Flash profile (12 MLA layers × 576)"),
    weights_bytes=191 * GB,
    gpu_memory_bytes=252 * GB,
    overhead_bytes=DEFAULT_OVERHEAD_BYTES,
)

PROFILES: tuple[ModelProfile, ...] = (GLM53_FLASH,)


def profile_for(model: str) -> ModelProfile | None:
    for profile in PROFILES:
        if re.search(profile.pattern, model, re.IGNORECASE):
            return profile
    return None


class GeometryError(ValueError):
    pass


def geometry_from_config(config: dict[str, Any], source: str) -> KvGeometry:
    """KV geometry from a Hugging Face config.json (text_config when nested)."""
    cfg = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    assert isinstance(cfg, dict)

    def integer(key: str) -> int | None:
        value = cfg.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    layers = integer("num_hidden_layers")
    if layers is None:
        raise GeometryError(f"{source}: no num_hidden_layers")
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        full = sum(1 for t in layer_types if t in ("full_attention", "attention"))
        if full:
            layers = full
    kv_lora_rank, rope = integer("kv_lora_rank"), integer("qk_rope_head_dim")
    if kv_lora_rank is not None:
        return KvGeometry("MLA", layers, kv_lora_rank + (rope or 0), source)
    heads = integer("num_attention_heads")
    kv_heads = integer("num_key_value_heads") or heads
    head_dim = integer("head_dim")
    hidden = integer("hidden_size")
    if head_dim is None and hidden is not None and heads is not None:
        head_dim = hidden // heads
    if kv_heads is None or head_dim is None:
        raise GeometryError(f"{source}: cannot tell KV heads and head_dim")
    return KvGeometry("GQA", layers, 2 * kv_heads * head_dim, source)


def read_geometry(model_dir: Path) -> KvGeometry | None:
    """Geometry from `<model_dir>/config.json`; None when there is no such file."""
    path = model_dir / "config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise GeometryError(f"{path}: not readable JSON ({err})") from err
    if not isinstance(data, dict):
        raise GeometryError(f"{path}: not a JSON object")
    return geometry_from_config(data, str(path))


def weights_bytes(model_dir: Path) -> int | None:
    """Sum of the checkpoint's *.safetensors sizes; None when there are none."""
    if not model_dir.is_dir():
        return None
    sizes = [p.stat().st_size for p in model_dir.glob("*.safetensors") if p.is_file()]
    return sum(sizes) if sizes else None


@dataclass
class KvEstimate:
    dtype: str
    dtype_bytes: int
    bytes_per_token: int
    budget_bytes: int
    tokens: int
    full_requests: float


def estimate(
    geometry: KvGeometry,
    dtype: str,
    gpu_memory_bytes: int,
    utilization: float,
    weights: int,
    overhead: int,
    max_model_len: int,
) -> KvEstimate:
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown kv-cache dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
    size = DTYPE_BYTES[dtype]
    per_token = geometry.bytes_per_token(size)
    budget = round(gpu_memory_bytes * utilization) - weights - overhead
    tokens = max(0, budget) // per_token if per_token else 0
    return KvEstimate(dtype, size, per_token, budget, tokens, round(tokens / max_model_len, 2))


_KV_SIZE = re.compile(r"GPU KV cache size:\s*([\d,]+)\s*tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request:\s*([\d.]+)x")


@dataclass
class MeasuredKv:
    log: str
    tokens: int
    concurrency: float | None
    per_request_tokens: int | None


def measured_from_logs(
    log_dir: Path, container: str = "vllm-station", limit: int = 8 << 20
) -> MeasuredKv | None:
    """vLLM's own figure from the newest saved container log (`station prestart` keeps them)."""
    if not log_dir.is_dir():
        return None
    logs = sorted(log_dir.glob(f"{container}-*.log"), key=lambda p: p.name, reverse=True)
    for path in logs:
        try:
            with path.open("rb") as f:
                text = f.read(limit).decode("utf-8", errors="replace")
        except OSError:
            continue
        sizes = _KV_SIZE.findall(text)
        if not sizes:
            continue
        conc = _CONCURRENCY.findall(text)
        return MeasuredKv(
            log=str(path),
            tokens=int(sizes[-1].replace(",", "")),
            concurrency=float(conc[-1][1]) if conc else None,
            per_request_tokens=int(conc[-1][0].replace(",", "")) if conc else None,
        )
    return None
