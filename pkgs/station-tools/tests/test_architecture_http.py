"""Architecture: every HTTP request of the package goes through the one HTTP layer (`api/transport.py`).

The layer is where the limits live — a total deadline per request, caps on the body, on each event-stream
line and on the event count, redirects refused — so a module that makes its own client would bring none
of them. This test reads every module of the package (ast, no import) and fails on a call that makes an
HTTP client or sends a request around the layer: httpx's clients, transports and one-shot functions,
aiohttp's session and `request`, httpcore's pools, urllib's `urlopen`, http.client's connections,
`requests`, and raw asyncio connections. Imports are followed through aliases (`import httpx as h`,
`from aiohttp import ClientSession as S`).

The allowlist is short and each entry says why; an entry that no longer makes such a call fails too, so
the list cannot outlive its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "vllm_station"

# module (relative to the package) -> why it may make clients itself
ALLOWED = {
    "api/transport.py": "the HTTP layer itself: it makes the httpx and aiohttp clients, with the limits",
    "commands/bench/wire.py": (
        "bench's measured requests: a raw asyncio protocol (one write per request, no coroutine per "
        "read); it takes its body cap and redirect rule from the layer"
    ),
}

FORBIDDEN = frozenset(
    {
        *(f"httpx.{n}" for n in ("Client", "AsyncClient", "HTTPTransport", "AsyncHTTPTransport")),
        *(f"httpx.{n}" for n in ("get", "post", "put", "patch", "delete", "head", "options", "request")),
        "httpx.stream",
        "aiohttp.ClientSession",
        "aiohttp.request",
        "aiohttp.TCPConnector",
        "aiohttp.UnixConnector",
        "httpcore.ConnectionPool",
        "httpcore.AsyncConnectionPool",
        "httpcore.request",
        "httpcore.stream",
        "urllib.request.urlopen",
        "urllib.request.build_opener",
        "urllib.request.OpenerDirector",
        "http.client.HTTPConnection",
        "http.client.HTTPSConnection",
        *(f"requests.{n}" for n in ("get", "post", "put", "patch", "delete", "head", "request", "Session")),
        "asyncio.open_connection",
    }
)


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> what it is bound to, for every import in the module (any depth)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def violations(source: str, filename: str = "<module>") -> list[str]:
    """`file:line: name` for every call in `source` that makes an HTTP client or request itself."""
    tree = ast.parse(source, filename)
    names = _aliases(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        parts = _dotted(node.func)
        if parts is None:
            if isinstance(node.func, ast.Attribute) and node.func.attr == "create_connection":
                found.append(f"{filename}:{node.lineno}: <loop>.create_connection")
            continue
        head = names.get(parts[0])
        canonical = ".".join([head, *parts[1:]]) if head else ".".join(parts)
        if canonical in FORBIDDEN:
            found.append(f"{filename}:{node.lineno}: {canonical}")
        elif parts[-1] == "create_connection" and canonical != "socket.create_connection":
            # an event loop's raw connection (loop.create_connection): an HTTP client by other means
            found.append(f"{filename}:{node.lineno}: {canonical}")
    return found


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_makes_an_http_client_around_the_layer() -> None:
    found: list[str] = []
    for path in _modules():
        rel = path.relative_to(PACKAGE).as_posix()
        if rel not in ALLOWED:
            found += violations(path.read_text(), rel)
    assert not found, (
        "HTTP clients made outside the HTTP layer (use vllm_station.api.transport: SyncHttp, AsyncHttp, "
        "or ApiClient on top of it):\n" + "\n".join(found)
    )


@pytest.mark.parametrize("rel", sorted(ALLOWED))
def test_each_allowlist_entry_still_needs_its_place(rel: str) -> None:
    path = PACKAGE / rel
    assert path.is_file(), f"{rel} is allowlisted but gone: drop it from ALLOWED"
    assert violations(path.read_text(), rel), f"{rel} makes no client itself any more: drop it from ALLOWED"


PLANTED = [
    ("import httpx\nhttpx.Client()\n", "httpx.Client"),
    ("import httpx as h\nh.get('http://x')\n", "httpx.get"),
    ("from httpx import AsyncClient as C\nC()\n", "httpx.AsyncClient"),
    ("import aiohttp\nasync def f():\n    aiohttp.ClientSession()\n", "aiohttp.ClientSession"),
    ("from aiohttp import request\nrequest('GET', 'http://x')\n", "aiohttp.request"),
    ("import urllib.request\nurllib.request.urlopen('http://x')\n", "urllib.request.urlopen"),
    ("from urllib import request as r\nr.urlopen('http://x')\n", "urllib.request.urlopen"),
    ("from urllib.request import urlopen\nurlopen('http://x')\n", "urllib.request.urlopen"),
    ("import http.client\nhttp.client.HTTPConnection('x')\n", "http.client.HTTPConnection"),
    ("from http.client import HTTPSConnection as H\nH('x')\n", "http.client.HTTPSConnection"),
    ("import requests\nrequests.Session()\n", "requests.Session"),
    ("import asyncio\nasyncio.open_connection('x', 1)\n", "asyncio.open_connection"),
    ("def f(loop):\n    loop.create_connection(object, 'x', 1)\n", "loop.create_connection"),
    ("import httpcore\nhttpcore.ConnectionPool()\n", "httpcore.ConnectionPool"),
]


@pytest.mark.parametrize(("source", "name"), PLANTED, ids=[n for _, n in PLANTED])
def test_a_planted_client_is_found(source: str, name: str) -> None:
    """The checker is not blind: each way of making a client, planted in a module, is reported."""
    found = violations(source, "planted.py")
    assert found and name in found[0], found


@pytest.mark.parametrize(
    "source",
    [
        "import socket\nsocket.create_connection(('x', 1), timeout=1)\n",  # a TCP probe, not HTTP
        "from vllm_station.api.transport import SyncHttp\nSyncHttp()\n",
        "import httpx\ndef f(c: httpx.Client) -> httpx.Timeout:\n    return httpx.Timeout(1)\n",
        "from aiohttp import web\nweb.Application()\n",  # the simulator is a server
    ],
)
def test_what_is_not_a_client_is_not_reported(source: str) -> None:
    assert violations(source, "fine.py") == []
