"""The gateway's paths, byte for byte: raw requests in, raw request lines out.

Debian's nginx runs the configuration NixOS renders for checks/examples/gateway-station.nix (its `single`
variant: one station) in front of a station that records every request's raw bytes
(checks/gateway/harness.py: `Recorder`). The client writes bytes to a TLS socket itself — no HTTP library,
which would remove dot segments or re-encode the path before sending — so every case reaches nginx
exactly as written: dot segments, encoded slashes, `;` parameters, queries, absolute-URI request lines,
HTTP/1.0, other methods, bodies where none belong, malformed requests. Each case says what the client
gets (status and, for the gateway's own answers, the OpenAI JSON error of modules/gateway/errors.json)
and the one request line the station receives, or that it receives nothing.

The same cases run against real vLLM behind the rendered gateway in
pkgs/station-tools/tests/test_gateway_realvllm.py (tier realvllm).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gateway.harness import (
    ERRORS,
    NGINX,
    Gateway,
    Ports,
    RawResponse,
    Recorder,
    finish_render,
    generate_tls,
    new_key,
    raw_request,
    start_render,
)
from nixenv import require_nix, require_tree

pytestmark = pytest.mark.nix_nixos

KEY_NAMES = ("alice", "bob", "batch", "limited", "bench", "ops")
ERROR_BODIES: dict[str, dict[str, str]] = json.loads(ERRORS.read_text())
HOST = b"Host: llm.example.com\r\n"
CLOSE = b"Connection: close\r\n"


@dataclass(frozen=True)
class Case:
    """`request` with `{user}` / `{ops}` for an Authorization header of that role's key (or none);
    `upstream`: the request line the station must receive, None: it must receive nothing."""

    name: str
    request: bytes
    status: int
    upstream: bytes | None
    error: str | None = None  # the errors.json entry of the gateway's own answer
    body: tuple[bytes, ...] = ()


def get(target: bytes, auth: bytes = b"", version: bytes = b"HTTP/1.1", method: bytes = b"GET") -> bytes:
    return method + b" " + target + b" " + version + b"\r\n" + HOST + auth + CLOSE + b"\r\n"


def post(target: bytes, auth: bytes, body: bytes = b"{}") -> bytes:
    return (b"POST " + target + b" HTTP/1.1\r\n" + HOST + auth + CLOSE
            + b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip


USER, OPS = b"{user}", b"{ops}"
CHAT = b"POST /v1/chat/completions HTTP/1.1"
MODELS = b"GET /v1/models HTTP/1.1"
HEALTH = b"GET /health HTTP/1.1"
TEN_MIB = 10 << 20

CASES = [
    # ---- allowlisted paths, with a key: the station receives the gateway's literal path, nothing else
    Case("chat", post(b"/v1/chat/completions", USER), 200, CHAT),
    Case("chat with a query", post(b"/v1/chat/completions?x=../../metrics&stream=1", USER), 200, CHAT),
    Case("chat with a dot segment", post(b"/v1/x/../chat/completions", USER), 200, CHAT),
    Case("chat with a dot", post(b"/v1/chat/./completions", USER), 200, CHAT),
    Case("chat with an encoded slash", post(b"/v1/chat%2Fcompletions", USER), 200, CHAT),
    Case("chat with encoded letters", post(b"/%76%31/chat/completions", USER), 200, CHAT),
    Case("chat with a ; parameter", post(b"/v1/chat/completions;x=1", USER), 404, None, "404"),
    Case("chat, absolute URI", post(b"http://evil.example/v1/chat/completions", USER), 200, CHAT),
    Case("models", get(b"/v1/models", USER), 200, MODELS),
    Case("models, HTTP/1.0", get(b"/v1/models", USER, b"HTTP/1.0"), 200, MODELS),
    Case("models, doubled slashes", get(b"//v1//models", USER), 200, MODELS),
    Case("models from /metrics/..", get(b"/metrics/../v1/models", USER), 200, MODELS),
    Case("metrics from /v1/..", get(b"/v1/../metrics", USER), 404, None, "404"),
    Case("metrics from /v1/models/../..", get(b"/v1/models/../../metrics", USER), 404, None, "404"),
    Case("metrics, encoded dots", get(b"/v1/%2e%2e/metrics", USER), 404, None, "404"),
    Case("metrics, absolute URI", get(b"http://llm.example.com/metrics", USER), 404, None, "404"),
    Case("invocations", post(b"/invocations", USER), 404, None, "404"),
    Case("the internal group location", get(b"/_vllm_station/default/", USER), 404, None, "404"),
    Case("an internal error location", get(b"/_vllm_station/error/401", USER), 404, None, "404"),
    Case("no key", get(b"/v1/models"), 401, None, "401"),
    # ---- /health, keyless: a fixed URI, GET/HEAD only, no body
    Case("health", get(b"/health"), 200, HEALTH),
    Case("health, HEAD", get(b"/health", method=b"HEAD"), 200, HEALTH),  # vLLM answers HEAD 405: sent as GET
    Case("health, HTTP/1.0", get(b"/health", version=b"HTTP/1.0"), 200, HEALTH),
    Case("health with a query", get(b"/health?/../metrics"), 200, HEALTH),
    Case("health from /metrics/..", get(b"/metrics/../health"), 200, HEALTH),
    Case("health from /metrics%2F..%2F", get(b"/metrics%2F..%2Fhealth"), 200, HEALTH),
    Case("health from /v1/../", get(b"/v1/../health"), 200, HEALTH),
    Case("health, absolute URI", get(b"http://llm.example.com/health"), 200, HEALTH),
    Case("health with a ; parameter", get(b"/health;/metrics"), 404, None, "404"),
    Case("health/, a prefix", get(b"/health/../metrics"), 404, None, "404"),
    Case("health, POST", post(b"/health", b""), 405, None, "405"),
    Case("health, DELETE", get(b"/health", method=b"DELETE"), 405, None, "405"),
    Case("health, OPTIONS", get(b"/health", method=b"OPTIONS"), 405, None, "405"),
    Case("health, PUT of 10 MiB",
         b"PUT /health HTTP/1.1\r\n" + HOST + CLOSE + b"Content-Length: " + str(TEN_MIB).encode() + b"\r\n\r\n",
         405, None, "405", (b"x" * TEN_MIB,)),
    Case("health, GET with 10 MiB",
         b"GET /health HTTP/1.1\r\n" + HOST + CLOSE + b"Content-Length: " + str(TEN_MIB).encode() + b"\r\n\r\n",
         413, None, "413", (b"x" * TEN_MIB,)),
    Case("health, GET with a chunked body",
         b"GET /health HTTP/1.1\r\n" + HOST + CLOSE + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
         413, None, "413"),
    # ---- operator paths: operator keys only
    Case("tokenize, operator", post(b"/tokenize", OPS), 200, b"POST /tokenize HTTP/1.1"),
    Case("tokenize, operator, dot segment", post(b"/v1/../tokenize", OPS), 200, b"POST /tokenize HTTP/1.1"),
    Case("version, operator", get(b"/version", OPS), 200, b"GET /version HTTP/1.1"),
    Case("tokenize, user", post(b"/tokenize", USER), 403, None, "403-operator"),
    Case("version, user", get(b"/version", USER), 403, None, "403-operator"),
    Case("tokenize, no key", post(b"/tokenize", b""), 401, None, "401"),
    Case("models from /tokenize/.., user", get(b"/tokenize/../v1/models", USER), 200, MODELS),
    # ---- nginx's own errors, before and after a location was chosen: JSON too
    Case("not HTTP", b"GARBAGE\r\n\r\n", 400, None, "400"),
    Case("no Host", b"GET /v1/models HTTP/1.1\r\n" + CLOSE + b"\r\n", 400, None, "400"),
    Case("a bad escape", get(b"/v1/%2"), 400, None, "400"),
    Case("above the root", get(b"/../../v1/models", USER), 400, None, "400"),
    Case("a 10,000-byte URI", get(b"/v1/" + b"a" * 10_000, USER), 414, None, "414"),
    Case("a 10,000-byte header", get(b"/v1/models", USER + b"X-Pad: " + b"a" * 10_000 + b"\r\n"), 400, None, "400"),
    Case("HTTP/2.0 in a request line", get(b"/v1/models", USER, b"HTTP/2.0"), 505, None, "505"),
    Case("HTTP/3.0 in a request line", get(b"/health", version=b"HTTP/3.0"), 505, None, "505"),
    Case("TRACE", get(b"/v1/models", USER, method=b"TRACE"), 405, None, "405"),
    Case("an unknown transfer encoding",
         b"POST /v1/chat/completions HTTP/1.1\r\n" + HOST + USER + CLOSE + b"Transfer-Encoding: gzip\r\n\r\n",
         501, None, "501"),
]


@dataclass
class Env:
    gw: Gateway
    station: Recorder
    keys: dict[str, str]
    upstream_key: str
    rendered: dict[str, Any]


@dataclass(frozen=True)
class Setup:
    """What both gateways of this module start from: a directory, free ports, a rendering under way (the
    "single" variant, for those ports), a test CA and the keys."""

    work: Path
    ports: Ports
    render: subprocess.Popen[str]
    tls: tuple[Path, Path, Path]
    keys: dict[str, str]
    upstream_key: str


@contextmanager
def setup(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Setup]:
    require_nix()
    tree = require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "the raw gateway tests")
    if not Path(NGINX).exists():
        pytest.skip("nginx is not installed: apt-get install nginx (scripts/check installs it)")
    work = tmp_path_factory.mktemp(name)
    ports = Ports.free()
    render = start_render(ports, str(tree), ("single",))
    try:
        tls = generate_tls(work / "pki", ["llm.example.com", "127.0.0.1"])
        yield Setup(work, ports, render, tls, {k: new_key(k) for k in KEY_NAMES}, new_key("station"))
    finally:
        if render.poll() is None:
            render.kill()
            render.wait()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with setup(tmp_path_factory, "gateway-raw") as s, Recorder(s.ports.upstreams["local"]) as station:
        rendered = finish_render(s.render)["single"]
        with Gateway(rendered, s.work / "gw", s.ports.gateway_rr, s.tls, s.keys, s.upstream_key) as gw:
            print(f"gateway figure: raw cases = {len(CASES)}", file=sys.stderr)
            yield Env(gw, station, s.keys, s.upstream_key, rendered)


def send(env: Env, case: Case) -> RawResponse:
    auth = {
        USER: f"Authorization: Bearer {env.keys['alice']}\r\n".encode(),
        OPS: f"Authorization: Bearer {env.keys['ops']}\r\n".encode(),
    }
    data = case.request
    for placeholder, header in auth.items():
        data = data.replace(placeholder, header)
    return raw_request(env.gw.port, data, env.gw.ca, case.body)


def json_error(resp: RawResponse, name: str) -> None:
    assert resp.headers.get("content-type") == "application/json", resp
    assert json.loads(resp.body) == {"error": {**ERROR_BODIES[name], "param": None}}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_raw_request(env: Env, case: Case) -> None:
    env.station.take()
    resp = send(env, case)
    got = env.station.take()
    assert resp.status == case.status, (resp, got)
    if case.error is not None:
        json_error(resp, case.error)
    if case.upstream is None:
        assert got == [], f"the station received {[r.line for r in got]}"
        return
    assert [r.line for r in got] == [case.upstream]
    (req,) = got
    # The Host the gateway chose (the pool's name), never the client's or an absolute URI's.
    assert req.header(b"host") in ([b"vllm_station"], [b"vllm_station_affinity"])
    if case.upstream.endswith(b"/health HTTP/1.1"):
        assert req.header(b"authorization") == [] and req.body == b""
        assert req.header(b"content-length") == [] and req.header(b"transfer-encoding") == []
    else:
        assert req.header(b"authorization") == [f"Bearer {env.upstream_key}".encode()]


def test_health_has_its_own_rate_per_address(env: Env) -> None:
    """Bursts above the health rate (5 r/s, burst 10) get the JSON 429; a key's budget is untouched."""
    statuses = []
    for _ in range(200):
        resp = send(env, CASES[[c.name for c in CASES].index("health")])
        statuses.append(resp.status)
        if resp.status == 429:
            json_error(resp, "429")
            break
    assert statuses[-1] == 429, f"no 429 in {len(statuses)} back-to-back requests"
    env.station.take()
    assert send(env, CASES[0]).status == 200  # inference is limited per key, not by /health's zone


def test_health_refusals_are_logged(env: Env) -> None:
    before = len(env.gw.access_log())
    assert send(env, next(c for c in CASES if c.name == "health, DELETE")).status == 405
    entries = env.gw.access_log()[before:]
    assert [(e["method"], e["path"], e["status"]) for e in entries][-1:] == [("DELETE", "/health", "405")]


def _nginx_temp_files(gw: Gateway) -> list[str]:
    """Files nginx's processes hold open under a temporary-body path (nginx unlinks them at once, so
    the directory stays empty: /proc/PID/fd shows them)."""
    assert gw.proc is not None
    pids = [gw.proc.pid, *(int(p) for p in subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(gw.proc.pid)], capture_output=True, text=True, check=False
    ).stdout.split())]  # fmt: skip
    held = []
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        for fd in fd_dir.iterdir() if fd_dir.exists() else []:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if "body" in target or "(deleted)" in target:
                held.append(target)
    return held


def test_a_5_mib_prompt_stays_in_memory(env: Env) -> None:
    """While the station holds a 5 MiB request, nginx holds no temporary file for its body."""
    assert env.gw.proc is not None
    if not os.access(f"/proc/{env.gw.proc.pid}/fd", os.R_OK):
        pytest.skip("cannot read nginx's /proc/PID/fd here (not its user)")
    body = b'{"model": "sim", "messages": [{"role": "user", "content": "' + b"x" * (5 << 20) + b'"}]}'
    env.station.take()
    env.station.hold.clear()
    env.station.arrived.clear()
    import threading

    result: list[RawResponse] = []
    sender = threading.Thread(target=lambda: result.append(send(env, Case("big", post(b"/v1/chat/completions",
                                                                                      USER, body), 200, CHAT))))  # fmt: skip
    sender.start()
    try:
        assert env.station.arrived.wait(timeout=60), "the request never reached the station"
        held = _nginx_temp_files(env.gw)
    finally:
        env.station.hold.set()
        sender.join(timeout=60)
    assert held == [], f"nginx spooled the body to disk: {held}"
    assert result and result[0].status == 200
    (req,) = env.station.take()
    assert req.line == CHAT and req.body == body


# ---- golive's needle gate through the gateway: an operator key passes, a user key is refused ----------


@pytest.fixture(scope="module")
def needle_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, dict[str, Path]]]:
    """The same rendered gateway in front of `station simulate --gates reference` (it answers needles)."""
    from vllm_station.sim.process import SimProcess

    with setup(tmp_path_factory, "gateway-needle") as s:
        (s.work / "station-key").write_text(s.upstream_key + "\n")
        key_files = {}
        for name in ("alice", "ops"):
            key_files[name] = s.work / f"{name}.key"
            key_files[name].write_text(s.keys[name] + "\n")
        sim_args = ["--gates", "reference", "--ttft", "0", "--itl", "0", "--max-model-len", "20000", "--model",
                    "glm-sim", "--api-key-file", str(s.work / "station-key"), "--port", str(s.ports.upstreams["local"])]  # fmt: skip
        with SimProcess(sim_args):
            rendered = finish_render(s.render)["single"]
            with Gateway(rendered, s.work / "gw", s.ports.gateway_rr, s.tls, s.keys, s.upstream_key) as gw:
                yield gw, key_files


def _station(gw: Gateway, key_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_station", *args, "--base-url", gw.url, "--ca-file", str(gw.ca),
         "--api-key-file", str(key_file)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


NEEDLE = ("--lengths", "25%", "--depths", "50", "--no-calibration-cache")


def test_needle_gate_passes_through_the_gateway_with_an_operator_key(
    needle_gw: tuple[Gateway, dict[str, Path]],
) -> None:
    gw, key_files = needle_gw
    ok = _station(gw, key_files["ops"], "gates", "needle", *NEEDLE, "--json")
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    report = json.loads(ok.stdout)
    assert report["tokenize_calls"] > 0
    refused = _station(gw, key_files["alice"], "gates", "needle", *NEEDLE, "--json")
    assert refused.returncode != 0
    assert "operator" in refused.stdout + refused.stderr  # the gateway's 403 says which key it needs


def test_golive_needle_through_the_gateway_needs_an_operator_key(
    needle_gw: tuple[Gateway, dict[str, Path]], tmp_path: Path
) -> None:
    gw, key_files = needle_gw
    skip = "--skip", "smoke,tools,agent,bench"
    ok = _station(gw, key_files["ops"], "golive", *skip, "--json", "--out", str(tmp_path / "ops"))
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    refused = _station(gw, key_files["alice"], "golive", *skip, "--json", "--out", str(tmp_path / "user"))
    assert refused.returncode != 0
    assert "operator" in refused.stdout + refused.stderr


def test_golive_every_gate_through_the_gateway_with_an_operator_key(
    needle_gw: tuple[Gateway, dict[str, Path]], tmp_path: Path
) -> None:
    """The whole go-live (smoke, tools, agent, needle, bench) through the gateway, as an operator runs it:
    GO with the operator key, every gate held, each gate's requests through the gateway's key and limits."""
    gw, key_files = needle_gw
    small = ("--needle-lengths", "25%", "--needle-depths", "50", "--bench-concurrency", "1,4",
             "--bench-requests", "4", "--bench-output-len", "16")  # fmt: skip
    out = tmp_path / "ops-all"
    ok = _station(gw, key_files["ops"], "golive", *small, "--json", "--out", str(out))
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-3000:]
    report = json.loads((out / "golive.json").read_text())
    assert [(g["name"], g["held"]) for g in report["gates"]] == [
        ("smoke", True), ("tools", True), ("agent", True), ("needle", True), ("bench", True)
    ], report["gates"]
    assert (report["result"], report["exit_code"]) == ("go", 0)
    assert report["gates"][1]["summary"] == "40/40 cases"  # no tool case lost to a 429 or a TLS error


def test_the_status_page_listens_on_loopback_only(tmp_path: Path) -> None:
    """With monitoring on, nixpkgs' status page server (`services.nginx.statusPage`) is the nginx
    exporter's: every `listen` of the rendered configuration is a loopback address (the gateway's is
    127.0.0.1 in these tests), none is 0.0.0.0 or [::]."""
    require_nix()
    tree = require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "the raw gateway tests")
    conf = finish_render(start_render(Ports.free(), str(tree), ("monitored",)))["monitored"]["nginxConf"]
    listens = [line.split()[1] for line in conf.splitlines() if line.strip().startswith("listen ")]
    assert any(addr.endswith(":80") for addr in listens), listens  # the status page is there
    assert all(addr.startswith(("127.0.0.1:", "[::1]:")) for addr in listens), listens
