"""What both system-tier test modules share: tools, ports, figures, the API key, test checkpoints."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from nixenv import CACHE

from .station import CHECKS

TOOLS = {
    "systemd-nspawn": "systemd-container",
    "dockerd": "docker.io",
    "podman": "podman",
    "runc": "runc",
    "docker-registry": "docker-registry",
}
API_KEY = "sk-system-tier-0123456789"
TESTS = CHECKS.parent / "pkgs" / "station-tools" / "tests"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# A booted machine mounts its own tmpfs on these: a cache below one (its station venv, its registry) is
# hidden from the units, which then fail with 203/EXEC.
HIDDEN_IN_MACHINES = (Path("/tmp"), Path("/var/tmp"))


def require_tools(cache: Path | None = None) -> None:
    missing = [
        pkg
        for tool, pkg in TOOLS.items()
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()
    ]
    if missing:
        pytest.skip(
            f"system tier needs Debian packages {' '.join(missing)} (scripts/check installs them)"
        )
    if os.geteuid() != 0:
        pytest.skip("system tier needs root (systemd-nspawn, dockerd)")
    cache = (cache or CACHE).resolve()
    hidden = [d for d in HIDDEN_IN_MACHINES if cache.is_relative_to(d)]
    if hidden:
        pytest.fail(
            f"STATION_CACHE={cache} is below {hidden[0]}, which every booted machine of the system tier "
            "replaces with its own tmpfs: its units could not see the station venv; use a directory "
            "elsewhere (the default is /opt/vllm-station)",
            pytrace=False,
        )


@dataclass
class Figures:
    values: dict[str, float | str] = field(default_factory=dict)

    def record(self, key: str, value: float | str) -> None:
        self.values[key] = value
        print(f"system figure: {key} = {value}", file=sys.stderr)


FIGURES = Figures()


def glm_checkpoint(directory: Path, *, shards: int, layers: int) -> None:
    """A real safetensors checkpoint (tests' generator) whose config carries GLM-5.3's MLA attention
    geometry (kv_lora_rank 512 + rope 64), so preflight's KV check reads a real config."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from hubserver import make_checkpoint

    make_checkpoint(directory, shards=shards, tensors_per_shard=1, rows=2)
    config = json.loads((directory / "config.json").read_text())
    config.update(
        num_hidden_layers=layers,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        num_attention_heads=64,
    )
    (directory / "config.json").write_text(json.dumps(config, indent=2))


def require_realvllm(venv: Path, model: Path) -> None:
    """vLLM's CPU build and the test model are there: else a skip naming the scripts that make them (a
    failure with STATION_REQUIRE_REALVLLM=1, as scripts/check sets it once it has built them)."""
    if not list(venv.glob(".station-vllm-*")) or not (model / "model.safetensors").exists():
        message = f"no vLLM CPU venv at {venv} or no model at {model}: run scripts/setup-vllm and scripts/build-test-models"
        if os.environ.get("STATION_REQUIRE_REALVLLM") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
