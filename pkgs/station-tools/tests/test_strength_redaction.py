"""Mutants of `vllm_station.redact` (scripts/bench-mutation): the registry's boundaries and ordering, the
stream wrapper's line cutting, what it holds back and what it reports to callers, install/finish."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultserver import FaultServer, RawReply, Reply

from vllm_station import output, redact
from vllm_station.api import ApiClient, ApiError

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
MIN_SECRET_LEN = 8

KEY = "SK9Q7ZK3V8M2P6W4"


@pytest.fixture(autouse=True)
def _clean_registry() -> Iterator[None]:
    redact.forget_all()
    yield
    redact.forget_all()


def test_exactly_min_length_is_a_secret_one_less_is_not() -> None:
    redact.register("A" * MIN_SECRET_LEN)
    redact.register("B" * (MIN_SECRET_LEN - 1))
    redact.register("")
    redact.register(None)
    assert redact.secrets() == ("A" * 8,)
    assert redact.redact("AAAAAAAA BBBBBBB") == "*** BBBBBBB"


def test_percent_decoded_form_and_longest_first() -> None:
    redact.register("p%40ss-word-1")
    redact.register("p@ss-word-1-and-more")
    assert redact.secrets() == ("p@ss-word-1-and-more", "p%40ss-word-1", "p@ss-word-1")
    assert redact.redact("x p@ss-word-1-and-more y p%40ss-word-1 z p@ss-word-1") == "x *** y *** z ***"
    redact.forget_all()
    assert redact.secrets() == () and redact.redact("p@ss-word-1") == "p@ss-word-1"


def test_stream_cuts_at_the_last_line_end_and_holds_the_rest() -> None:
    redact.register(KEY)
    raw = io.StringIO()
    stream = redact.RedactingStream(raw)
    assert stream.write(f"one {KEY}\ntwo {KEY[:5]}") == len(f"one {KEY}\ntwo {KEY[:5]}")
    assert raw.getvalue() == "one ***\n"
    assert stream.write(f"{KEY[5:]}\rthree") == len(KEY) - 5 + 6
    assert raw.getvalue() == "one ***\ntwo ***\r"
    stream.flush()  # "three" cannot start the key: written
    assert raw.getvalue() == "one ***\ntwo ***\rthree"
    stream.write("tail " + KEY[:3])
    stream.flush()  # the possible start of the key is held back
    assert raw.getvalue() == "one ***\ntwo ***\rthreetail "
    stream.close_pending()
    assert raw.getvalue() == "one ***\ntwo ***\rthreetail " + KEY[:3]


def test_held_tail_is_the_longest_proper_prefix() -> None:
    redact.register(KEY)
    redact.register("ZZZZZZZZZZ")
    assert redact._held_tail("abc") == 0
    assert redact._held_tail("abc" + KEY[:1]) == 1
    assert redact._held_tail("abc" + KEY[:6]) == 6
    assert redact._held_tail(KEY[: len(KEY) - 1]) == len(KEY) - 1
    assert redact._held_tail("x" + KEY) == 0, "a whole secret is not a proper prefix"
    assert redact._held_tail("ZZZZ") == 4


def test_without_secrets_pending_text_goes_out_first() -> None:
    redact.register(KEY)
    raw = io.StringIO()
    stream = redact.RedactingStream(raw)
    stream.write("held")
    redact.forget_all()
    stream.write(" then more")
    assert raw.getvalue() == "held then more"
    stream.close_pending()
    assert raw.getvalue() == "held then more"


class _Tty(io.StringIO):
    encoding = "latin-1"  # type: ignore[assignment]
    errors = "strict"  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.flushed = 0
        self.buffer = io.BytesIO()

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return 7

    def flush(self) -> None:
        self.flushed += 1


def test_stream_reports_what_the_wrapped_stream_is() -> None:
    raw = _Tty()
    stream = redact.RedactingStream(raw)
    assert (stream.encoding, stream.errors, stream.fileno(), stream.isatty(), stream.writable()) == (
        "latin-1", "strict", 7, True, True)  # fmt: skip
    assert stream.buffer is raw.buffer
    stream.flush()
    assert raw.flushed == 1
    stream.close_pending()
    assert raw.flushed == 2
    plain = redact.RedactingStream(io.StringIO())
    assert (plain.encoding, plain.errors) == ("utf-8", None)  # StringIO has neither


def test_install_wraps_once_and_finish_writes_what_is_held(monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    redact.install()
    wrapped_out, wrapped_err = sys.stdout, sys.stderr
    assert isinstance(wrapped_out, redact.RedactingStream) and wrapped_out.raw is out
    assert isinstance(wrapped_err, redact.RedactingStream) and wrapped_err.raw is err
    redact.install()
    assert sys.stdout is wrapped_out and sys.stderr is wrapped_err, "install is idempotent"
    redact.register(KEY)
    print(f"no newline {KEY[:4]}", end="")
    print(f"err {KEY}", end="", file=sys.stderr)
    assert out.getvalue() == "" and err.getvalue() == ""
    redact.finish()
    assert out.getvalue() == f"no newline {KEY[:4]}" and err.getvalue() == "err ***"


def test_write_text_writes_utf8_redacted(tmp_path: Path) -> None:
    redact.register(KEY)
    output.write_text(tmp_path / "r.txt", f"é {KEY}\n", option="--json")
    assert (tmp_path / "r.txt").read_bytes() == "é ***\n".encode()


def test_write_goes_out_to_the_last_line_end() -> None:
    redact.register(KEY)
    raw = io.StringIO()
    stream = redact.RedactingStream(raw)
    stream.write(f"a\nb {KEY}\nc")
    assert raw.getvalue() == "a\nb ***\n"
    stream.write("\rd\re")
    assert raw.getvalue() == "a\nb ***\nc\rd\r"


def test_flush_after_the_secrets_are_gone_holds_nothing_back() -> None:
    redact.register(KEY)
    raw = io.StringIO()
    stream = redact.RedactingStream(raw)
    stream.write("abc")
    redact.forget_all()
    stream.flush()
    assert raw.getvalue() == "abc"


def test_the_stream_goes_on_after_close_pending() -> None:
    redact.register(KEY)
    raw = io.StringIO()
    stream = redact.RedactingStream(raw)
    stream.write("first")
    stream.close_pending()
    stream.write(f"second {KEY}\n")
    stream.close_pending()
    assert raw.getvalue() == "firstsecond ***\n"


def test_write_text_is_utf8_whatever_the_locale(tmp_path: Path) -> None:
    """A report with non-ASCII text is written as UTF-8 even under an ASCII locale (a minimal container)."""
    out = tmp_path / "r.txt"
    code = (
        "import sys; from vllm_station import output\n"
        "output.write_text(sys.argv[1], 'Z\\u00fcrich', option='')"
    )
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    r = subprocess.run([sys.executable, "-c", code, str(out)], env=env, capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == "Zürich".encode()


# ---- the shared client: a secret split by a line break in what a server sends back ----------------------


def _split_key_server() -> FaultServer:
    """Echoes the key back split by a line break: in an error body, and in an event stream whose `data:`
    lines the client joins (SSE: with a line break) before it reads the event."""
    body = f'{{"error": {{"message": "invalid key {KEY[:6]}\\n{KEY[6:]}"}}}}'
    stream = f"data: {{\"error\": \"bad key {KEY[:6]}\ndata: {KEY[6:]}\"}}\n\n".encode()
    return FaultServer({
        ("POST", "/v1/completions"): Reply(status=401, body=f"invalid key {KEY[:6]}\n{KEY[6:]}\n"),
        ("POST", "/v1/chat/completions"): Reply(status=403, body=body, content_type="application/json"),
        ("GET", "/v1/models"): RawReply(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                                        b"content-length: %d\r\n\r\n" % len(stream) + stream),
    }).start()  # fmt: skip


@pytest.mark.parametrize("call", ["completion", "chat", "chat_stream"])
def test_a_key_split_by_a_line_break_never_reaches_an_error(call: str) -> None:
    """Masking runs on the joined text (or catches the break): a key cut in two by a line break in the
    server's answer is neither rebuilt in the message nor left in two halves."""
    redact.register(KEY)
    srv = _split_key_server()
    try:
        with ApiClient(srv.url, api_key=KEY, timeout=10) as api, pytest.raises(ApiError) as err:
            if call == "completion":
                api.completion("m", "hi", max_tokens=1)
            elif call == "chat":
                api.chat("m", [{"role": "user", "content": "hi"}])
            else:
                stream_body = f"data: {{\"error\": \"bad key {KEY[:6]}\ndata: {KEY[6:]}\"}}\n\n"
                srv.route("POST", "/v1/chat/completions",
                          Reply(body=stream_body, content_type="text/event-stream"))  # fmt: skip
                list(api.chat_stream("m", [{"role": "user", "content": "hi"}]))
    finally:
        srv.stop()
    texts = [str(err.value), *(str(a) for a in err.value.args), str(getattr(err.value, "body", "") or "")]
    for text in texts:
        assert KEY[:6] not in text and KEY[6:] not in text, text
    assert "***" in str(err.value)
