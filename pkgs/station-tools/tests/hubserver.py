"""Test helpers: a small real safetensors checkpoint generator and a fake Hugging Face Hub on 127.0.0.1.

The fake hub speaks exactly the part of the Hub HTTP API that huggingface_hub (2.x, read from its source)
uses for `HfApi.model_info(files_metadata=True)` and `hf_hub_download`:

- ``GET /api/models/{repo}/revision/{rev}?blobs=true`` → ``{"id", "sha", "siblings": [{"rfilename", "size",
  "blobId", "lfs": {"size", "sha256", "pointerSize"}}]}``; ``X-Error-Code: RevisionNotFound`` (404) for an
  unknown revision, ``RepoNotFound`` for an unknown repo.
- ``HEAD/GET /{repo}/resolve/{rev}/{path}`` → ``X-Repo-Commit``, ``ETag`` (git blob id, or the LFS sha256 for
  LFS files together with ``X-Linked-Etag`` and ``X-Linked-Size``), ``Content-Length``, ``Accept-Ranges``; a
  ``Range: bytes=N-`` request gets ``206`` with ``Content-Range``.

Faults for tests: a token requirement (401 without the right bearer token), a connection dropped mid-file a
given number of times, sizes under-reported in the API (to reach a real ENOSPC past the up-front check), and
a hook called on the first request (to look at the client while it talks to us).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np
from safetensors.numpy import save, save_file

# ------------------------------------------------------------------------------- checkpoint generator


def make_checkpoint(
    directory: Path,
    *,
    shards: int = 3,
    tensors_per_shard: int = 4,
    arch: str = "GlmMoeDsaForCausalLM",
    quant_algo: str | None = "MIXED_PRECISION",
    rows: int = 16,
) -> dict[str, list[str]]:
    """Write a real multi-shard safetensors checkpoint; returns {shard file: [tensor names]}."""
    directory.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {"architectures": [arch], "model_type": "glm_moe_dsa", "hidden_size": rows}
    if quant_algo is not None:
        config["quantization_config"] = {"quant_method": "modelopt", "quant_algo": quant_algo}
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    rng = np.random.default_rng(1234)
    layout: dict[str, list[str]] = {}
    weight_map: dict[str, str] = {}
    total = 0
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        tensors: dict[str, np.ndarray] = {}
        for t in range(tensors_per_shard):
            key = f"model.layers.{s}.mlp.experts.{t}.weight"
            if t % 2:
                tensors[key] = rng.integers(0, 255, size=(rows, rows // 2), dtype=np.uint8)  # packed FP4
            else:
                tensors[key] = rng.standard_normal((rows, rows)).astype(np.float16)
            weight_map[key] = name
            total += tensors[key].nbytes
        save_file(tensors, str(directory / name), metadata={"format": "pt"})
        layout[name] = list(tensors)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return layout


# ------------------------------------------------------------------------------------ the fake hub

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def git_blob_sha1(data: bytes) -> str:
    h = hashlib.sha1(usedforsecurity=False)
    h.update(f"blob {len(data)}\0".encode())
    h.update(data)
    return h.hexdigest()


@dataclass
class RepoFile:
    path: str
    data: bytes
    lfs: bool

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def blob_id(self) -> str:
        return git_blob_sha1(self.data)


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    authorization: bool


@dataclass
class HubState:
    repo: str
    files: dict[str, RepoFile]
    commit: str = COMMIT
    branches: dict[str, str] = field(default_factory=lambda: {"main": COMMIT})
    token: str | None = None  # when set, requests need "Authorization: Bearer <token>"
    drop_after: dict[str, int] = field(default_factory=dict)  # path -> bytes sent before dropping
    drops_left: dict[str, int] = field(default_factory=dict)  # path -> how many GETs to drop
    size_scale: float = 1.0  # sizes reported by the API are multiplied by this (a lying hub)
    stall_after: dict[str, int] = field(default_factory=dict)  # path -> bytes sent before the server stalls
    stalled: threading.Event = field(default_factory=threading.Event)  # set when a stall begins
    release: threading.Event = field(default_factory=threading.Event)  # set to end every stall
    on_first_request: Callable[[], object] | None = None
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def resolve(self, rev: str) -> str | None:
        if rev == self.commit:
            return self.commit
        return self.branches.get(rev)

    def gets(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.method == "GET" and r.path.endswith("/" + path)]


def repo_from_dir(repo: str, directory: Path) -> dict[str, RepoFile]:
    """Files of a checkpoint directory as repo files (.safetensors are LFS, the rest regular git blobs)."""
    files = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file():
            rel = p.relative_to(directory).as_posix()
            files[rel] = RepoFile(rel, p.read_bytes(), lfs=rel.endswith(".safetensors"))
    return files


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # -- helpers
    def _error(self, status: int, code: str | None, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _record(self) -> None:
        st = self.server.state
        with st.lock:
            first = not st.requests
            st.requests.append(
                Request(
                    method=self.command,
                    path=urlsplit(self.path).path,
                    range=self.headers.get("Range"),
                    authorization=self.headers.get("Authorization") is not None,
                )
            )
        if first and st.on_first_request is not None:
            st.on_first_request()

    def _authorized(self) -> bool:
        st = self.server.state
        if st.token is None:
            return True
        if self.headers.get("Authorization") == f"Bearer {st.token}":
            return True
        self._error(401, None, "Invalid credentials in Authorization header")
        return False

    # -- routes
    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def _route(self) -> None:
        self._record()
        st = self.server.state
        path = unquote(urlsplit(self.path).path)
        if not self._authorized():
            return
        m = re.fullmatch(r"/api/models/(.+?)/revision/([^/]+)", path)
        if m:
            self._model_info(m.group(1), m.group(2))
            return
        m = re.fullmatch(r"/(.+?)/resolve/([^/]+)/(.+)", path)
        if m and m.group(1) == st.repo:
            self._resolve(m.group(2), m.group(3))
            return
        self._error(404, "RepoNotFound", "Repository not found")

    def _model_info(self, repo: str, rev: str) -> None:
        st = self.server.state
        if repo != st.repo:
            self._error(404, "RepoNotFound", "Repository not found")
            return
        commit = st.resolve(rev)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return
        siblings = []
        for f in st.files.values():
            size = int(len(f.data) * st.size_scale)
            entry: dict[str, Any] = {"rfilename": f.path, "size": size, "blobId": f.blob_id}
            if f.lfs:
                entry["lfs"] = {"size": size, "sha256": f.sha256, "pointerSize": 134}
            siblings.append(entry)
        body = json.dumps({"id": st.repo, "modelId": st.repo, "sha": commit, "siblings": siblings}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _resolve(self, rev: str, rel: str) -> None:
        st = self.server.state
        commit = st.resolve(rev)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return
        f = st.files.get(rel)
        if f is None:
            self._error(404, "EntryNotFound", f"{rel} does not exist at {rev}")
            return
        data = f.data
        start = 0
        status = 200
        rng = self.headers.get("Range")
        if rng and self.command == "GET":
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
            if m:
                start = int(m.group(1))
                status = 206
        body = data[start:]
        self.send_response(status)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("Accept-Ranges", "bytes")
        if f.lfs:
            self.send_header("ETag", f'"{f.sha256}"')
            self.send_header("X-Linked-Etag", f'"{f.sha256}"')
            self.send_header("X-Linked-Size", str(len(data)))
        else:
            self.send_header("ETag", f'"{f.blob_id}"')
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        if self.command == "HEAD":
            return
        with st.lock:
            drop = st.drops_left.get(rel, 0) > 0
            if drop:
                st.drops_left[rel] -= 1
        if rel in st.stall_after:
            self.wfile.write(body[: st.stall_after[rel]])
            self.wfile.flush()
            st.stalled.set()
            st.release.wait(timeout=60)
            self.close_connection = True
            return
        if drop:
            cut = max(0, min(len(body) - 1, st.drop_after.get(rel, len(body) // 2)))
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            # abrupt close: the client sees fewer bytes than Content-Length
            self.connection.shutdown(2)
            return
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: HubState


class FakeHub:
    """Context manager: `with FakeHub(state) as hub: hub.url`."""

    def __init__(self, state: HubState) -> None:
        self.state = state
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.state = state
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.state.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def tiny_safetensors(nbytes: int) -> bytes:
    """A valid one-tensor safetensors blob of about nbytes."""
    return save({"w": np.zeros(max(1, nbytes), dtype=np.uint8)})
