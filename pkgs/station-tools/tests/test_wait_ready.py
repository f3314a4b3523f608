"""`station wait-ready`: real vLLM (ready), in-process servers for what vLLM cannot do on demand."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest
from faultserver import FaultServer, Reply, Request, fake_openai_routes, free_port

from vllm_station.cli import main

FAST = ["--interval", "0.3"]


def completion_json(model: str = "fake", text: str = "!") -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "text": text, "finish_reason": "length", "logprobs": None}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def serving_routes(model: str = "fake") -> dict[tuple[str, str], Any]:
    routes = fake_openai_routes(model=model)
    routes[("POST", "/v1/completions")] = Reply(json=completion_json(model))
    return routes


def wait_ready(*args: str) -> int:
    return main(["wait-ready", *args])


# ---- real vLLM -----------------------------------------------------------------------------------


def test_real_vllm_is_ready(tools_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    t0 = time.monotonic()
    code = wait_ready("--base-url", tools_server.base_url, "--timeout", "60", "--interval", "1")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "ready after" in out
    assert "/v1/completions" in out and "'tiny-tools'" in out
    assert time.monotonic() - t0 < 30


def test_real_vllm_with_v1_url_and_model(tools_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code = wait_ready("--base-url", tools_server.api_url, "--model", "tiny-tools", "--timeout", "60")
    assert code == 0, capsys.readouterr().err


def test_real_vllm_wrong_model_gives_up(tools_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    t0 = time.monotonic()
    code = wait_ready("--base-url", tools_server.base_url, "--model", "no-such-model", "--timeout", "120")
    err = capsys.readouterr().err
    assert code == 1
    assert time.monotonic() - t0 < 30  # a 404 for the model name does not wait for the timeout
    assert "waiting will not help" in err and "404" in err and "no-such-model" in err


# ---- in-process servers ----------------------------------------------------------------------------


@pytest.mark.timing
def test_health_ok_but_completions_fail_times_out(capsys: pytest.CaptureFixture[str]) -> None:
    routes = serving_routes()
    routes[("POST", "/v1/completions")] = Reply(status=500, json={"error": {"message": "engine dead"}})
    with FaultServer(routes) as srv:
        t0 = time.monotonic()
        code = wait_ready("--base-url", srv.url, "--timeout", "2", *FAST)
        elapsed = time.monotonic() - t0
        posts = [r for r in srv.requests if r.path == "/v1/completions"]
    err = capsys.readouterr().err
    assert code == 1
    assert 2 <= elapsed < 10
    assert len(posts) >= 3  # it kept probing until the timeout
    assert posts[0].json()["max_tokens"] == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("station wait-ready: error: not ready after 2 s")
    assert "POST /v1/completions" in last and "HTTP 500" in last and "engine dead" in last
    assert "Traceback" not in err


def test_nothing_listening_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    t0 = time.monotonic()
    code = wait_ready("--base-url", f"http://127.0.0.1:{port}", "--timeout", "1.5", *FAST)
    err = capsys.readouterr().err
    assert code == 3
    assert time.monotonic() - t0 < 8
    assert "nothing answered within" in err and "connection refused" in err
    assert "Traceback" not in err


def test_slow_then_ready(capsys: pytest.CaptureFixture[str]) -> None:
    t_start = time.monotonic()

    def health(_req: Request) -> Reply:
        return Reply(status=200 if time.monotonic() - t_start > 1.5 else 503, body=b"loading")

    def completions(_req: Request) -> Reply:  # the engine serves a little after /health turns 200
        if time.monotonic() - t_start > 2.5:
            return Reply(json=completion_json())
        return Reply(status=503, json={"error": {"message": "engine warming up"}})

    routes = serving_routes()
    routes[("GET", "/health")] = health
    routes[("POST", "/v1/completions")] = completions
    with FaultServer(routes) as srv:
        code = wait_ready("--base-url", srv.url, "--timeout", "20", *FAST)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert time.monotonic() - t_start >= 2.5
    assert "ready after" in out and "'fake'" in out
    progress = [ln for ln in err.splitlines() if "not ready after" in ln]
    assert any("GET /health" in ln and "503" in ln for ln in progress)
    assert any("POST /v1/completions" in ln and "engine warming up" in ln for ln in progress)


def test_chat_only_server_is_probed_with_chat(capsys: pytest.CaptureFixture[str]) -> None:
    with FaultServer(fake_openai_routes(model="m")) as srv:  # no /v1/completions: 404
        code = wait_ready("--base-url", srv.url, "--model", "m", "--timeout", "5", *FAST)
        chats = [r.json() for r in srv.requests if r.path == "/v1/chat/completions"]
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "/v1/chat/completions" in out
    assert chats and chats[0]["max_tokens"] == 1 and chats[0]["model"] == "m"


def test_bad_key_gives_up_without_waiting(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "key"
    key.write_text("sk-secret-value\n")
    routes = serving_routes()
    routes[("POST", "/v1/completions")] = Reply(status=401, json={"error": {"message": "bad key"}})
    with FaultServer(routes) as srv:
        t0 = time.monotonic()
        code = wait_ready("--base-url", srv.url, "--api-key-file", str(key), "--timeout", "60", *FAST)
        auth = srv.requests[-1].headers.get("authorization")
    err = capsys.readouterr().err
    assert code == 1
    assert time.monotonic() - t0 < 10
    assert auth == "Bearer sk-secret-value"
    assert "HTTP 401" in err and "waiting will not help" in err
    assert "sk-secret-value" not in err


def test_models_listed_model_is_used(capsys: pytest.CaptureFixture[str]) -> None:
    with FaultServer(serving_routes(model="served-x")) as srv:
        code = wait_ready("--base-url", srv.url + "/v1/", "--timeout", "5", *FAST)
        body = next(r.json() for r in srv.requests if r.path == "/v1/completions")
    assert code == 0, capsys.readouterr().err
    assert body["model"] == "served-x"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--interval", "0"], "--interval: must be a number of seconds"),
        (["--timeout", "-1"], "--timeout: must be a number of seconds"),
        (["--api-key-file", "/nonexistent/key"], "not found"),
    ],
)
def test_usage_errors_exit_2(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = wait_ready("--base-url", f"http://127.0.0.1:{free_port()}", *args)
    assert code == 2
    assert needle in capsys.readouterr().err


def test_server_process_exit_ends_the_wait(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under systemd the engine is $MAINPID: once it died, probing a dead port for 540 s only delays the
    restart (found by the system tier: a container that could not exec waited out the whole timeout)."""
    proc = subprocess.Popen(["sleep", "0.5"])
    monkeypatch.setenv("MAINPID", str(proc.pid))
    t0 = time.monotonic()
    rc = main(
        [
            "wait-ready",
            "--base-url",
            f"http://127.0.0.1:{free_port()}",
            "--timeout",
            "60",
            "--interval",
            "0.2",
        ]
    )
    proc.wait()
    assert rc == 1 and time.monotonic() - t0 < 10
    assert f"the server process (pid {proc.pid}) exited before it was ready" in capsys.readouterr().err


def test_watch_pid_must_be_a_pid(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["wait-ready", "--base-url", "http://127.0.0.1:1", "--watch-pid", "0"])
    assert rc == 2 and "--watch-pid: must be a whole number from 1" in capsys.readouterr().err


# ---- --json: the outcome on stdout, whatever it is ----------------------------------------------------


def test_json_prints_the_outcome_on_stdout_and_keeps_the_exit_code(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--json` (the shared switch): one JSON document on stdout for a ready server, a refused probe and
    an address where nothing listens; the exit code and the stderr message are the ones without it."""
    monkeypatch.delenv("MAINPID", raising=False)
    with FaultServer(serving_routes(model="served-x")) as srv:
        host_port = srv.url.split("://", 1)[1]
        code = wait_ready("--base-url", f"http://ops:pw-in-url@{host_port}", "--json", "--timeout", "5",
                          *FAST)  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    ready = json.loads(out)  # the whole of stdout: no "ready after" line beside it
    assert ready["schema"] == "station-wait-ready/1"
    assert (ready["verdict"], ready["ready"], ready["reached"]) == ("ready", True, True)
    assert ready["exit_code"] == 0
    assert ready["model"] == "served-x" and ready["attempts"] == 1 and ready["elapsed_s"] >= 0
    assert ready["reason"].startswith("/health 200 and a 1-token POST /v1/completions for 'served-x'")
    assert ready["base_url"] == f"http://{host_port}"  # never the credentials of the URL
    assert "pw-in-url" not in out + err

    refusing = serving_routes()
    refusing[("POST", "/v1/completions")] = Reply(status=401, json={"error": {"message": "bad key"}})
    with FaultServer(refusing) as srv:
        code = wait_ready("--base-url", srv.url, "--json", "--timeout", "60", *FAST)
    out, err = capsys.readouterr()
    refused = json.loads(out)
    assert code == 1 and (refused["verdict"], refused["ready"], refused["exit_code"]) == ("refused", False, 1)
    assert "HTTP 401" in refused["reason"] and "waiting will not help" in err

    code = wait_ready("--base-url", f"http://127.0.0.1:{free_port()}", "--json", "--timeout", "1", *FAST)
    out, err = capsys.readouterr()
    nobody = json.loads(out)
    assert code == 3 and (nobody["verdict"], nobody["reached"]) == ("unreachable", False)
    assert nobody["exit_code"] == 3
    assert "nothing answered within" in err
