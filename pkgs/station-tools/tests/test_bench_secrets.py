"""`station bench` never shows the API key, even when the server echoes the Authorization header.

The failure examples cut server text to 200 characters; the key is masked (`vllm_station.redact`)
before the cut, so a key crossing the cut leaves no prefix behind. Generated cases (hypothesis): the
echoed header at every offset around the cut, in an HTTP error body, an SSE error event and a
non-JSON event; no piece of the key may reach stdout, stderr, `--json`, the CSV or `--save-responses`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from faultserver import Answer, FaultServer, Reply, Request, SseReply, fake_openai_routes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_station import redact
from vllm_station.cli import main

KEY = "SK9Q7ZK3V8M2P6W4XQ"  # upper case and digits: never produced by the filler below


@pytest.fixture(autouse=True)
def _clean_registry() -> Iterator[None]:
    redact.forget_all()
    yield
    redact.forget_all()


@pytest.fixture(scope="module")
def srv() -> Iterator[FaultServer]:
    with FaultServer(fake_openai_routes("fake")) as s:
        yield s


def _fragments(text: str, n: int = 4) -> list[str]:
    """Every piece of the key of `n` or more characters that appears in `text`."""
    return [KEY[i : i + n] for i in range(len(KEY) - n + 1) if KEY[i : i + n] in text]


def _echo(where: str, offset: int, tail: int) -> object:
    def answer(req: Request) -> Answer:
        echoed = "e" * offset + str(req.headers.get("authorization")) + "z" * tail
        if where == "http":
            return Reply(status=500, body=echoed)
        if where == "event":
            return SseReply([{"error": {"message": echoed, "code": 500}}])
        return SseReply(["not json " + echoed])  # a malformed event

    return answer


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    where=st.sampled_from(["http", "event", "malformed"]),
    offset=st.integers(min_value=150, max_value=215),
    tail=st.integers(min_value=0, max_value=60),
)
def test_bench_never_writes_the_key_whatever_its_position(
    srv: FaultServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
    offset: int,
    tail: int,
) -> None:
    monkeypatch.setenv("STATION_API_KEY", KEY)
    srv.route("POST", "/v1/chat/completions", _echo(where, offset, tail))
    out = tmp_path / f"{where}-{offset}-{tail}"
    rc = main(
        [
            "bench", "sweep", "--base-url", srv.url, "--model", "fake", "-c", "1", "--warmup", "0",
            "--requests", "1", "--no-progress", "--output", f"{out}.json", "--csv", f"{out}.csv",
            "--save-responses", f"{out}-responses",
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 1  # no request succeeded
    assert srv.requests[-1].headers["authorization"] == f"Bearer {KEY}"  # the key was sent, and echoed
    written = [Path(f"{out}.json"), Path(f"{out}.csv"), *Path(f"{out}-responses").iterdir()]
    texts = {"stdout": captured.out, "stderr": captured.err} | {str(p): p.read_text() for p in written}
    for name, text in texts.items():
        assert not _fragments(text), (where, offset, name, text[:600])
    assert "e" * 100 in texts[f"{out}.json"]  # the failure example is there (the key masked or cut)


def test_url_password_is_in_no_output(
    srv: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--base-url http://user:password@host`: the report's base_url and options carry the URL, masked."""
    monkeypatch.delenv("STATION_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    password = "Hunter2Hunter2"
    srv.route("POST", "/v1/chat/completions", _echo("http", 10, 0))
    url = srv.url.replace("http://", f"http://op:{password}@")
    out = tmp_path / "r"
    rc = main(
        [
            "bench", "sweep", "--base-url", url, "-c", "1", "--warmup", "0", "--requests", "1",
            "--no-progress", "--output", f"{out}.json", "--csv", f"{out}.csv",
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 1  # the echo server fails every request
    report = Path(f"{out}.json").read_text()
    assert '"base_url": "http://op:***@127.0.0.1' in report
    for text in (captured.out, captured.err, report, Path(f"{out}.csv").read_text()):
        assert password not in text
