"""Run the gateway NixOS renders with Debian's real nginx, in front of `station simulate` instances.

Shared by the gateway tests (checks/test_gateway*.py) and scripts/bench-gateway:

    ports = Ports.free()
    rendered = render(ports)                      # one NixOS evaluation of checks/examples/gateway-station.nix
    with Gateway(rendered["example"], workdir, ports) as gw:   # keys unit's command, then nginx
        gw.url, gw.keys["alice"], gw.access_log()

What is run is what NixOS renders: nginx.conf as nixpkgs' nginx module writes it (validateConfigFile off, so
its text is readable without building gixy), and the ExecStart of vllm-station-gateway-keys.service
(`station gateway keys`) with its credentials. Paths are mapped as the system tier maps them, as a table:
store paths by the package they belong to (nginx's conf/ and mailcap's mime.types are Debian nginx's files,
the vllm-station package is the venv's `station`), absolute runtime paths (/run, /var/log/nginx, the TLS
files under /var/lib) to directories of the test. A store path outside the table fails, naming it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import httpx

CHECKS = Path(__file__).resolve().parent.parent
REPO = CHECKS.parent
RENDER = CHECKS / "gateway" / "render.nix"
ERRORS = REPO / "modules" / "gateway" / "errors.json"
STORE_PATH = re.compile(r"/nix/store/[0-9a-z]{32}-[^/\s\"'`;:$]+")
# The upstreams of checks/examples/gateway-station.nix, in the order the tests start simulators for them.
UPSTREAMS = ("local", "station-b", "station-c")
NGINX = "/usr/sbin/nginx"
# What a store path of each package stands for here (relative path inside it -> this machine's file).
PACKAGE_FILES = {
    "nginx": {
        "conf/fastcgi.conf": "/etc/nginx/fastcgi.conf",
        "conf/uwsgi_params": "/etc/nginx/uwsgi_params",
    },
    "mailcap": {"etc/nginx/mime.types": "/etc/nginx/mime.types"},
}


class UnmappedPath(AssertionError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Ports:
    gateway: int
    gateway_rr: int
    upstreams: dict[str, int]
    listener: int = 0  # the station-tls variant's stationListener

    @classmethod
    def free(cls) -> Ports:
        return cls(free_port(), free_port(), {name: free_port() for name in UPSTREAMS}, free_port())

    def json(self) -> str:
        return json.dumps(
            {"gateway": self.gateway, "gateway-rr": self.gateway_rr, "listener": self.listener,
             **self.upstreams}
        )  # fmt: skip


def nix_env() -> dict[str, str]:
    env = dict(os.environ)
    cache = Path(env.get("STATION_CACHE", "/opt/vllm-station"))
    if shutil.which("nix-instantiate") is None:
        env["PATH"] = f"{cache / 'nix' / 'bin'}:{env.get('PATH', '')}"
    env.setdefault(
        "NIX_CONFIG",
        "experimental-features = nix-command flakes\nflake-registry =\nsubstituters =",
    )
    return env


def start_render(
    ports: Ports,
    nixos_tree: str,
    variants: tuple[str, ...] = ("example", "round-robin"),
) -> subprocess.Popen[str]:
    """Start the evaluation (it takes ~10-20 s; the caller starts the simulators meanwhile)."""
    return subprocess.Popen(
        ["nix-instantiate", "--eval", "--strict", "--json", str(RENDER),
         "--argstr", "nixosTree", nixos_tree, "--argstr", "ports", ports.json(),
         "--argstr", "only", json.dumps(list(variants))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=nix_env(),
    )  # fmt: skip


def finish_render(proc: subprocess.Popen[str], timeout: float = 600) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"nix-instantiate {RENDER} failed:\n{err[-4000:]}")
    result: dict[str, Any] = json.loads(out)
    for name, variant in result.items():
        if variant["failed"]:
            raise AssertionError(
                f"{name}: failed NixOS assertions: {variant['failed']}"
            )
    return result


def render(
    ports: Ports, nixos_tree: str, variants: tuple[str, ...] = ("example", "round-robin")
) -> dict[str, Any]:
    return finish_render(start_render(ports, nixos_tree, variants))


def exec_argv(unit_text: str, key: str = "ExecStart") -> list[str]:
    """The arguments of a unit's `KEY=` line (utils.escapeSystemdExecArgs), specifiers left as written."""
    lines = [line for line in unit_text.splitlines() if line.startswith(f"{key}=")]
    assert len(lines) == 1, f"expected one {key}= line, got {lines}"
    body = lines[0][len(key) + 1 :].lstrip("+-")
    args: list[str] = json.loads("[" + body.replace('" "', '","') + "]")
    return [a.replace("$$", "$") for a in args]


def unit_values(unit_text: str, key: str) -> list[str]:
    return [
        line.split("=", 1)[1]
        for line in unit_text.splitlines()
        if line.startswith(f"{key}=")
    ]


def generate_tls(directory: Path, names: list[str], usage: str = "serverAuth") -> tuple[Path, Path, Path]:
    """A test CA and a certificate for `names` signed by it: (ca.pem, fullchain.pem, key.pem).
    `usage`: the extended key usage (`clientAuth` for a client certificate)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, cert = (
        directory / n
        for n in ("ca.key", "ca.pem", "key.pem", "req.csr", "fullchain.pem")
    )
    ext = directory / "san.cnf"
    san = ",".join(
        f"IP:{n}" if re.fullmatch(r"[0-9.]+", n) else f"DNS:{n}" for n in names
    )
    ext.write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                   f"extendedKeyUsage={usage}\n")  # fmt: skip

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", "/CN=vllm-station test CA", "-keyout", str(ca_key), "-out", str(ca))  # fmt: skip
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-subj", f"/CN={names[0]}", "-keyout", str(key), "-out", str(csr))  # fmt: skip
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
            "-days", "2", "-extfile", str(ext), "-out", str(cert))  # fmt: skip
    return ca, cert, key


def map_conf(text: str, rendered: dict[str, Any], paths: dict[str, Path]) -> str:
    """nginx.conf with store paths and absolute runtime paths mapped onto this machine (see the module doc)."""
    packages = {rendered["nginxPackage"]: "nginx"}
    mime_pkg = STORE_PATH.match(rendered["mimeTypes"])
    if mime_pkg:
        packages[mime_pkg.group(0)] = "mailcap"

    for store_path, pname in packages.items():
        for rel, real in PACKAGE_FILES[pname].items():
            text = text.replace(f"{store_path}/{rel}", real)
    left = sorted(set(STORE_PATH.findall(text)))
    if left:
        raise UnmappedPath(
            f"nginx.conf names store paths with no stand-in here: {left} (add to PACKAGE_FILES)"
        )
    for prefix, target in paths.items():
        text = text.replace(prefix, f"{target}/")
    return text


class Upstreams:
    """Three `station simulate` processes on the rendered upstream ports (args per upstream name)."""

    def __init__(
        self, ports: Ports, args: dict[str, list[str]], api_key_file: Path | None
    ) -> None:
        from vllm_station.sim.process import SimProcess

        key = ["--api-key-file", str(api_key_file)] if api_key_file else []
        self.sims = {
            name: SimProcess(
                [
                    *args.get(name, []),
                    "--model",
                    "sim",
                    *key,
                    "--port",
                    str(ports.upstreams[name]),
                ]
            )
            for name in UPSTREAMS
        }
        self.ports = ports

    def __enter__(self) -> Self:
        started = []
        try:
            for sim in self.sims.values():
                sim.__enter__()
                started.append(sim)
        except BaseException:
            for sim in started:
                sim.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for sim in self.sims.values():
            sim.__exit__()

    def kill(self, name: str) -> None:
        """SIGKILL the simulator's process group: a station that dies, connections and all."""
        proc = self.sims[name].proc
        if proc is None:
            return
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        self.sims[name].proc = None

    def restart(self, name: str) -> None:
        from vllm_station.sim.process import SimProcess

        old = self.sims[name]
        if old.proc is not None:
            old.__exit__()
        self.sims[name] = SimProcess(old.args)
        self.sims[name].__enter__()

    def by_address(self) -> dict[str, str]:
        return {
            f"127.0.0.1:{port}": name for name, port in self.ports.upstreams.items()
        }


class Gateway:
    """The rendered keys unit's command, then nginx with the rendered (and mapped) configuration."""

    def __init__(self, rendered: dict[str, Any], work: Path, port: int, tls: tuple[Path, Path, Path],
                 keys: dict[str, str], upstream_key: str | None) -> None:  # fmt: skip
        self.rendered = rendered
        self.work = work
        self.port = port
        self.ca, self.cert, self.key = tls
        self.keys = keys
        self.upstream_key = upstream_key
        self.proc: subprocess.Popen[bytes] | None = None
        self.run_dir = work / "run-gateway"
        self.log_dir = work / "log"
        self.creds = work / "credentials"
        self.conf = work / "nginx.conf"
        self.stderr = work / "nginx.stderr"
        self.keys_stderr = ""
        # More absolute runtime paths of the rendered configuration -> directories of the test.
        self.extra_paths: dict[str, Path] = {}

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def access_log_path(self) -> Path:
        return self.log_dir / "vllm-station-gateway.log"

    def load_credentials(self) -> None:
        """What systemd's LoadCredential= does: each ID gets its file (the test's keys) in %d."""
        self.creds.mkdir(parents=True, exist_ok=True)
        unit = self.rendered["keysUnit"]
        for spec in unit_values(unit, "LoadCredential"):
            cred_id, _, _source = spec.partition(":")
            if cred_id.startswith("key-"):
                value = self.keys[cred_id[len("key-") :]]
            elif cred_id == "upstream-key":
                assert self.upstream_key is not None
                value = self.upstream_key
            else:
                raise AssertionError(f"unexpected credential {spec}")
            (self.creds / cred_id).write_text(value + "\n")

    def keys_argv(self) -> list[str]:
        argv = exec_argv(self.rendered["keysUnit"])
        station_pkg = self.rendered["stationPackage"]
        assert argv[0] == f"{station_pkg}/bin/station", argv[0]
        argv[0] = str(Path(sys.executable).parent / "station")
        out = []
        for a in argv[1:]:
            a = (
                a.replace("%%", "\0")
                .replace("%d/", f"{self.creds}/")
                .replace("\0", "%")
            )
            out.append(a.replace("/run/vllm-station-gateway/", f"{self.run_dir}/"))
        return [argv[0], *out]

    def run_keys(self) -> subprocess.CompletedProcess[str]:
        self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.load_credentials()
        proc = subprocess.run(
            self.keys_argv(), capture_output=True, text=True, timeout=60, check=False
        )
        self.keys_stderr += proc.stdout + proc.stderr
        return proc

    def write_conf(self) -> None:
        tls_dir = self.work / "tls"
        tls_dir.mkdir(exist_ok=True)
        shutil.copy(self.cert, tls_dir / "fullchain.pem")
        shutil.copy(self.key, tls_dir / "key.pem")
        (self.work / "run-nginx").mkdir(exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        text = map_conf(
            self.rendered["nginxConf"],
            self.rendered,
            {
                "/run/nginx/": self.work / "run-nginx",
                "/var/log/nginx/": self.log_dir,
                "/run/vllm-station-gateway/": self.run_dir,
                "/var/lib/vllm-station-gateway/": tls_dir,
                **self.extra_paths,
            },
        )
        self.conf.write_text(text)

    def __enter__(self) -> Self:
        keys = self.run_keys()
        if keys.returncode != 0:
            raise AssertionError(
                f"station gateway keys failed ({keys.returncode}): {self.keys_stderr}"
            )
        self.write_conf()
        test = subprocess.run([NGINX, "-t", "-c", str(self.conf)], capture_output=True, text=True, timeout=60,
                              check=False)  # fmt: skip
        if test.returncode != 0:
            raise AssertionError(
                f"nginx -t refused the rendered configuration:\n{test.stderr}"
            )
        with self.stderr.open("wb") as err:
            self.proc = subprocess.Popen([NGINX, "-c", str(self.conf)], stdout=err, stderr=err,
                                         start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"nginx exited {self.proc.returncode}: {self.stderr.read_text()}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1),
            ):
                return self
            time.sleep(0.05)
        self.__exit__()
        raise AssertionError("nginx did not listen within 20 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        from vllm_station.process import stop_session

        stop_session(self.proc)  # nginx's master and its workers: one process group (as SimProcess's)
        self.proc = None

    def client(self, key: str | None = None, **kw: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(
            base_url=self.url,
            verify=ssl.create_default_context(cafile=str(self.ca)),
            headers=headers,
            trust_env=False,
            timeout=kw.pop("timeout", 30),
            **kw,
        )

    def access_log(self) -> list[dict[str, Any]]:
        """The access log's JSON lines (nginx writes each when its request ends)."""
        if not self.access_log_path.exists():
            return []
        return [
            json.loads(line)
            for line in self.access_log_path.read_text().splitlines()
            if line.strip()
        ]

    def logs_text(self) -> str:
        """Everything nginx and the keys step wrote: the access log, nginx's stderr (its error log)."""
        parts = [
            self.keys_stderr,
            self.stderr.read_text() if self.stderr.exists() else "",
        ]
        for f in sorted(self.log_dir.iterdir()):
            parts.append(f.read_text())
        return "\n".join(parts)


def new_key(prefix: str) -> str:
    return f"sk-{prefix}-{secrets.token_urlsafe(24)}"


def chat_body(
    words: int = 8, max_tokens: int = 8, stream: bool = False
) -> dict[str, Any]:
    return {
        "model": "sim",
        "messages": [{"role": "user", "content": " ".join(["word"] * words)}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


# ---- raw HTTP: what a client sends and what a station receives, byte for byte ---------------------------


@dataclass(frozen=True)
class Received:
    """One request as a station received it: the raw request line, headers and body."""

    line: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes

    def header(self, name: bytes) -> list[bytes]:
        return [v for k, v in self.headers if k.lower() == name.lower()]


class Recorder:
    """A station that records every request's raw bytes and answers 200 with a small JSON body.

    `hold` (an Event, set by default) lets a test keep a request in flight: the answer waits for it."""

    def __init__(self, port: int) -> None:
        import threading

        self.port = port
        self.received: list[Received] = []
        self.hold = threading.Event()
        self.hold.set()
        self.arrived = threading.Event()
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", port), backlog=64)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.hold.set()
        self._stop.set()
        self._thread.join(timeout=10)
        self._sock.close()

    def take(self) -> list[Received]:
        with self._lock:
            got, self.received = self.received, []
        return got

    def _serve(self) -> None:
        import threading

        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            line, *lines = head.split(b"\r\n")
            headers = tuple((k.strip(), v.strip()) for k, _, v in (h.partition(b":") for h in lines))
            length = next((int(v) for k, v in headers if k.lower() == b"content-length"), 0)
            while len(body) < length:
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                body += chunk
            with self._lock:
                self.received.append(Received(line, headers, body))
            self.arrived.set()
            self.hold.wait(timeout=60)
            answer = b'{"object":"list","data":[],"recorded":true}'
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(answer)).encode() + b"\r\nConnection: close\r\n\r\n" + answer)  # fmt: skip


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes


def raw_request(port: int, data: bytes, ca: Path | None = None, body_chunks: tuple[bytes, ...] = (), *,
                cert: tuple[Path, Path] | None = None, server_name: str = "127.0.0.1",
                source: str | None = None) -> RawResponse:  # fmt: skip
    """Send `data` as is (no library between: nothing normalises the path) over TLS when `ca` is given
    (verifying `server_name`, presenting `cert` = (certificate, key) when given), from `source` (a local
    address), then `body_chunks`, and read the answer to the end (the requests ask `Connection: close`,
    and nginx closes after an error)."""
    sock = socket.create_connection(
        ("127.0.0.1", port), timeout=30, source_address=(source, 0) if source else None
    )
    if ca is not None:
        ctx = ssl.create_default_context(cafile=str(ca))
        if cert is not None:
            ctx.load_cert_chain(str(cert[0]), str(cert[1]))
        sock = ctx.wrap_socket(sock, server_hostname=server_name)
    with sock:
        sock.sendall(data)
        for chunk in body_chunks:
            try:
                sock.sendall(chunk)
            except OSError:  # nginx answered and stopped reading: the answer is still there
                break
        out = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except (ssl.SSLError, ConnectionResetError):
                break
            if not chunk:
                break
            out += chunk
    head, _, body = out.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    assert status_line.startswith("HTTP/1."), f"no HTTP answer: {out[:200]!r}"
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines)}
    if headers.get("transfer-encoding") == "chunked":
        decoded, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            decoded, rest = decoded + rest[:size], rest[size + 2 :]
        body = decoded
    return RawResponse(int(status_line.split()[1]), headers, body)
