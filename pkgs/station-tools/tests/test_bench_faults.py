"""`station bench` against a hostile or broken server, and with outputs it could not write.

* Model discovery (`/v1/models`): 401/403/429 are an authentication or rate problem (exit 1 with the
  reason), an HTML page, invalid UTF-8, JSON that is not a model list, or a body too large to be one are
  exit 1 saying what came back; only a server that cannot be reached or read is exit 3. Never a traceback.
* Output paths are checked before the first request: a `--json`/`--csv` file or `--plots` /
  `--save-responses` directory that cannot be written is exit 2 and the server sees nothing.
* A write that fails after the run (`--json /dev/full`: the disk is full) keeps the run: the other
  outputs are written, the report is saved to a temporary file, and the error names both.
* Streams the hot-path client refuses to hold: an answer past its size limit (`oversize`), a bad
  Content-Length, a response head without end, events without a choice object (`malformed`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faultserver import Answer, FaultServer, RawReply, Reply, SseReply, fake_openai_routes, models_list

from vllm_station.cli import main


@pytest.fixture(scope="module")
def srv() -> Iterator[FaultServer]:
    with FaultServer(fake_openai_routes("fake")) as s:
        yield s


@pytest.fixture(autouse=True)
def _routes(srv: FaultServer) -> Iterator[None]:
    srv.routes.clear()
    srv.routes.update(fake_openai_routes("fake"))
    srv.requests.clear()
    yield


SHORT = ["sweep", "-c", "1", "--warmup", "0", "--requests", "1", "--no-progress", "--no-ignore-eos"]
HTML = "<!doctype html><html><body><h1>Sign in</h1></body></html>"

DISCOVERY: dict[str, tuple[Answer, int, list[str]]] = {
    "401": (Reply(status=401, json={"error": "no key"}), 1, ["HTTP 401", "API key and none was sent"]),
    "403": (Reply(status=403, json={"error": "bad key"}), 1, ["HTTP 403", "refused"]),
    "429": (
        Reply(status=429, json={"error": "slow down"}, headers={"Retry-After": "7"}),
        1,
        ["HTTP 429", "rate limited", "Retry-After: 7"],
    ),
    "500": (Reply(status=500, body="boom"), 1, ["HTTP 500", "boom"]),
    "html": (Reply(body=HTML, content_type="text/html"), 1, ["text/html", "not an OpenAI model list"]),
    "invalid-utf8": (Reply(body=b'{"data": [{"id": "\xff\xfe"}]}'), 1, ["not UTF-8", "model list"]),
    "not-a-list": (Reply(json={"data": "sim"}), 1, ['without a "data" list']),
    "bare-list": (Reply(json=[1, 2]), 1, ['without a "data" list']),
    "id-not-string": (Reply(json={"data": [{"id": {"a": 1}}]}), 1, ['no string "id"']),
    "empty": (Reply(json={"data": []}), 1, ["lists no model"]),
    "huge": (Reply(json={"data": [{"id": "m", "pad": "x" * (5 * 1024 * 1024)}]}), 1, ["larger than"]),
    "closed": (RawReply(b""), 3, ["/v1/models failed"]),
    # another protocol on the port: it answered (exit 1), and the message says it is not HTTP
    "garbage": (RawReply(b"garbage\r\n\r\n"), 1, ["no HTTP answer", "is that port an HTTP server?"]),
}


@pytest.mark.parametrize("case", list(DISCOVERY))
def test_model_discovery_faults_are_clear_errors(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    answer, code, words = DISCOVERY[case]
    srv.route("GET", "/v1/models", answer)
    rc = main(["bench", *SHORT, "--base-url", srv.url])
    err = capsys.readouterr().err
    assert rc == code, err
    assert "Traceback" not in err
    for w in words:
        assert w in err, (w, err)
    assert {r.path for r in srv.requests} == {"/v1/models"}  # nothing measured against a bad answer


# ---- output paths ----------------------------------------------------------------------------------


def _bad_outputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    afile = tmp / "afile"
    afile.write_text("x")
    (tmp / "adir").mkdir()
    return {
        "json-in-missing-dir": (["--output", str(tmp / "nope" / "r.json")], "does not exist"),
        "csv-under-a-file": (["--csv", str(afile / "r.csv")], "Not a directory"),
        "json-is-a-dir": (["--output", str(tmp / "adir")], "is a directory"),
        "json-unwritable-dir": (["--output", "/proc/bench.json"], "cannot write in /proc"),
        "plots-is-a-file": (["--plots", str(afile)], "is not a directory"),
        "plots-under-a-file": (["--plots", str(afile / "sub" / "plots")], "Not a directory"),
        "plots-in-unwritable-dir": (["--plots", "/proc/plots"], "cannot write in /proc"),
        "save-responses-is-a-file": (["--save-responses", str(afile)], "is not a directory"),
    }


OUTPUT_CASES = [
    "json-in-missing-dir",
    "csv-under-a-file",
    "json-is-a-dir",
    "json-unwritable-dir",
    "plots-is-a-file",
    "plots-under-a-file",
    "plots-in-unwritable-dir",
    "save-responses-is-a-file",
]


@pytest.mark.parametrize("case", OUTPUT_CASES)
def test_unwritable_outputs_are_usage_errors_before_any_request(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    args, why = _bad_outputs(tmp_path)[case]
    rc = main(["bench", *SHORT, "--base-url", srv.url, *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert args[0] in err and why in err, err
    assert srv.requests == []  # not even model discovery: no run to lose
    assert not list(tmp_path.glob("**/.station-bench-probe-*"))  # the probe leaves nothing behind


def test_a_write_that_fails_after_the_run_keeps_the_report(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    csv = tmp_path / "r.csv"
    rc = main(["bench", *SHORT, "--base-url", srv.url, "--output", "/dev/full", "--csv", str(csv)])
    captured = capsys.readouterr()
    assert rc == 1, captured.err
    assert "--output /dev/full: No space left on device" in captured.err
    m = re.search(r"the JSON report was saved to (\S+\.json)", captured.err)
    assert m, captured.err
    kept = Path(m.group(1))
    try:
        report = json.loads(kept.read_text())
    finally:
        kept.unlink()
    assert report["levels"][0]["ok"] == 1
    assert len(csv.read_text().splitlines()) == 2  # the CSV was written all the same
    assert "c1" in captured.out  # and the table printed


# ---- what the hot-path client refuses to hold ------------------------------------------------------

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def _chunk(content: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}


STREAMS: dict[str, tuple[Answer, str, str]] = {
    # --output-len 1: the limit is 64 KiB + 1 KiB; this stream never ends within it
    "oversize": (RawReply(HEAD + b"\r\n" + b"data: " + b"x" * 200_000 + b"\n\n"), "oversize", "bytes"),
    "bad-content-length": (RawReply(HEAD + b"Content-Length: 12abc\r\n\r\n"), "malformed", "Content-Length"),
    "endless-head": (RawReply(HEAD + b"X-Pad: " + b"a" * 100_000 + b"\r\n"), "malformed", "response head"),
    "choices-not-a-list": (SseReply([_chunk("a"), {"choices": "abc"}]), "malformed", "choice object"),
    # a redirect is never followed: the measured request would land elsewhere
    "redirect": (
        RawReply(b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n"),
        "redirect",
        "not followed",
    ),
    "delta-not-an-object": (
        SseReply([{"choices": [{"index": 0, "delta": "x"}]}]),
        "malformed",
        "choice object",
    ),
}


@pytest.mark.parametrize("case", list(STREAMS))
def test_streams_the_client_refuses_are_failures_not_tracebacks(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    answer, kind, words = STREAMS[case]
    srv.route("GET", "/v1/models", Reply(json=models_list("fake")))
    srv.route("POST", "/v1/chat/completions", answer)
    out = tmp_path / "r.json"
    rc = main(["bench", *SHORT, "--output-len", "1", "--base-url", srv.url, "--output", str(out)])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Fatal error" not in err, err
    assert rc == 1, err  # no request succeeded
    level = json.loads(out.read_text())["levels"][0]
    assert level["failures"] == {kind: 1}
    assert words in level["failure_examples"][0]
