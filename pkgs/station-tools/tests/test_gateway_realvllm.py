"""The gateway in front of real vLLM (CPU): the NixOS-rendered nginx.conf, run by Debian's nginx, with the
session's tiny tool-calling server as its one station (the `single` variant of checks/gateway/render.nix).

`station smoke` passes through it over https (models, chat, the get_weather call plain and streamed, with
vLLM's real SSE), and paths real vLLM serves — `/invocations`, `/tokenize`, `/metrics` — are refused by
the gateway although vLLM answers them directly. Needs the NixOS tree (NIXOS_TREE) and nginx as well as
the real-vLLM fixtures; each missing piece skips with how to get it.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import VllmServer

CHECKS = Path(__file__).resolve().parents[3] / "checks"
if not (CHECKS / "gateway" / "harness.py").is_file():  # the package built alone (Nix: src is the package)
    pytest.skip(
        "needs the repository's checks/gateway harness: runs from a checkout (scripts/check)",
        allow_module_level=True,
    )
sys.path.insert(0, str(CHECKS))

from gateway.harness import (  # noqa: E402  (checks/ is not a package of this one)
    ERRORS,
    NGINX,
    Gateway,
    Ports,
    free_port,
    generate_tls,
    new_key,
    render,
)
from nixenv import require_nix, require_tree  # noqa: E402

KEYS = ("alice", "bob", "batch", "limited", "bench", "ops")


def test_smoke_through_the_gateway_and_vllm_paths_refused(tools_server: VllmServer, tmp_path: Path) -> None:
    require_nix()
    tree = require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "the gateway in front of real vLLM")
    if not Path(NGINX).exists() or shutil.which("openssl") is None:
        pytest.skip("nginx or openssl is not installed: apt-get install nginx openssl (scripts/check does)")
    ports = Ports(free_port(), free_port(), {"local": tools_server.port, "station-b": 0, "station-c": 0})
    rendered = render(ports, str(tree), ("single",))["single"]
    tls = generate_tls(tmp_path / "pki", ["llm.example.com", "127.0.0.1"])
    keys = {name: new_key(name) for name in KEYS}
    key_file = tmp_path / "alice-key"
    key_file.write_text(keys["alice"] + "\n")
    with Gateway(rendered, tmp_path / "gw", ports.gateway_rr, tls, keys, new_key("station")) as gw:
        smoke = subprocess.run(
            [sys.executable, "-m", "vllm_station", "smoke", "--base-url", gw.url, "--ca-file", str(gw.ca),
             "--api-key-file", str(key_file), "--timeout", "120", "--json"],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-2000:]
        report = json.loads(smoke.stdout)
        assert report["result"] == "pass" and report["model"] == "tiny-tools"
        assert report["checks"][3]["details"]["chunks"] > 1  # the streamed call came in pieces
        assert {e["key"] for e in gw.access_log()} == {"alice"}

        refused = json.loads(ERRORS.read_text())["404"]
        tls_ctx = ssl.create_default_context(cafile=str(gw.ca))
        headers = {"Authorization": f"Bearer {keys['alice']}"}
        with (
            httpx.Client(trust_env=False, timeout=60) as direct,
            httpx.Client(
                base_url=gw.url, verify=tls_ctx, headers=headers, trust_env=False, timeout=60
            ) as through,
        ):
            tokenize = {"model": "tiny-tools", "prompt": "hello"}
            operator_only = json.loads(ERRORS.read_text())["403-operator"]
            resp = through.post("/tokenize", json=tokenize)  # a user key
            assert resp.status_code == 403 and resp.json() == {"error": {**operator_only, "param": None}}
            ops = {"Authorization": f"Bearer {keys['ops']}"}
            assert through.post("/tokenize", json=tokenize, headers=ops).json()["count"] >= 1
            for method, path, body in [
                ("GET", "/metrics", None),
                ("POST", "/invocations", {"model": "tiny-tools", "prompt": "hi", "max_tokens": 1}),
            ]:
                answered = direct.request(method, tools_server.base_url + path, json=body)
                assert answered.status_code != 404, f"real vLLM serves {path}: {answered.status_code}"
                resp = through.request(method, path, json=body)
                assert resp.status_code == 404 and resp.json() == {"error": {**refused, "param": None}}


def test_raw_cases_against_real_vllm(tools_server: VllmServer, tmp_path: Path) -> None:
    """checks/test_gateway_raw.py's raw cases, with real vLLM behind the rendered gateway: a case the
    recording station saw nothing of gets the same answer here, and no keyless case gets a byte of
    /metrics (vLLM's `/metrics` matches by prefix: `/metrics/../health` forwarded raw would leak it)."""
    require_nix()
    tree = require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "the gateway in front of real vLLM")
    if not Path(NGINX).exists() or shutil.which("openssl") is None:
        pytest.skip("nginx or openssl is not installed: apt-get install nginx openssl (scripts/check does)")
    import test_gateway_raw as raw

    assert b"vllm:" in httpx.get(tools_server.base_url + "/metrics", timeout=60, trust_env=False).content
    ports = Ports(free_port(), free_port(), {"local": tools_server.port, "station-b": 0, "station-c": 0})
    rendered = render(ports, str(tree), ("single",))["single"]
    tls = generate_tls(tmp_path / "pki", ["llm.example.com", "127.0.0.1"])
    keys = {name: new_key(name) for name in KEYS}
    sent = 0
    with Gateway(rendered, tmp_path / "gw", ports.gateway_rr, tls, keys, new_key("station")) as gw:
        env = raw.Env(gw, None, keys, "", rendered)  # type: ignore[arg-type]  # no recorder: real vLLM
        for case in raw.CASES:
            resp = raw.send(env, case)
            sent += 1
            assert b"vllm:" not in resp.body, case.name
            if case.upstream is None:
                assert resp.status == case.status, (case.name, resp)
                if case.error is not None:
                    raw.json_error(resp, case.error)
            elif case.upstream.endswith(b"/health HTTP/1.1"):
                assert resp.status == 200 and resp.body == b"", (case.name, resp)
            else:
                assert resp.status not in (401, 403, 404), (case.name, resp)  # reached vLLM
    print(f"gateway figure: raw cases sent to real vLLM = {sent}", file=sys.stderr)
