"""preflight on a checkpoint upgrade: the KV capacity is recomputed from the pinned revision's own
config.json (the serving module points `modelDir` at `<dir>/revisions/<rev>`), and the `parsers` check
refuses a tool-call/reasoning parser that the revision's model card does not declare. Real files under a
prepared GB300 root, run through `station preflight` and the check runner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from preflight_config import make_config, write_config
from sysfs_fixtures import gb300_root, write_stamp

from vllm_station.checkpoint.layout import read_declared_parsers
from vllm_station.checkpoint.revisions import revision_dir
from vllm_station.cli import main
from vllm_station.commands.preflight.core import CheckResult, Context, run_checks
from vllm_station.status import Status

R1 = "1111111111111111111111111111111111111111"
R2 = "2222222222222222222222222222222222222222"
ENTRY = Path("/var/lib/vllm-station-models/glm53-flash")

MLA: dict[str, Any] = {
    "num_hidden_layers": 78,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "num_attention_heads": 64,
}
FP8_KV = {"quantization_config": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}}

# A model card in the form GLM checkpoints publish: a vLLM command naming both parsers (continued over
# lines), and an SGLang command whose flags share the names but not the parser names.
CARD = """---
license: mit
library_name: transformers
---
# GLM-5.x (test card)

## Serve with vLLM

```shell
vllm serve nvidia/GLM-5.3-Flash-NVFP4 \\
     --tensor-parallel-size 1 \\
     --tool-call-parser glm47 \\
     --reasoning-parser glm45 \\
     --enable-auto-tool-choice
```

## Serve with SGLang

```shell
python3 -m sglang.launch_server --model-path nvidia/GLM-5.3-Flash-NVFP4 \\
  --tool-call-parser glm45 --reasoning-parser glm45
```
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return gb300_root(tmp_path / "root")


def rev_dir(root: Path, rev: str) -> Path:
    return root / revision_dir(ENTRY, rev).relative_to("/")


def run_one(root: Path, name: str, **config: Any) -> CheckResult:
    (result,) = run_checks(Context(root=root, config=make_config(**config)), [name])
    return result


def test_kv_capacity_is_recomputed_from_the_new_revisions_config(root: Path) -> None:
    """R1 declares no KV quantization (bf16 cache); R2, with one layer more, declares FP8: preflight on
    each revision's directory gives each one's capacity, with `kvCacheDtype` left to the checkpoint."""
    weights = {"model-00001-of-00001.safetensors": 150 * 10**9}
    write_stamp(rev_dir(root, R1), revision=R1, files=weights, config=MLA)
    write_stamp(
        rev_dir(root, R2), revision=R2, files=weights, config={**MLA, "num_hidden_layers": 79, **FP8_KV}
    )
    common: dict[str, Any] = {"kvCacheDtype": None, "maxModelLen": 131072, "maxNumSeqs": 4}
    old = run_one(root, "kv-cache", modelDir=str(revision_dir(ENTRY, R1)), revision=R1, **common)
    new = run_one(root, "kv-cache", modelDir=str(revision_dir(ENTRY, R2)), revision=R2, **common)
    per_layer = 512 + 64
    assert old.details["estimate"]["dtype"] == "auto" and new.details["estimate"]["dtype"] == "fp8"
    assert old.details["estimate"]["bytes_per_token"] == 78 * per_layer * 2
    assert new.details["estimate"]["bytes_per_token"] == 79 * per_layer * 1
    assert new.details["estimate"]["tokens"] > 1.9 * old.details["estimate"]["tokens"]
    assert "config.json" in new.details["sources"]["kv_cache_dtype"]


def test_declared_parsers_are_read_from_vllm_commands_only(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(CARD)
    declared = read_declared_parsers(tmp_path)
    assert declared is not None
    assert (declared.tool, declared.reasoning, declared.commands) == (("glm47",), ("glm45",), 1)
    (tmp_path / "README.md").write_text("vllm serve x --tool-call-parser=hermes --reasoning-parser 'qwen3'\n")
    declared = read_declared_parsers(tmp_path)
    assert declared is not None and (declared.tool, declared.reasoning) == (("hermes",), ("qwen3",))
    assert read_declared_parsers(tmp_path / "nowhere") is None


@pytest.mark.parametrize(
    ("tool", "reasoning", "status", "words"),
    [
        ("glm47", "glm45", Status.PASS, "toolCallParser glm47, reasoningParser glm45, as "),
        (
            "glm45",
            "glm45",
            Status.FAIL,
            "toolCallParser 'glm45', the checkpoint declares 'glm47'",
        ),
        (
            "glm47",
            "deepseek_r1",
            Status.FAIL,
            "reasoningParser 'deepseek_r1', the checkpoint declares 'glm45'",
        ),
        ("glm47", None, Status.WARN, "reasoningParser: none set, the checkpoint declares glm45"),
    ],
)
def test_parsers_against_the_revisions_model_card(
    root: Path, tool: str, reasoning: str | None, status: Status, words: str
) -> None:
    write_stamp(rev_dir(root, R2), revision=R2)
    (rev_dir(root, R2) / "README.md").write_text(CARD)
    r = run_one(
        root, "parsers", modelDir=str(revision_dir(ENTRY, R2)), toolCallParser=tool, reasoningParser=reasoning
    )
    assert r.status is status, r
    assert words in r.figure
    assert "README.md (1 vLLM command)" in r.figure
    if status is not Status.PASS:
        assert r.fix is not None and "services.vllm-station.serve." in r.fix


def test_parsers_skip_when_the_checkpoint_declares_none(root: Path) -> None:
    write_stamp(rev_dir(root, R1), revision=R1)
    r = run_one(root, "parsers", modelDir=str(revision_dir(ENTRY, R1)))
    assert r.status is Status.SKIP and "no README.md" in r.figure
    (rev_dir(root, R1) / "README.md").write_text("# a card\n\n`vllm serve org/model --max-model-len 4096`\n")
    r = run_one(root, "parsers", modelDir=str(revision_dir(ENTRY, R1)))
    assert r.status is Status.SKIP and "names no --tool-call-parser" in r.figure
    assert run_one(root, "parsers", modelDir=None).status is Status.SKIP


def test_a_parser_mismatch_refuses_through_the_cli(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the serving unit's `station preflight --config …` step does: exit 1, the fix named."""
    write_stamp(rev_dir(root, R2), revision=R2)
    (rev_dir(root, R2) / "README.md").write_text(CARD)
    config = write_config(
        tmp_path / "preflight.json", modelDir=str(revision_dir(ENTRY, R2)), toolCallParser="hermes"
    )
    argv = ["preflight", "--config", str(config), "--root", str(root), "--only", "parsers", "--json"]
    assert main(argv) == 1
    (result,) = json.loads(capsys.readouterr().out)["checks"]
    assert result["status"] == "FAIL" and 'toolCallParser = "glm47"' in result["fix"]
    assert main([*argv, "--tool-call-parser", "glm47"]) == 0
