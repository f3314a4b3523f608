"""Full, valid preflight configurations for tests: what the NixOS module writes (every key), with the
GLM-5.3-Flash preset's values, overridable key by key. `PreflightConfig` is strict, so a test builds
from one of these rather than from a partial dict."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from vllm_station.commands.preflight.core import PreflightConfig

# serve.nix + the glm53-flash preset (what /etc/vllm-station/preflight.json holds on a station)
FLASH: dict[str, Any] = {
    "host": "127.0.0.1",
    "port": 8888,
    "model": "nvidia/GLM-5.3-Flash-NVFP4",
    "modelDir": None,
    "revision": None,
    "gpuNode": 1,
    "maxFilePagesGiB": 4,
    "gpuMemoryUtilization": 0.94,
    "maxModelLen": 1048576,
    "maxNumSeqs": 256,
    "kvCacheDtype": "fp8",
    "toolCallParser": "glm47",
    "reasoningParser": "glm45",
    "runtime": None,
    "image": None,
    "paths": {
        "state": "/var/lib/vllm-station",
        "cache": "/var/cache/vllm-station",
        "logs": "/var/log/vllm-station",
    },
    "pair": None,
}

# pair.nix's `preflight.settings.pair` (every key it writes)
PAIR: dict[str, Any] = {
    "role": "head",
    "rank": 0,
    "headAddress": "127.0.0.1",
    "workerAddress": "127.0.0.2",
    "railInterface": "cx8r1",
    "railHca": "mlx5_1",
    "gidIndex": 3,
    "masterPort": 29500,
    "beaconPort": None,
    "peerStampUrl": None,
}


def mapping(pair: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """FLASH with `overrides` (camelCase keys); `pair` (partial) is merged into PAIR."""
    data = copy.deepcopy(FLASH)
    data.update(overrides)
    if pair is not None:
        data["pair"] = {**PAIR, **pair}
    return data


def make_config(pair: dict[str, Any] | None = None, **overrides: Any) -> PreflightConfig:
    return PreflightConfig.from_mapping(mapping(pair, **overrides))


def write_config(path: Path, pair: dict[str, Any] | None = None, **overrides: Any) -> Path:
    path.write_text(json.dumps(mapping(pair, **overrides)))
    return path
