"""Tier `nix_nixos`: each contract between the Nix modules and the `station` tools, pinned by feeding
what Nix renders through the Python reader (a key renamed on one side fails here, not on a station).

- /etc/vllm-station/preflight.json of every example → `PreflightConfig` (strict: every key required,
  unknown keys refused);
- /etc/vllm-station/golive.json (the flash example with golive on) → `GoliveConfig` (strict: every key
  required, unknown keys refused) and golive's plan (every value through its option's own type and range);
- the stamp's file name: modules/lib/contract.nix ↔ `vllm_station.checkpoint.STAMP_NAME`;
- a revision's directory: contract.nix `revisionDir` ↔ `vllm_station.checkpoint.revisions.revision_dir`
  (what the download unit writes, what `station revisions` prunes and what the serving unit loads);
- the preflight config's path: the contract ↔ the path the modules pass to `station preflight`;
- the drain flags (`station drain`, tested by the gateway's and the listener's nginx): the contract ↔
  `vllm_station.drainflag`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from nixenv import REPO, eval_json, require_nix, require_tree
from vllm_station import drainflag
from vllm_station.checkpoint import STAMP_NAME
from vllm_station.checkpoint.revisions import revision_dir
from vllm_station.cli import build_parser as golive_parser_of
from vllm_station.commands.golive import cli as golive
from vllm_station.commands.preflight.core import PreflightConfig
from vllm_station.errors import UsageError

pytestmark = pytest.mark.nix_nixos
EXAMPLES = ["flash-station", "cpu-station", "station-a", "station-b"]


def golive_parser() -> Any:
    return golive_parser_of("golive")


@functools.cache
def _rendered() -> dict[str, Any]:
    require_nix()
    require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "the Nix ↔ Python contracts")
    out: dict[str, Any] = eval_json(
        [str(REPO / "checks" / "nixos" / "contracts.nix"), "--argstr", "nixosTree", os.environ.get("NIXOS_TREE", "")],
        timeout=900,
    )
    return out


def test_stamp_name_is_one_name_on_both_sides() -> None:
    assert _rendered()["stampName"] == STAMP_NAME


def test_revision_dir_is_one_layout_on_both_sides() -> None:
    rev = "0123456789abcdef0123456789abcdef01234567"
    assert _rendered()["revisionDirExample"] == str(revision_dir(Path("/var/lib/vllm-station-models/m"), rev))
    # The flagship example serves its pin's directory under the download entry's dir.
    flash = _rendered()["flashCheckpointDir"]
    assert flash == str(revision_dir(Path("/var/lib/vllm-station-models/glm53-flash"), Path(flash).name))
    data = json.loads(_rendered()["examples"]["flash-station"]["preflightJson"])
    assert data["modelDir"] == flash and data["revision"] == Path(flash).name
def test_drain_flags_are_one_path_on_both_sides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(drainflag.DIR_ENV, raising=False)
    monkeypatch.delenv(drainflag.STOPPING_ENV, raising=False)
    assert _rendered()["drainFlag"] == str(drainflag.drain_flag())
    assert _rendered()["stoppingFlag"] == str(drainflag.stopping_flag())


@pytest.mark.parametrize("example", EXAMPLES)
def test_rendered_preflight_config_loads_strictly(example: str) -> None:
    data = json.loads(_rendered()["examples"][example]["preflightJson"])
    config = PreflightConfig.from_mapping(data)  # raises on an unknown or missing key
    assert config.model == data["model"]
    assert config.gpu_node == data["gpuNode"] == 1
    if example.startswith("station-"):
        assert config.pair is not None and config.pair.role == ("head" if example == "station-a" else "worker")
        assert config.revision == data["revision"] and config.revision is not None
        assert config.pair.peer_stamp_url and config.pair.peer_stamp_url.endswith("/stamp")
    else:
        assert config.pair is None


def test_rendered_golive_config_passes_golive_strict_reader(tmp_path: Path) -> None:
    """golive reads every value through its option's own type (exit 2 on a wrong type or range): what
    the module renders must pass that reader as it is, with the module's defaults."""
    text = _rendered()["goliveJson"]
    path = tmp_path / "golive.json"
    path.write_text(text)
    cfg = golive._load_config(path)  # GoliveConfig.from_mapping: raises on an unknown or missing key
    args = golive_parser().parse_args(["golive", "--config", str(path)])
    plan = golive.make_plan(args, cfg)
    assert plan.bench_levels == cfg["bench"]["concurrency"] and plan.bench_requests == cfg["bench"]["requests"]
    assert plan.needle_lengths == cfg["needle"]["lengths"] and plan.agent_repeats == cfg["agent"]["repeats"]
    assert plan.timeout == cfg["timeout"] and str(plan.out) == cfg["outDir"]


def test_rendered_golive_config_has_exactly_goliveconfigs_keys() -> None:
    """The keys, section by section, both ways: a key the module adds or renames, or one Python expects
    that the module no longer writes, fails here."""
    data = json.loads(_rendered()["goliveJson"])
    sections = {f.name: f.type for f in dataclasses.fields(golive.GoliveConfig) if str(f.type).startswith("Golive")}
    assert sorted(data) == sorted(golive.GoliveConfig.keys())
    for name, kind in sections.items():
        key = golive.GoliveConfig.key(name)
        section = getattr(golive, str(kind))
        assert sorted(data[key]) == sorted(golive.GoliveConfig.keys(section)), key
    config = golive.GoliveConfig.from_mapping(data)
    assert config.base_url == "http://127.0.0.1:8888" and config.station.vllm_args == data["station"]["vllmArgs"]
    assert config.needle.calibration_cache == "/var/cache/vllm-station-golive/needle-calibration.json"


@pytest.mark.parametrize(("section", "old", "new"), [(None, "outDir", "outputDir"), ("bench", "outputLen", "outLen")])
def test_a_renamed_golive_key_is_refused(section: str | None, old: str, new: str) -> None:
    """The failure this contract exists for: the module renames a key, golive must not fall back to its
    default (outDir: no report written; outputLen: 256 tokens whatever the module said)."""
    data = json.loads(_rendered()["goliveJson"])
    where = data if section is None else data[section]
    where[new] = where.pop(old)
    with pytest.raises(UsageError, match=new):
        golive.GoliveConfig.from_mapping(data)


def test_a_renamed_key_is_refused() -> None:
    """The failure this contract exists for: Nix renames a key, Python must not fall back to a default."""
    data = json.loads(_rendered()["examples"]["flash-station"]["preflightJson"])
    data["maxModelLength"] = data.pop("maxModelLen")
    with pytest.raises(Exception, match="maxModelLength"):
        PreflightConfig.from_mapping(data)


def test_pair_env_carries_the_recipe_variables() -> None:
    for example, rank in (("station-a", "0"), ("station-b", "1")):
        text = _rendered()["examples"][example]["pairEnv"]
        env = dict(line.split("=", 1) for line in text.splitlines() if line)
        assert {"RANK", "HEAD_IP", "WORKER_IP", "RAIL_IFACE", "RAIL_HCA"} <= set(env), env
        assert env["RANK"] == rank
    assert _rendered()["examples"]["flash-station"]["pairEnv"] is None


def test_the_modules_pass_the_contract_path_to_preflight() -> None:
    serve = (REPO / "modules" / "serve.nix").read_text()
    assert "contract.preflightConfig" in serve
    assert _rendered()["preflightConfig"] == "/etc/vllm-station/preflight.json"
