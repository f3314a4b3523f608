"""`station smoke` against real vLLM (CPU build, tensor parallel 1) started with the glm53 presets' tool and
reasoning flags: `--enable-auto-tool-choice --tool-call-parser glm47 --reasoning-parser glm45`.

The model is tiny-tools-glm (tests/realvllm/train_tiny_glm.py): the tiny tool model fine-tuned to
GLM-4.5/4.7's format — it thinks inside `<think>…</think>` and calls tools as
`<tool_call>get_weather<arg_key>location</arg_key><arg_value>Paris</arg_value>…</tool_call>`, which is what
those two parsers read. The flags are the ones station A's unit renders (checks/nixos/contracts.nix, when Nix
and NIXOS_TREE are there), else the literal list below; the test prints which.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CACHE, VllmServer
from test_smoke_realvllm import smoke_json

from vllm_station.api import ApiClient, collect_stream
from vllm_station.api.checks import CHECKS, WEATHER_MESSAGES, WEATHER_TOOL

pytestmark = pytest.mark.realvllm

REPO = Path(__file__).resolve().parents[3]
# modules/presets/glm53-tp2.nix (and glm53-flash.nix) as serve.nix renders them.
PRESET_TOOL_FLAGS = [
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "glm47",
    "--reasoning-parser",
    "glm45",
]
# The fixed thoughts and answers of the training data (tests/realvllm/glm_format.py, tiny_data.py).
THINK_CALL, THINK_PLAIN = "The user asks for get_weather.", "No tool is needed."
PLAIN_ANSWER = "Hello! I am tiny-tools, a small test model."


def preset_tool_flags() -> tuple[list[str], str]:
    """The tool and reasoning flags of station A's rendered `vllm serve` arguments, and their source."""
    nix = shutil.which("nix-instantiate") or str(CACHE / "nix" / "bin" / "nix-instantiate")
    tree = os.environ.get("NIXOS_TREE", "")
    if not (Path(nix).exists() and tree and (Path(tree) / "nixos/lib/eval-config.nix").exists()):
        return PRESET_TOOL_FLAGS, "the literal list (no Nix or NIXOS_TREE to evaluate the preset)"
    proc = subprocess.run(
        [nix, "--eval", "--strict", "--json", str(REPO / "checks/nixos/contracts.nix"),
         "-A", "examples.station-a.vllmArgs", "--argstr", "nixosTree", tree],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    args: list[str] = json.loads(proc.stdout)
    flags = [a for a in args if a == "--enable-auto-tool-choice"]
    for name in ("--tool-call-parser", "--reasoning-parser"):
        flags += [name, args[args.index(name) + 1]] if name in args else []
    assert flags == PRESET_TOOL_FLAGS, f"the preset renders {flags}: update PRESET_TOOL_FLAGS"
    return flags, "station A's rendered arguments (checks/nixos/contracts.nix)"


def test_smoke_go_with_the_tp2_presets_tool_flags(
    vllm_server: Callable[..., VllmServer], capsys: pytest.CaptureFixture[str]
) -> None:
    flags, source = preset_tool_flags()
    srv = vllm_server("tools-glm", served_name="tiny-tools-glm", extra_args=flags)
    code, rep = smoke_json(capsys, "--base-url", srv.base_url, "--timeout", "120")
    print(f"tool/reasoning flags from {source}: {' '.join(flags)}")
    checks = {c["name"]: c for c in rep["checks"]}
    assert code == 0, json.dumps(rep, indent=2)
    assert [checks[n]["result"] for n in CHECKS] == ["pass"] * 4
    assert checks["chat"]["details"]["content_chars"] > 0
    args = checks["tool_call"]["details"]["arguments"]
    assert args["location"].startswith("Paris") and args.get("unit") == "celsius", args
    stream = checks["tool_call_stream"]["details"]
    assert (
        stream["name_deltas"] == 1 and stream["matches_non_streamed"] is True and stream["arguments"] == args
    )

    # The reasoning parser took the thought out of the answer, plain and streamed.
    with ApiClient(srv.base_url, timeout=120) as api:
        hello = api.chat(
            "tiny-tools-glm", [{"role": "user", "content": "Say hello."}], max_tokens=64, temperature=0
        )
        kw = {"tools": [WEATHER_TOOL], "tool_choice": "auto", "max_tokens": 128, "temperature": 0}
        call = api.chat("tiny-tools-glm", WEATHER_MESSAGES, **kw)
        streamed = collect_stream(api.chat_stream("tiny-tools-glm", WEATHER_MESSAGES, **kw))
    assert (hello.reasoning_content, hello.content) == (THINK_PLAIN, PLAIN_ANSWER)
    assert call.reasoning_content == THINK_CALL and not (call.content or "").strip()
    assert call.finish_reason == "tool_calls" and [c.name for c in call.tool_calls] == ["get_weather"]
    assert streamed.reasoning_content == THINK_CALL
    assert json.loads(streamed.tool_calls[0].arguments) == json.loads(call.tool_calls[0].arguments)
