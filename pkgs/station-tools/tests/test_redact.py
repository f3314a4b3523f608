"""One redaction point (`vllm_station.redact`): every output path masks every registered secret.

Generated inputs (hypothesis): the secret at any position of a long message, written in any split of
`write()` calls with `flush()` anywhere; excerpts cut at any length around the secret; and the real
commands (smoke, wait-ready) against a server that echoes the Authorization header at a generated
offset across the 200-character cut of their error messages.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faultserver import FaultServer, Reply, fake_openai_routes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_station import output, redact
from vllm_station.api import ApiKeyError, load_api_key, split_base_url
from vllm_station.api.sse import excerpt
from vllm_station.cli import main
from vllm_station.errors import UsageError

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
MASK = "***"

KEY = "SK9Q7ZK3V8M2P6W4"  # upper case and digits: never produced by the filler below
FILLER = st.text(alphabet="abcdefghij ,.:;-_{}\"'", max_size=400)


@pytest.fixture(autouse=True)
def _clean_registry() -> Iterator[None]:
    redact.forget_all()
    yield
    redact.forget_all()


def _key_fragments(text: str, key: str = KEY, n: int = 4) -> list[str]:
    """Every piece of `key` of `n` or more characters that appears in `text`."""
    return [key[i : i + n] for i in range(len(key) - n + 1) if key[i : i + n] in text]


# ---- the mechanism ---------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    before=FILLER,
    after=FILLER,
    cuts=st.lists(st.integers(min_value=0, max_value=900), max_size=8),
    flushes=st.lists(st.booleans(), max_size=9),
    newline=st.booleans(),
)
def test_stream_masks_a_secret_split_over_writes_and_flushes(
    before: str, after: str, cuts: list[int], flushes: list[bool], newline: bool
) -> None:
    redact.forget_all()
    redact.register(KEY)
    text = before + "Bearer " + KEY + after + ("\n" if newline else "")
    raw = io.StringIO()
    stream = redact.RedactingStream(raw)
    points = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    for i, (a, b) in enumerate(itertools.pairwise(points)):
        stream.write(text[a:b])
        if i < len(flushes) and flushes[i]:
            stream.flush()
            assert KEY not in raw.getvalue()
            assert not _key_fragments(raw.getvalue()), "a flush let the start of the key through"
    stream.close_pending()
    assert raw.getvalue() == text.replace(KEY, MASK)


@settings(max_examples=300, deadline=None)
@given(before=FILLER, after=FILLER, limit=st.integers(min_value=8, max_value=500))
def test_excerpt_masks_before_it_cuts(before: str, after: str, limit: int) -> None:
    redact.register(KEY)
    out = excerpt(before + KEY + after, limit)
    assert not _key_fragments(out), (limit, out)
    assert len(out) <= limit


def test_without_secrets_the_stream_passes_text_through() -> None:
    raw = io.StringIO()
    stream = redact.RedactingStream(raw)
    stream.write("progress 10%\r")
    stream.write("no newline yet")
    stream.flush()
    assert raw.getvalue() == "progress 10%\rno newline yet"


def test_short_keys_and_url_passwords_are_refused(tmp_path: Path) -> None:
    (tmp_path / "k").write_text("abc1234\n")  # 7 characters
    with pytest.raises(ApiKeyError, match="shorter than 8 characters"):
        load_api_key(tmp_path / "k")
    with pytest.raises(ApiKeyError, match="shorter than 8"):
        load_api_key(None, {"STATION_API_KEY": "short"})
    with pytest.raises(UsageError, match="password in the URL is shorter than 8"):
        split_base_url("http://op:pw@127.0.0.1:8000")


def test_reading_a_key_or_a_url_password_registers_it() -> None:
    assert load_api_key(None, {"STATION_API_KEY": KEY}) == KEY
    split_base_url("http://op:p%40ssw0rd-long@127.0.0.1:8000")
    assert redact.redact(f"{KEY} p%40ssw0rd-long p@ssw0rd-long") == "*** *** ***"


def test_write_text_redacts_files(tmp_path: Path) -> None:
    redact.register(KEY)
    output.write_text(tmp_path / "r.json", json.dumps({"error": f"Bearer {KEY}"}), option="--json")
    assert KEY not in (tmp_path / "r.json").read_text()


@settings(max_examples=200, deadline=None)
@given(
    before=st.binary(max_size=5),
    after=st.binary(max_size=5),
    urlsafe=st.booleans(),
    wrap=st.integers(min_value=0, max_value=40),
)
def test_base64_forms_are_masked_at_every_alignment(
    before: bytes, after: bytes, urlsafe: bool, wrap: int
) -> None:
    """The key base64-encoded inside a longer text (any bytes before it: each of the three alignments),
    in either alphabet, wrapped by a line break as MIME does: no run of its own characters is left."""
    redact.register(KEY)
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    text = encode(before + KEY.encode() + after).decode()
    text = text[:wrap] + "\n" + text[wrap:] if wrap < len(text) else text
    out = redact.redact(f"echo: {text} end")
    assert "***" in out
    assert not any(form in "".join(out.split()) for form in redact.base64_forms(KEY)), out


def test_basic_auth_of_a_url_password_is_masked() -> None:
    """A URL's user:password reaches a server as `Authorization: Basic base64(user:password)`."""
    split_base_url("http://operator:Hunter2Hunter2@127.0.0.1:8000")
    header = "Basic " + base64.b64encode(b"operator:Hunter2Hunter2").decode()
    out = redact.redact(f'{{"error": "bad credentials {header}"}}')
    assert "***" in out and "SHVudGVy" not in out and "Hunter2" not in out, out


# ---- the commands ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def srv() -> Iterator[FaultServer]:
    with FaultServer(fake_openai_routes("fake")) as s:
        yield s


def _echo_at(offset: int, tail: int) -> Reply:
    return Reply(status=500, json={"error": {"message": "e" * offset + f"Bearer {KEY}" + "z" * tail}})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=st.integers(min_value=150, max_value=215), tail=st.integers(min_value=0, max_value=80))
def test_smoke_never_prints_the_key_whatever_its_position(
    srv: FaultServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    offset: int,
    tail: int,
) -> None:
    """The chat error crosses smoke's 200-character cut at every offset: no piece of the key shows."""
    monkeypatch.setenv("STATION_API_KEY", KEY)
    srv.route("POST", "/v1/chat/completions", lambda r: _echo_at(offset, tail))
    try:
        for extra in ([], ["--json"]):
            code = main(["smoke", "--base-url", srv.url, *extra])
            out, err = capsys.readouterr()
            assert code == 1
            assert not _key_fragments(out + err), (offset, out + err)
            assert "HTTP 500" in out
    finally:
        srv.routes.update(fake_openai_routes("fake"))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=st.integers(min_value=150, max_value=215))
def test_wait_ready_never_prints_the_key_whatever_its_position(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, offset: int
) -> None:
    monkeypatch.setenv("STATION_API_KEY", KEY)
    srv.route(
        "GET",
        "/v1/models",
        lambda r: Reply(status=401, json={"error": "e" * offset + str(r.headers.get("authorization"))}),
    )
    try:
        # a 401 past /health ends the wait at once (one from /health itself is waited out: a gateway's);
        # the deadline only has to outlast one answer on a loaded machine
        code = main(["wait-ready", "--base-url", srv.url, "--timeout", "5", "--interval", "0.1"])
        out, err = capsys.readouterr()
        assert code != 0
        assert "401" in out + err
        assert not _key_fragments(out + err), (offset, out + err)
    finally:
        srv.routes.update(fake_openai_routes("fake"))


def test_url_password_not_in_debug_output_or_json(srv: FaultServer) -> None:
    """--debug logs every request URL; the password of http://user:pw@host is masked in all of it."""
    password = "Hunter2Hunter2"
    url = srv.url.replace("http://", f"http://op:{password}@")
    env = {k: v for k, v in os.environ.items() if k not in ("STATION_API_KEY", "OPENAI_API_KEY")}
    for extra in ([], ["--json"]):
        proc = subprocess.run(
            [sys.executable, "-m", "vllm_station", "--debug", "smoke", "--base-url", url, *extra],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert "DEBUG" in proc.stderr
        assert password not in proc.stdout + proc.stderr
    # and a usage error that names the URL
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_station", "smoke", "--base-url", f"ftp://op:{password}@h"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "scheme must be http or https" in proc.stderr
    assert password not in proc.stderr


def test_a_server_echoing_the_basic_auth_header_gets_it_masked() -> None:
    """The server gives back the Authorization header the URL's credentials made: no form of the password,
    base64 included, is printed."""
    password = "Hunter2Hunter2"

    def echo(req: Any) -> Reply:
        return Reply(status=500, json={"error": {"message": f"denied: {req.headers.get('authorization')}"}})

    with FaultServer({("GET", "/v1/models"): echo}) as server:
        url = server.url.replace("http://", f"http://op:{password}@")
        env = {k: v for k, v in os.environ.items() if k not in ("STATION_API_KEY", "OPENAI_API_KEY")}
        proc = subprocess.run(
            [sys.executable, "-m", "vllm_station", "smoke", "--base-url", url, "--json"],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        sent = [r.headers.get("authorization", "") for r in server.requests]
    assert any(h.startswith("Basic ") for h in sent), sent  # the credentials went as Basic auth
    shown = proc.stdout + proc.stderr
    assert "denied: " in shown, shown[-2000:]
    assert password not in shown and base64.b64encode(f"op:{password}".encode()).decode()[4:] not in shown


def test_threads_writing_at_once_lose_no_line_and_leak_no_key() -> None:
    import threading

    redact.register(KEY)
    raw = io.StringIO()
    stream = redact.RedactingStream(raw)

    def writer(n: int) -> None:
        for i in range(300):
            stream.write(f"thread {n} line {i} ")
            stream.write(f"Bearer {KEY}\n")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stream.close_pending()
    out = raw.getvalue()
    assert KEY not in out and out.count("Bearer ***") == 1200


def test_write_returns_what_it_was_given() -> None:
    raw = io.StringIO()
    stream = redact.RedactingStream(raw)
    redact.register(KEY)
    assert stream.write("held, no newline yet") == len("held, no newline yet")
    redact.forget_all()
    assert stream.write("de") == 2  # the held text goes out too, but the caller wrote 2 characters
    assert raw.getvalue() == "held, no newline yetde"
