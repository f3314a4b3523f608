"""Tier `realvllm`: every example's vLLM arguments, exactly as its unit passes them (the preset's flags and
the options on top), are accepted by the argument parser of the real `vllm serve` — a flag that a vLLM
release renamed or dropped fails here, not on a station at start.

The arguments come from checks/nixos/contracts.nix (`serve.vllmArgs` of each example: the model first, then
the flags). They are parsed in vLLM's CPU build venv by the parser `vllm serve` builds
(vllm.entrypoints.cli.serve.ServeSubcommand.subparser_init under a FlexibleArgumentParser, i.e.
vllm.entrypoints.launchers.cli_args.make_arg_parser), then checked as `vllm serve` checks them before it
loads anything (ServeSubcommand.validate) and as its API server checks the parser names (registered tool
call and reasoning parsers). The vLLM release is modules/presets/checked-with.nix, one place.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from nixenv import CACHE
from test_contracts import _rendered

pytestmark = pytest.mark.realvllm

VENV = Path(os.environ.get("STATION_VLLM_VENV", str(CACHE / "vllm-venv")))
EXAMPLES = ["flash-station", "station-a", "station-b", "cpu-station"]
GLM_TOOL_FLAGS = [
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "glm47",
    "--reasoning-parser",
    "glm45",
]

# Runs in the vLLM venv: a JSON list of argument lists on stdin, one verdict per list on stdout.
PARSE = r"""
import contextlib, io, json, sys
import vllm
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.reasoning import ReasoningParserManager
from vllm.tool_parsers import ToolParserManager
from vllm.utils.argparse_utils import FlexibleArgumentParser

KEYS = ("model", "served_model_name", "host", "port", "tensor_parallel_size", "max_model_len", "max_num_seqs",
        "gpu_memory_utilization", "kv_cache_dtype", "enable_chunked_prefill", "enable_prefix_caching",
        "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser", "speculative_config", "headless",
        "nnodes", "node_rank", "master_addr", "master_port", "enforce_eager", "shutdown_timeout",
        "override_generation_config")

def verdict(argv):
    parser = FlexibleArgumentParser(prog="vllm")  # as vllm.entrypoints.cli.main builds it
    sub = parser.add_subparsers(required=False, dest="subparser")
    cmd = ServeSubcommand()
    cmd.subparser_init(sub).set_defaults(dispatch_function=cmd.cmd)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(["serve", *argv])
    except SystemExit:
        return {"ok": False, "error": err.getvalue().strip().splitlines()[-1]}
    if args.model_tag is not None:  # as ServeSubcommand.cmd does
        args.model = args.model_tag
    try:
        cmd.validate(args)
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    if args.enable_auto_tool_choice and args.tool_call_parser not in ToolParserManager.list_registered():
        return {"ok": False, "error": f"no tool call parser {args.tool_call_parser!r} in this vLLM"}
    if args.reasoning_parser and args.reasoning_parser not in ReasoningParserManager.list_registered():
        return {"ok": False, "error": f"no reasoning parser {args.reasoning_parser!r} in this vLLM"}
    return {"ok": True, "args": {k: getattr(args, k, None) for k in KEYS}}

print(json.dumps({"version": vllm.__version__, "verdicts": [verdict(a) for a in json.load(sys.stdin)]}))
"""


def parse_with_vllm(argvs: list[list[str]]) -> tuple[str, list[dict[str, Any]]]:
    """(vLLM's version, one verdict per argument list) from the real `vllm serve` parser."""
    if not (VENV / "bin" / "python").exists() or not any(VENV.glob(".station-vllm-*")):
        reason = f"no vLLM CPU venv at {VENV}: run scripts/setup-vllm (scripts/check --only realvllm does)"
        if (
            os.environ.get("STATION_REQUIRE_REALVLLM") == "1"
        ):  # as tests/conftest.py: scripts/check set it up
            pytest.fail(f"{reason} (STATION_REQUIRE_REALVLLM=1)", pytrace=False)
        pytest.skip(reason)
    env = {
        **os.environ,
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_LOGGING_LEVEL": "ERROR",
    }
    proc = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", PARSE],
        input=json.dumps(argvs), capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, (
        f"the vLLM argument check crashed:\n{proc.stderr[-3000:]}"
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["version"], out["verdicts"]


def _broken(argv: list[str]) -> dict[str, list[str]]:
    """The flash example's arguments broken three ways `vllm serve` must refuse."""
    i = argv.index("--max-model-len")
    return {
        "renamed": [*argv[:i], "--max-model-length", *argv[i + 1 :]],
        "no-parser": [a for a in argv if a not in ("--tool-call-parser", "glm47")],
        "unknown-parser": [("glm99" if a == "glm47" else a) for a in argv],
    }


@functools.cache
def _checked() -> tuple[str, dict[str, dict[str, Any]]]:
    # _rendered: test_contracts' evaluation of the examples, one per session for both modules.
    # One vLLM import for everything: the examples and the broken variants in one batch.
    argvs = {name: _rendered()["examples"][name]["vllmArgs"] for name in EXAMPLES}
    argvs |= _broken(argvs["flash-station"])
    version, verdicts = parse_with_vllm(list(argvs.values()))
    return version, dict(zip(argvs, verdicts, strict=True))


def rendered_args(example: str) -> list[str]:
    args: list[str] = _rendered()["examples"][example]["vllmArgs"]
    return args


def flag(args: list[str], name: str) -> str:
    assert name in args, f"{name} not rendered: {args}"
    return args[args.index(name) + 1]


@pytest.mark.parametrize("example", EXAMPLES)
def test_vllm_serve_accepts_the_rendered_arguments(example: str) -> None:
    argv = rendered_args(example)
    verdict = _checked()[1][example]
    assert verdict["ok"], (
        f"vllm serve refuses {example}'s arguments: {verdict['error']}\n{argv}"
    )
    got = verdict["args"]
    # the values vLLM read are the ones the unit meant
    assert got["model"] == argv[0]
    assert got["served_model_name"] == [flag(argv, "--served-model-name")]
    assert got["max_model_len"] == int(flag(argv, "--max-model-len"))
    assert got["tensor_parallel_size"] == (
        int(flag(argv, "--tensor-parallel-size"))
        if example.startswith("station-")
        else 1
    )
    assert got["headless"] == (example == "station-b")
    if example != "station-b":
        assert (got["host"], got["port"]) == (
            flag(argv, "--host"),
            int(flag(argv, "--port")),
        )
    if "--gpu-memory-utilization" in argv:
        assert got["gpu_memory_utilization"] == float(
            flag(argv, "--gpu-memory-utilization")
        )


def test_the_glm_presets_tool_and_reasoning_flags_reach_vllm() -> None:
    for example in ("flash-station", "station-a", "station-b"):
        args = rendered_args(example)
        start = args.index(GLM_TOOL_FLAGS[0])
        assert args[start : start + len(GLM_TOOL_FLAGS)] == GLM_TOOL_FLAGS, args
        got = _checked()[1][example]["args"]
        assert (got["enable_auto_tool_choice"], got["tool_call_parser"], got["reasoning_parser"]) == (
            True, "glm47", "glm45",
        )  # fmt: skip


def test_the_pair_flags_round_trip() -> None:
    for example, rank in (("station-a", 0), ("station-b", 1)):
        argv = rendered_args(example)
        got = _checked()[1][example]["args"]
        assert got["speculative_config"] == {
            "method": "mtp",
            "num_speculative_tokens": 4,
        }
        assert got["speculative_config"] == json.loads(
            flag(argv, "--speculative-config")
        )
        assert got["kv_cache_dtype"] == "fp8" and got["enable_prefix_caching"] is True
        assert (got["nnodes"], got["node_rank"]) == (2, rank)
        assert (got["master_addr"], got["master_port"]) == (
            flag(argv, "--master-addr"),
            int(flag(argv, "--master-port")),
        )
    flash = _checked()[1]["flash-station"]["args"]
    assert flash["speculative_config"] is None and flash["max_num_seqs"] == 256
    assert flash["enable_chunked_prefill"] is True


def test_the_graceful_stop_reaches_vllm() -> None:
    """--shutdown-timeout (SIGTERM: refuse new requests, finish running ones) and the output cap that
    sizes it (vLLM's server-wide max_new_tokens) are accepted, with the values the units meant."""
    for example, timeout in (("flash-station", 590), ("station-a", 2560), ("station-b", 2560)):
        argv = rendered_args(example)
        got = _checked()[1][example]["args"]
        assert got["shutdown_timeout"] == int(flag(argv, "--shutdown-timeout")) == timeout
        assert got["override_generation_config"] == {"max_new_tokens": 32768}
    cpu = _checked()[1]["cpu-station"]["args"]
    assert cpu["shutdown_timeout"] == int(flag(rendered_args("cpu-station"), "--shutdown-timeout")) > 0


def test_checked_with_names_the_venvs_vllm() -> None:
    """modules/presets/checked-with.nix is the release these flags were checked against: this one."""
    version, _ = _checked()
    assert _rendered()["checkedWith"] == version, (
        f"the presets' flags were checked against vLLM {version}, but modules/presets/checked-with.nix "
        f"says {_rendered()['checkedWith']}: update it after this test passes"
    )


def test_a_renamed_flag_is_refused() -> None:
    """The failure this test exists for: the same helper refuses what `vllm serve` would refuse."""
    _, verdicts = _checked()
    v_renamed, v_no_parser, v_unknown = (verdicts[k] for k in ("renamed", "no-parser", "unknown-parser"))
    assert (
        not v_renamed["ok"]
        and "unrecognized arguments: --max-model-length" in v_renamed["error"]
    )
    assert (
        not v_no_parser["ok"]
        and "--enable-auto-tool-choice requires --tool-call-parser"
        in v_no_parser["error"]
    )
    assert not v_unknown["ok"] and "glm99" in v_unknown["error"]
