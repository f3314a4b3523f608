"""smoke, wait-ready and bench over https with `--ca-file` (a gateway with a private CA), against a real
TLS server (the simulator behind a certificate signed by a CA made here with openssl)."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from simserver import SimServer

from vllm_station.sim.config import SimConfig

pytestmark = [
    pytest.mark.host,  # a Nix build lacks the openssl command
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command"),
]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "2", "-subj", "/CN=station test CA", cwd=d)  # fmt: skip
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr",
             "-subj", "/CN=127.0.0.1", cwd=d)  # fmt: skip
    _openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "srv.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)  # fmt: skip
    return d


@pytest.fixture(scope="module")
def tls_sim(pki: Path) -> Iterator[SimServer]:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pki / "srv.pem", pki / "srv.key")
    with SimServer(SimConfig(ttft=0.01, itl=0.001, output_len=8), ssl_context=ctx) as s:
        yield s


def station(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_station", *args], capture_output=True, text=True, timeout=120
    )


def test_smoke_and_wait_ready_with_the_ca(tls_sim: SimServer, pki: Path) -> None:
    assert tls_sim.base_url.startswith("https://")
    ca = str(pki / "ca.pem")
    r = station("wait-ready", "--base-url", tls_sim.base_url, "--ca-file", ca, "--timeout", "20")
    assert r.returncode == 0, r.stderr
    r = station("smoke", "--base-url", tls_sim.base_url, "--ca-file", ca, "--json")
    assert json.loads(r.stdout)["checks"][0]["result"] == "pass", r.stdout + r.stderr


def test_without_the_ca_the_handshake_fails_clearly(tls_sim: SimServer) -> None:
    r = station("smoke", "--base-url", tls_sim.base_url, "--timeout", "10")
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert "TLS handshake failed" in r.stdout and "the certificate is not trusted" in r.stdout
    assert "--ca-file" in r.stdout and "plain http" not in r.stdout


def test_https_to_a_plain_http_port_says_so() -> None:
    """https:// to a port that speaks plain http: the fix is http://, not a CA bundle."""
    with SimServer(SimConfig(ttft=0.01, itl=0.001, output_len=8)) as plain:
        url = plain.base_url.replace("http://", "https://")
        r = station("smoke", "--base-url", url, "--timeout", "10")
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert "that port speaks plain http, not TLS: use http://" in r.stdout, r.stdout
    assert "--ca-file" not in r.stdout


def test_a_port_that_is_not_http_says_so() -> None:
    """A port that answers with something else (an SSH banner, then a close): the message asks whether the
    port is an HTTP server, not "broke mid-answer"."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]

        def banner() -> None:
            with contextlib.suppress(OSError):
                while True:
                    conn, _ = srv.accept()
                    with conn:
                        conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")  # an SSH server's first line
                        conn.recv(65536)  # the request, read: the close is then a FIN, not a reset
                        time.sleep(1)

        threading.Thread(target=banner, daemon=True).start()
        r = station("smoke", "--base-url", f"http://127.0.0.1:{port}", "--timeout", "10")
    assert r.returncode in (1, 3) and "Traceback" not in r.stderr
    assert "closed before any answer" in r.stdout and "not an HTTP server?" in r.stdout, r.stdout


def test_bench_over_https_with_the_ca(tls_sim: SimServer, pki: Path, tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    ca = str(pki / "ca.pem")
    opts = ["-c", "2", "--requests", "2", "--warmup", "0", "--output-len", "8", "--output", str(out)]
    r = station("bench", "sweep", "--base-url", tls_sim.base_url, "--ca-file", ca, *opts)
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    assert report["base_url"].startswith("https://")
    level = report["levels"][0]
    assert level["ok"] >= 2 and level["failures"] == {}, level
    r = station("bench", "sweep", "--base-url", tls_sim.base_url, "-c", "1", "--requests", "1",
                "--warmup", "0", "--output-len", "8")  # fmt: skip
    assert r.returncode != 0 and "Traceback" not in r.stderr
