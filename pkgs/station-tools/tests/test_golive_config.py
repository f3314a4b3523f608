"""golive.json is read strictly (`GoliveConfig`): every key the NixOS module writes, no other, so a key
renamed on one side fails with exit 2 naming the file and the key instead of falling back to a default.
The rendered file itself is fed through it by checks/test_contracts.py."""

from __future__ import annotations

import json
from pathlib import Path

import golive_config
import pytest

from vllm_station.cli import main
from vllm_station.commands.golive.cli import GoliveConfig
from vllm_station.errors import UsageError

CLOSED = "http://127.0.0.1:9"  # nothing listens: a run that got past the config would be exit 3


def test_the_full_config_loads() -> None:
    cfg = GoliveConfig.from_mapping(golive_config.config())
    assert cfg.bench.concurrency == [1, 32] and cfg.needle.depths == "0,50,100" and cfg.agent.repeats == 1
    assert GoliveConfig.keys() == [
        "baseUrl", "model", "expect", "skip", "timeout", "outDir", "agent", "needle", "bench", "station",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("mutate", "named"),
    [
        (lambda c: c.update(baseURL=c.pop("baseUrl")), "baseURL: unknown key"),
        (lambda c: c["bench"].update(output_len=c["bench"].pop("outputLen")), "bench.output_len: unknown"),
        (lambda c: c.pop("timeout"), "timeout: missing"),
        (lambda c: c["needle"].pop("calibrationCache"), "needle.calibrationCache: missing"),
        (lambda c: c["station"].pop("vllmArgs"), "station.vllmArgs: missing"),
        (lambda c: c.update(agent=3), "agent: must be an object"),
    ],
    ids=["renamed", "renamed-in-a-section", "missing", "missing-in-a-section", "station", "not-an-object"],
)
def test_a_renamed_or_missing_key_is_refused(mutate: object, named: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    data = golive_config.config(baseUrl=CLOSED)
    mutate(data)  # type: ignore[operator]
    with pytest.raises(UsageError, match=named.split(":")[0]):
        GoliveConfig.from_mapping(data)
    path = tmp_path / "golive.json"
    path.write_text(json.dumps(data))
    assert main(["golive", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"--config {path}: {named}" in err and "Traceback" not in err, err


def test_a_key_file_may_be_named_by_hand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """apiKeyFile: the one key the module never writes (it hands the key over as a credential)."""
    path = golive_config.write(tmp_path / "golive.json", baseUrl=CLOSED, apiKeyFile=str(tmp_path / "absent"))
    assert main(["golive", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "unknown key" not in err and "absent" in err, err
