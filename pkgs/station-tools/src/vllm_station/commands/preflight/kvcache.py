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

The KV dtype: an explicit `kvCacheDtype` wins; `auto` (or null) means what vLLM does — the checkpoint's
own KV quantization (`kv_cache_quant_algo` in config.json's `quantization_config`, or in
hf_quant_config.json's `quantization`, as ModelOpt/NVFP4 checkpoints write it: "FP8" → 1 byte), else the
model dtype (bf16, 2 bytes). The GLM-5.3-Flash recipe gets its fp8 KV cache this way, with no flag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_station import bounded
from vllm_station.checkpoint.files import load_json
from vllm_station.checkpoint.layout import CONFIG_NAME, read_kv_cache_quant

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

# a checkpoint's kv_cache_quant_algo → the vLLM KV dtype it gives
KV_QUANT_DTYPES: dict[str, str] = {"FP8": "fp8"}


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
    kv_cache_dtype: str | None = None  # what the model's checkpoint configures for `auto`


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
    # The recipe: the fp8 KV cache comes from the checkpoint's configuration (kv_cache_quant_algo FP8).
    kv_cache_dtype="fp8",
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


def _read_config(model_dir: Path) -> dict[str, Any] | None:
    path = model_dir / CONFIG_NAME
    if not path.is_file():
        return None
    try:
        data = load_json(path)
    except ValueError as err:
        raise GeometryError(f"{path}: not readable JSON ({err})") from err
    if not isinstance(data, dict):
        raise GeometryError(f"{path}: not a JSON object")
    return data


def read_geometry(model_dir: Path) -> KvGeometry | None:
    """Geometry from `<model_dir>/config.json`; None when there is no such file."""
    data = _read_config(model_dir)
    return geometry_from_config(data, str(model_dir / CONFIG_NAME)) if data is not None else None


def read_max_context(model_dir: Path) -> int | None:
    """The model's context length (`max_position_embeddings`, text_config when nested); None if unknown."""
    data = _read_config(model_dir)
    if data is None:
        return None
    cfg = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    value = cfg.get("max_position_embeddings") if isinstance(cfg, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class KvDtype:
    dtype: str  # a DTYPE_BYTES key
    source: str  # where it came from, for the check's message


class KvDtypeError(ValueError):
    pass


def resolve_kv_dtype(configured: str, model_dir: Path | None, profile: ModelProfile | None) -> KvDtype:
    """The KV dtype vLLM will use: an explicit setting, else the checkpoint's kv_cache_quant_algo, else
    the profile's, else the model dtype. Raises KvDtypeError for a quantization this estimate cannot size."""
    if configured != "auto":
        return KvDtype(configured, f"kvCacheDtype {configured}")
    if model_dir is not None and model_dir.is_dir():
        try:
            quant = read_kv_cache_quant(model_dir)
        except ValueError as err:
            raise KvDtypeError(
                f"kvCacheDtype auto: cannot read the checkpoint's configuration: {err}"
            ) from err
        if quant.algo is not None:
            dtype = KV_QUANT_DTYPES.get(quant.algo.upper())
            if dtype is None:
                raise KvDtypeError(
                    f"kvCacheDtype auto: the checkpoint's KV-cache quantization {quant.algo!r} "
                    f"({quant.source}) cannot be sized here (known: {', '.join(KV_QUANT_DTYPES)})"
                )
            return KvDtype(dtype, f"the checkpoint: {quant.source} {quant.algo}")
        if (model_dir / CONFIG_NAME).is_file():
            return KvDtype(
                "auto", f"kvCacheDtype auto and the checkpoint names no KV quantization ({quant.source})"
            )
    if profile is not None and profile.kv_cache_dtype is not None:
        return KvDtype(
            profile.kv_cache_dtype, f"assumed: {profile.name} (its checkpoint's kv_cache_quant_algo)"
        )
    return KvDtype("auto", "kvCacheDtype auto: the model dtype")


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
            with bounded.open_regular(path) as f:
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
