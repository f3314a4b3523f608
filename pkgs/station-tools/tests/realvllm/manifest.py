"""Which files build which test model, and the stamp that records a build (stdlib only).

Imported by the builders (inside the vLLM venv) and by tests/conftest.py (in the dev venv): a model
counts as built only when its stamp names the current hash of the code that built it (its row below and the
content of its files), so editing the training code makes `scripts/build-test-models` rebuild and the
fixtures ask for a rebuild, while adding a model rebuilds no other. A model built from another one lists
that one's files too.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
STAMP = ".station-build.json"

# model key -> (directory name under the models dir, files whose content defines the build)
TINY_TOOLS = ("chat_templates.py", "tiny_data.py", "train_tiny.py")
MODELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "smol": ("smollm2-135m", ("chat_templates.py", "build_smol.py")),
    "tools": ("tiny-tools", TINY_TOOLS),
    # fine-tuned from tiny-tools (built first) into GLM-4.5/4.7's chat and tool-call format
    "tools-glm": ("tiny-tools-glm", (*TINY_TOOLS, "glm_format.py", "train_tiny_glm.py")),
}


def code_hash(key: str) -> str:
    h = hashlib.sha256(json.dumps([key, *MODELS[key]]).encode() + b"\0")
    for name in MODELS[key][1]:
        h.update(name.encode() + b"\0" + (HERE / name).read_bytes() + b"\0")
    return h.hexdigest()


def model_dir(models: Path, key: str) -> Path:
    return models / MODELS[key][0]


def read_stamp(models: Path, key: str) -> dict[str, object] | None:
    try:
        data = json.loads((model_dir(models, key) / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_current(models: Path, key: str) -> bool:
    stamp = read_stamp(models, key)
    return stamp is not None and stamp.get("code_sha256") == code_hash(key)
