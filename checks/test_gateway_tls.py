"""The link from a gateway to a station over mutual TLS, run by Debian's real nginx.

checks/examples/gateway-station.nix reaches its stations through their `stationListener`: the gateway
speaks TLS (`gateway.stationTls`: the stations' CA, their shared name, its own client certificate) and
each station's listener accepts only the gateways' client certificates and addresses, then proxies to
vLLM on loopback. Its `station-tls` rendering (checks/gateway/render.nix) holds both ends in one
nginx.conf: gateway -> this station's listener -> a recording station on vLLM's loopback port
(checks/gateway/harness.py: `Recorder`). Test certificates come from test CAs (`generate_tls`).

Each test starts nginx with the certificates it needs, and checks what the station received: the
request, with the station's key and without the client's, only through a verified link; nothing at
all when a link is plain, unauthenticated or verified against another CA or name.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gateway.harness import (
    ERRORS,
    NGINX,
    Gateway,
    Ports,
    Recorder,
    finish_render,
    generate_tls,
    new_key,
    raw_request,
    start_render,
)
from nixenv import require_nix, require_tree

pytestmark = pytest.mark.nix_nixos

SERVER_NAME = "stations.vllm.internal"  # gateway.stationTls.serverName of the example
KEY_NAMES = ("alice", "bob", "batch", "limited", "bench", "ops")
MODELS = b"GET /v1/models HTTP/1.1\r\nHost: llm.example.com\r\nConnection: close\r\n"


@dataclass(frozen=True)
class Pki:
    stations_ca: Path  # signed the listener's certificate
    listener: tuple[Path, Path]  # for SERVER_NAME
    gateways_ca: Path  # signed the gateway's client certificate
    client: tuple[Path, Path]
    other_ca: Path  # a CA no one trusts, and a client certificate it signed
    other_client: tuple[Path, Path]
    misnamed_listener: tuple[Path, Path]  # the stations' CA, another name


def _pair(ca: Path, cert: Path, key: Path) -> tuple[Path, tuple[Path, Path]]:
    return ca, (cert, key)


@dataclass
class Env:
    work: Path
    ports: Ports
    rendered: dict[str, Any]
    pki: Pki
    gateway_tls: tuple[Path, Path, Path]
    station: Recorder
    keys: dict[str, str]
    upstream_key: str


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    require_nix()
    tree = require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "the gateway-to-station TLS tests")
    if not Path(NGINX).exists():
        pytest.skip("nginx is not installed: apt-get install nginx (scripts/check installs it)")
    work = tmp_path_factory.mktemp("gateway-tls")
    ports = Ports.free()
    render = start_render(ports, str(tree), ("station-tls",))
    try:
        stations_ca, listener = _pair(*generate_tls(work / "stations", [SERVER_NAME]))
        gateways_ca, client = _pair(*generate_tls(work / "gateways", ["gateway"], usage="clientAuth"))
        other_ca, _ = _pair(*generate_tls(work / "other", [SERVER_NAME]))
        _, other_client = _pair(*generate_tls(work / "other-client", ["gateway"], usage="clientAuth"))
        _, misnamed = _pair(*generate_tls(work / "misnamed", ["other.vllm.internal"]))
        # The misnamed certificate signed by the stations' CA: re-sign its request with that CA.
        misnamed_cert = work / "misnamed" / "by-stations-ca.pem"
        subprocess.run(["openssl", "x509", "-req", "-in", str(work / "misnamed" / "req.csr"),
                        "-CA", str(stations_ca), "-CAkey", str(work / "stations" / "ca.key"), "-CAcreateserial",
                        "-days", "2", "-extfile", str(work / "misnamed" / "san.cnf"), "-out", str(misnamed_cert)],
                       check=True, capture_output=True, timeout=60)  # fmt: skip
        pki = Pki(stations_ca, listener, gateways_ca, client, other_ca, other_client,
                  (misnamed_cert, misnamed[1]))  # fmt: skip
        gateway_tls = generate_tls(work / "front", ["llm.example.com", "127.0.0.1"])
        keys = {name: new_key(name) for name in KEY_NAMES}
        with Recorder(ports.upstreams["local"]) as station:
            rendered = finish_render(render)["station-tls"]
            yield Env(work, ports, rendered, pki, gateway_tls, station, keys, new_key("station"))
    finally:
        if render.poll() is None:
            render.kill()
            render.wait()


def gateway(env: Env, name: str, stations_ca: Path | None = None,
            listener: tuple[Path, Path] | None = None) -> Gateway:  # fmt: skip
    """nginx with the rendered configuration; the files at the paths it names are the test's (the
    example's by default, or another CA for the gateway to trust / another listener certificate)."""
    work = env.work / name
    tls_dir, listener_dir = work / "tls", work / "listener"
    tls_dir.mkdir(parents=True)
    listener_dir.mkdir()
    shutil.copy(stations_ca or env.pki.stations_ca, tls_dir / "stations-ca.pem")
    shutil.copy(env.pki.client[0], tls_dir / "client.pem")
    shutil.copy(env.pki.client[1], tls_dir / "client-key.pem")
    cert, key = listener or env.pki.listener
    shutil.copy(cert, listener_dir / "fullchain.pem")
    shutil.copy(key, listener_dir / "key.pem")
    shutil.copy(env.pki.gateways_ca, listener_dir / "gateways-ca.pem")
    gw = Gateway(env.rendered, work, env.ports.gateway, env.gateway_tls, env.keys, env.upstream_key)
    gw.extra_paths = {"/var/lib/vllm-station-listener/": listener_dir}
    return gw


def to_listener(env: Env, **kw: Any) -> tuple[int, list[bytes]]:
    """GET /v1/models straight to the listener: (status, request lines the station received)."""
    env.station.take()
    resp = raw_request(env.ports.listener, MODELS + b"\r\n", **kw)
    return resp.status, [r.line for r in env.station.take()]


def through_gateway(env: Env, gw: Gateway) -> tuple[int, list[Any]]:
    env.station.take()
    with gw.client(env.keys["alice"]) as c:
        status = c.post("/v1/chat/completions", json={"model": "sim", "messages": []}).status_code
    return status, env.station.take()


def test_the_rendered_link_is_tls_both_ways(env: Env) -> None:
    conf = env.rendered["nginxConf"]
    for line in ("proxy_pass https://vllm_station$vllm_station_path;", "proxy_ssl_verify on;",
                 f"proxy_ssl_name {SERVER_NAME};", "ssl_verify_client on;"):  # fmt: skip
        assert line in conf, line
    assert "proxy_pass http://vllm_station" not in conf


def test_the_station_receives_the_request_through_its_listener_with_its_own_key(env: Env) -> None:
    with gateway(env, "through") as gw:
        status, got = through_gateway(env, gw)
        listener_log = (gw.log_dir / "vllm-station-listener.log").read_text()
    assert status == 200
    assert [r.line for r in got] == [b"POST /v1/chat/completions HTTP/1.1"]
    (req,) = got
    # The listener's Host (vLLM's loopback address): the request came through the listener.
    assert req.header(b"host") == [f"127.0.0.1:{env.ports.upstreams['local']}".encode()]
    # The station's key, added by the gateway; the client's key goes no further than the gateway.
    assert req.header(b"authorization") == [f"Bearer {env.upstream_key}".encode()]
    assert env.keys["alice"].encode() not in b"".join(v for _, v in req.headers) + req.body
    assert "POST /v1/chat/completions" in listener_log


def test_the_listener_refuses_plain_http(env: Env) -> None:
    with gateway(env, "plain"):
        status, got = to_listener(env)
    assert status == 400 and got == []


def test_the_listener_refuses_a_client_without_a_certificate(env: Env) -> None:
    with gateway(env, "no-cert"):
        status, got = to_listener(env, ca=env.pki.stations_ca, server_name=SERVER_NAME)
    assert status == 400 and got == []


def test_the_listener_refuses_a_client_certificate_of_another_ca(env: Env) -> None:
    with gateway(env, "other-client"):
        status, got = to_listener(env, ca=env.pki.stations_ca, server_name=SERVER_NAME, cert=env.pki.other_client)
        # The gateway's own certificate, from the same address: through (the refusal above was the CA's).
        ok, through = to_listener(env, ca=env.pki.stations_ca, server_name=SERVER_NAME, cert=env.pki.client)
    assert status == 400 and got == []
    assert ok == 200 and through == [b"GET /v1/models HTTP/1.1"]


def test_the_listener_refuses_an_address_that_is_not_a_gateway(env: Env) -> None:
    with gateway(env, "address"):
        status, got = to_listener(env, ca=env.pki.stations_ca, server_name=SERVER_NAME, cert=env.pki.client,
                                  source="127.0.0.2")  # fmt: skip
    assert status == 403 and got == []


@pytest.mark.parametrize("case", ["another CA", "another name"])
def test_the_gateway_refuses_a_station_it_cannot_verify(env: Env, case: str) -> None:
    if case == "another CA":
        gw = gateway(env, "other-ca", stations_ca=env.pki.other_ca)  # the listener's CA is not the one trusted
    else:
        gw = gateway(env, "misnamed", listener=env.pki.misnamed_listener)
    with gw:
        status, got = through_gateway(env, gw)
        errors = gw.logs_text()
    assert status == 502 and got == []
    assert "upstream SSL certificate" in errors, errors[-2000:]


def test_a_drained_listener_refuses_new_requests_before_its_station(env: Env) -> None:
    """`station drain` on a station behind a listener: the listener answers 503 (`station_draining`,
    Retry-After) for its station — through the gateway too — and the station receives nothing;
    undrained, the next request reaches it. (checks/test_gateway_drain.py: the same on this host's gateway.)"""
    flags = Path(tempfile.mkdtemp(prefix="station-drain-"))  # nginx's workers (not root) test the flag
    try:
        flags.chmod(0o755)
        (flags / "drain").mkdir(mode=0o755)
        gw = gateway(env, "drain")
        gw.extra_paths["/var/lib/vllm-station-drain/"] = flags / "drain"
        run = {**os.environ, "STATION_DRAIN_DIR": str(flags / "drain"),
               "STATION_STOPPING_FLAG": str(flags / "stopping")}  # fmt: skip
        with gw:
            assert through_gateway(env, gw)[0] == 200
            subprocess.run([sys.executable, "-m", "vllm_station", "drain"], env=run, check=True, timeout=60,
                           capture_output=True)  # fmt: skip
            env.station.take()
            with gw.client(env.keys["alice"]) as c:
                resp = c.post("/v1/chat/completions", json={"model": "sim", "messages": []})
                health = c.get("/health")
            assert resp.status_code == 503 and health.status_code == 503, (resp.text, health.text)
            assert resp.headers["retry-after"] == "10"
            expected = json.loads(ERRORS.read_text())["503-draining"]
            assert resp.json() == {"error": {**expected, "param": None}}
            assert env.station.take() == [], "a request reached the drained station"
            subprocess.run([sys.executable, "-m", "vllm_station", "undrain"], env=run, check=True, timeout=60,
                           capture_output=True)  # fmt: skip
            status, received = through_gateway(env, gw)
            assert status == 200 and len(received) == 1
    finally:
        shutil.rmtree(flags, ignore_errors=True)
