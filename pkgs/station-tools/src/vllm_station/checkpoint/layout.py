"""File names of a Hugging Face safetensors checkpoint, what its configuration says about
quantization (the ModelOpt/NVFP4 layout keeps it in `hf_quant_config.json`), and which vLLM parsers
its model card declares (`read_declared_parsers`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from vllm_station import bounded
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


README_NAME = "README.md"
# The vLLM start commands a model card shows: `vllm serve …` or the API server module.
_VLLM_COMMAND = re.compile(r"\bvllm\s+serve\b|vllm\.entrypoints\.openai\.api_server")
PARSER_FLAGS = {"tool": "--tool-call-parser", "reasoning": "--reasoning-parser"}


@dataclass(frozen=True)
class DeclaredParsers:
    """The tool-call and reasoning parsers a checkpoint's model card names in its vLLM commands.

    GLM checkpoints declare no parser in config.json, generation_config.json or tokenizer_config.json;
    their model card (README.md, part of the repository a download fetches) gives the `vllm serve`
    command with `--tool-call-parser glm47 --reasoning-parser glm45`. Only vLLM command lines count
    (a card's SGLang commands use flags of the same name with that engine's parser names)."""

    tool: tuple[str, ...]  # every name given, sorted; () when no vLLM command names one
    reasoning: tuple[str, ...]
    commands: int  # vLLM commands found
    source: str


def read_declared_parsers(directory: Path) -> DeclaredParsers | None:
    """The parsers `directory/README.md` declares; None when there is no README.md.

    Raises ValueError naming the file when it is there but unreadable."""
    path = directory / README_NAME
    try:
        text = bounded.read_text(path, limit=bounded.CONFIG_LIMIT)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from exc
    found: dict[str, set[str]] = {kind: set() for kind in PARSER_FLAGS}
    commands = 0
    # A shell line continued with a backslash is one command.
    for line in re.sub(r"\\\r?\n", " ", text).splitlines():
        match = _VLLM_COMMAND.search(line)
        if match is None:
            continue
        commands += 1
        tokens = line[match.start() :].replace("`", " ").split()
        for kind, flag in PARSER_FLAGS.items():
            for i, token in enumerate(tokens):
                if token.startswith(flag + "="):
                    value = token.split("=", 1)[1]
                elif token == flag and i + 1 < len(tokens):
                    value = tokens[i + 1]
                else:
                    continue
                value = value.strip("'\"")
                if value and not value.startswith("-"):
                    found[kind].add(value)
    return DeclaredParsers(
        tool=tuple(sorted(found["tool"])),
        reasoning=tuple(sorted(found["reasoning"])),
        commands=commands,
        source=f"{path} ({commands} vLLM command{'s' if commands != 1 else ''})",
    )
