"""`station smoke` against real vLLM (CPU build) serving the tiny tool-calling model.

Two real servers in all: the session's `tools_server` (hermes parser, auto tool choice) for the good path
and the wrong-model case, and one server started without `--enable-auto-tool-choice`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from conftest import VllmServer
from faultserver import free_port

from vllm_station.api.checks import CHECKS
from vllm_station.cli import main

pytestmark = pytest.mark.realvllm


def smoke_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["smoke", "--json", *args])
    out, err = capsys.readouterr()
    rep = json.loads(out)
    assert rep["exit_code"] == code and [c["name"] for c in rep["checks"]] == list(CHECKS)
    # the measurements, for the record (pytest -rA / -s shows them)
    print(
        "\n"
        + "\n".join(
            f"  {c['name']:<17} {c['result']:<5} {c['latency_s'] or '-':>7} s  {c['reason']}"
            for c in rep["checks"]
        )
    )
    print(err, file=sys.stderr)
    return code, rep


def test_smoke_passes_on_tool_model_with_hermes(
    tools_server: VllmServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, rep = smoke_json(capsys, "--base-url", tools_server.base_url, "--timeout", "120")
    checks = {c["name"]: c for c in rep["checks"]}
    assert code == 0, json.dumps(rep, indent=2)
    assert rep["model"] == "tiny-tools" and rep["base_url"] == tools_server.api_url
    assert [checks[n]["result"] for n in CHECKS] == ["pass"] * 4
    assert checks["models"]["details"]["models"] == ["tiny-tools"]
    assert checks["chat"]["details"]["content_chars"] > 0
    assert checks["chat"]["details"]["usage"]["completion_tokens"] > 0
    args = checks["tool_call"]["details"]["arguments"]
    assert isinstance(args, dict) and args["location"].startswith("Paris")
    stream = checks["tool_call_stream"]["details"]
    assert stream["name_deltas"] == 1 and stream["matches_non_streamed"] is True
    assert stream["arguments"] == args  # temperature 0 + fixed seed: the same call twice
    assert stream["argument_fragments"] >= 2 and stream["usage"]["completion_tokens"] > 0


def test_smoke_cli_subprocess_on_v1_url(tools_server: VllmServer) -> None:
    """The installed entry point, the /v1 URL form, required tool choice, human table."""
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_station", "smoke", "--base-url", tools_server.api_url,
         "--model", "tiny-tools", "--tool-choice", "required", "--timeout", "120"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "STATION_API_KEY": ""},
    )  # fmt: skip
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "GO: 4 pass (exit 0)"
    assert "Traceback" not in proc.stderr


def test_smoke_wrong_served_name(tools_server: VllmServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, rep = smoke_json(capsys, "--base-url", tools_server.base_url, "--model", "glm-5.3-flash")
    assert code == 1
    assert rep["checks"][0]["reason"] == (
        "model 'glm-5.3-flash' is not served; the server lists: tiny-tools (use --model tiny-tools)"
    )
    assert [c["result"] for c in rep["checks"]] == ["fail", "skip", "skip", "skip"]


def test_smoke_without_auto_tool_choice(
    vllm_server: Callable[..., VllmServer], capsys: pytest.CaptureFixture[str]
) -> None:
    srv = vllm_server("tools", served_name="tiny-tools", extra_args=[])
    code, rep = smoke_json(capsys, "--base-url", srv.base_url, "--timeout", "120")
    checks = {c["name"]: c for c in rep["checks"]}
    assert code == 1
    assert [checks[n]["result"] for n in CHECKS] == ["pass", "pass", "fail", "fail"]
    for name in ("tool_call", "tool_call_stream"):
        reason = checks[name]["reason"]
        assert "HTTP 400" in reason and "--enable-auto-tool-choice" in reason, reason
        assert checks[name]["error"] == "http"


def test_smoke_nothing_listens(capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 3 where a vLLM server would be but is not (no server needed, so no fixture)."""
    code, rep = smoke_json(capsys, "--base-url", f"http://127.0.0.1:{free_port()}/v1")
    assert code == 3 and rep["checks"][0]["error"] == "unreachable"
    assert "connection refused" in rep["checks"][0]["reason"]
