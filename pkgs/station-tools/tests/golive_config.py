"""Full, valid golive configurations for tests: what modules/golive.nix writes (every key), with the module's
defaults for the GLM-5.3-Flash station, overridable key by key (sections merged). `GoliveConfig` is
strict, so a test builds from this rather than from a partial dict."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

# modules/golive.nix's defaults on the flash example (what /etc/vllm-station/golive.json holds), less the
# station's directories: no report files and no needle calibration cache unless a test asks for them.
FLASH: dict[str, Any] = {
    "baseUrl": "http://127.0.0.1:8888",
    "model": None,
    "expect": ["c1.tok_s>=100"],
    "skip": [],
    "timeout": 900,
    "outDir": None,
    "agent": {"repeats": 1},
    "needle": {
        "lengths": "25%,50%,90%",
        "depths": "0,50,100",
        "calibrationCache": None,
    },
    "bench": {"concurrency": [1, 32], "requests": "2x", "outputLen": 256},
    "station": {"preset": "glm53-flash", "image": None, "revision": None, "vllmArgs": []},
}


def config(**overrides: Any) -> dict[str, Any]:
    """FLASH with `overrides`; a section given as a dict is merged key by key, anything else replaces."""
    out = copy.deepcopy(FLASH)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def write(path: Path, **overrides: Any) -> Path:
    path.write_text(json.dumps(config(**overrides)))
    return path
