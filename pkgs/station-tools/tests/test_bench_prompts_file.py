"""`station bench --prompts FILE.jsonl` (replay a prompt set) and `--save-responses DIR` (raw answers
with their timings), like the TP=2 recipe's AIPerf run with real coding prompts.

* The loader: OpenAI messages lists, `{"messages": …}` and ShareGPT conversations; every bad line is a
  usage error naming its line number; FIFOs, directories and files over the size bound are refused
  before anything is read or sent.
* Against a real HTTP server that records requests: every request carries one of the file's prompts,
  in file order, wrapping around; the saved responses (one JSONL per level and phase) are the server's
  answers to those prompts.
* Against the simulator (known schedule and tokenizer): the saved timings match its TTFT and the
  server's token counts match the file's messages.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faultserver import Answer, FaultServer, Request, SseReply, chat_chunks, fake_openai_routes
from simserver import SimServer

from vllm_station.cli import main
from vllm_station.commands.bench import dataset
from vllm_station.errors import UsageError
from vllm_station.sim.config import GENERATION_OVERHEAD, MESSAGE_OVERHEAD, SimConfig

OPENAI = [{"role": "system", "content": "You review code."}, {"role": "user", "content": "alpha one"}]
WRAPPED = {"messages": [{"role": "user", "content": "bravo two three"}], "temperature": 0.7}
SHAREGPT = {
    "conversations": [
        {"from": "human", "value": "charlie four"},
        {"from": "gpt", "value": "an old answer"},
        {"from": "human", "value": "delta five six"},
        {"from": "gpt", "value": "the recorded answer, dropped"},
    ]
}
EXPECTED = [
    OPENAI,
    WRAPPED["messages"],
    [
        {"role": "user", "content": "charlie four"},
        {"role": "assistant", "content": "an old answer"},
        {"role": "user", "content": "delta five six"},
    ],
]


def _write(path: Path, *values: Any, raw: bytes = b"") -> Path:
    lines = [json.dumps(v).encode() for v in values]
    path.write_bytes(b"\n".join(lines) + b"\n\n" + raw)  # a blank line is skipped
    return path


def test_loader_reads_the_three_shapes(tmp_path: Path) -> None:
    pf = dataset.load(_write(tmp_path / "p.jsonl", OPENAI, WRAPPED, SHAREGPT))
    assert pf.prompts == EXPECTED
    assert pf.formats == {"openai": 2, "sharegpt": 1}


BAD_LINES = {
    "not JSON": (b'{"messages": [', "line 2: not JSON"),
    "not UTF-8": (b'["\xff"]', "line 2: not UTF-8"),
    "empty list": (b"[]", "line 2: the messages list is empty"),
    "bad role": (b'[{"role": "robot", "content": "x"}]', "line 2: message 1: role 'robot'"),
    "content a number": (b'[{"role": "user", "content": 5}]', "message 1: content is int"),
    "no content": (b'[{"role": "user"}]', "message 1: no content"),
    "bad part": (b'[{"role": "user", "content": ["x"]}]', "content parts must be objects"),
    "a scalar": (b"42", "line 2: expected a messages list"),
    "other object": (b'{"prompt": "x"}', "line 2: expected a messages list"),
    "sharegpt unknown from": (b'{"conversations": [{"from": "bot", "value": "x"}]}', "from 'bot'"),
    "sharegpt no human": (b'{"conversations": [{"from": "gpt", "value": "x"}]}', "no human turn"),
    "sharegpt value": (b'{"conversations": [{"from": "human", "value": 1}]}', "turn 1: value"),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "line 2: nested too deeply"),
}


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_a_bad_line_is_a_usage_error_naming_it(tmp_path: Path, case: str) -> None:
    raw, words = BAD_LINES[case]
    path = tmp_path / "p.jsonl"
    path.write_bytes(json.dumps(OPENAI).encode() + b"\n" + raw + b"\n")
    with pytest.raises(UsageError) as exc:
        dataset.load(path)
    assert str(path) in str(exc.value) and words in str(exc.value), str(exc.value)


@pytest.fixture(scope="module")
def srv() -> Iterator[FaultServer]:
    with FaultServer(fake_openai_routes("fake")) as s:
        yield s


def _refused(srv: FaultServer, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    srv.requests.clear()
    rc = main(["bench", "sweep", "--base-url", srv.url, "--no-progress", *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert srv.requests == []
    return err


def test_fifo_directory_empty_and_oversized_files_are_refused_unread(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    assert "not a regular file" in _refused(srv, capsys, "--prompts", str(fifo))
    assert time.monotonic() - t0 < 5  # the open did not wait for a writer
    assert "a directory" in _refused(srv, capsys, "--prompts", str(tmp_path))
    (tmp_path / "empty.jsonl").write_text("\n\n")
    assert "no prompts" in _refused(srv, capsys, "--prompts", str(tmp_path / "empty.jsonl"))
    big = tmp_path / "big.jsonl"
    with big.open("wb") as fh:  # sparse: no disk used, and never read
        fh.truncate(128 * 2**20 + 1)
    assert "at most 134,217,728" in _refused(srv, capsys, "--prompts", str(big))
    assert "No such file" in _refused(srv, capsys, "--prompts", str(tmp_path / "missing.jsonl"))


def test_prompts_option_conflicts(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    prompts = _write(tmp_path / "p.jsonl", OPENAI)
    assert "--input-len" in _refused(srv, capsys, "--prompts", str(prompts), "--input-len", "64")
    refused = _refused(srv, capsys, "--prompts", str(prompts), "--output", str(prompts))
    assert "would be overwritten" in refused
    srv.requests.clear()
    rc = main(["bench", "prefill", "--base-url", srv.url, "--prompts", str(prompts)])
    assert rc == 2 and "--prompts is for sweep and burst" in capsys.readouterr().err
    assert json.loads(prompts.read_text()) == OPENAI  # untouched


def _echo_chat(req: Request) -> Answer:
    """A streamed answer that quotes the last user message (so a saved response names its prompt)."""
    messages = (req.json() or {})["messages"]
    last = [m["content"] for m in messages if m["role"] == "user"][-1]
    return SseReply(chat_chunks("fake", f"you said: {last}"))


def test_replay_sends_the_files_prompts_in_order_and_saves_the_answers(
    srv: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    srv.route("POST", "/v1/chat/completions", _echo_chat)
    srv.requests.clear()
    prompts = _write(tmp_path / "p.jsonl", OPENAI, WRAPPED, SHAREGPT)
    saved, report_path = tmp_path / "responses", tmp_path / "r.json"
    rc = main(
        [
            "bench", "sweep", "--base-url", srv.url, "-c", "1,2", "--warmup", "1x", "--requests", "2x",
            "--no-ignore-eos", "--output-len", "16", "--prompts", str(prompts),
            "--save-responses", str(saved), "--output", str(report_path), "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    chats = [r.json() for r in srv.requests if r.path == "/v1/chat/completions"]
    assert srv.requests[0].path == "/v1/models"
    assert not any(r.path == "/tokenize" for r in srv.requests)  # nothing to count: the file is the prompt
    # c1: 1 warm-up + 2 measured, c2: 2 + 4; file order, wrapping round: 0 1 2 | 0 1 2 0 1 2
    assert len(chats) == 9
    assert [c["messages"] for c in chats[:3]] == EXPECTED  # c1 runs one at a time: exact order
    assert Counter(json.dumps(c["messages"]) for c in chats) == {json.dumps(m): 3 for m in EXPECTED}
    assert all(c["max_tokens"] == 16 and "ignore_eos" not in c and c["stream"] for c in chats)

    report = json.loads(report_path.read_text())
    assert report["prompts"]["file"] == str(prompts)
    assert report["prompts"]["file_prompts"] == 3 and report["prompts"]["requests_sent"] == 9
    assert report["prompts"]["formats"] == {"openai": 2, "sharegpt": 1}
    assert [lv["prompt_tokens_target"] for lv in report["levels"]] == [None, None]

    files = sorted(p.name for p in saved.iterdir())
    assert files == ["c1-repeat1.jsonl", "c1-warmup.jsonl", "c2-repeat1.jsonl", "c2-warmup.jsonl"]
    lines = {name: [json.loads(x) for x in (saved / name).read_text().splitlines()] for name in files}
    assert [len(lines[n]) for n in files] == [2, 1, 4, 2]
    assert [r["prompt"] for r in lines["c1-warmup.jsonl"] + lines["c1-repeat1.jsonl"]] == [0, 1, 2]
    assert [r["prompt"] for r in lines["c2-warmup.jsonl"] + lines["c2-repeat1.jsonl"]] == [0, 1, 2, 0, 1, 2]
    for recs in lines.values():
        for r in recs:
            said = [m["content"] for m in EXPECTED[r["prompt"]] if m["role"] == "user"][-1]
            assert f"you said: {said}" in r["body"] and r["body"].endswith("data: [DONE]\n\n")
            assert r["ok"] and r["status"] == 200 and r["output_tokens"] == 9  # the server's usage
            assert sum(n for _, n in r["reads"]) == len(r["body"].encode())
            assert 0 <= r["headers_s"] <= r["end_s"] and r["ttft_s"] <= r["e2e_s"]
            assert abs(r["sent_at"] - time.time()) < 120


@pytest.mark.timing  # milliseconds against the simulator's schedule: a loaded machine delays them
def test_saved_timings_and_token_counts_match_the_simulator(tmp_path: Path) -> None:
    prompts = _write(tmp_path / "p.jsonl", OPENAI, SHAREGPT)
    saved, report_path = tmp_path / "responses", tmp_path / "r.json"
    ttft, itl = 0.04, 0.005
    with SimServer(SimConfig(ttft=ttft, itl=itl)) as sim:
        rc = main(
            [
                "bench", "sweep", "--base-url", sim.base_url, "-c", "1", "--warmup", "0", "--requests", "2",
                "--output-len", "6", "--prompts", str(prompts), "--save-responses", str(saved),
                "--output", str(report_path), "--no-progress",
            ]
        )  # fmt: skip
    assert rc == 0
    recs = [json.loads(x) for x in (saved / "c1-repeat1.jsonl").read_text().splitlines()]
    words = [sum(len(m["content"].split()) for m in EXPECTED[i]) for i in (0, 2)]
    for r, n_words, n_msgs in zip(recs, words, (2, 3), strict=True):
        assert r["ok"] and r["output_tokens"] == 6
        # the simulator's tokenizer: words + 4 per message + 3 for the generation prompt
        assert r["prompt_tokens"] == n_words + MESSAGE_OVERHEAD * n_msgs + GENERATION_OVERHEAD
        assert ttft <= r["ttft_s"] <= ttft + 0.05
        assert r["e2e_s"] == pytest.approx(ttft + 5 * itl, abs=0.05)
        assert r["ttft_s"] <= r["end_s"]
        assert r["reads"][0][0] <= r["ttft_s"] + 1e-6  # the first token came in one of the first reads
    level = json.loads(report_path.read_text())["levels"][0]
    assert level["ttft"]["median"] == pytest.approx(sorted(r["ttft_s"] for r in recs)[0], abs=0.05)


def test_a_save_directory_that_disappears_does_not_stop_the_run(
    srv: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A write error while saving (here: the directory replaced by a file mid-run) is a note."""
    srv.route("POST", "/v1/chat/completions", _echo_chat)
    saved, report_path = tmp_path / "responses", tmp_path / "r.json"
    stop = threading.Event()

    def saboteur() -> None:
        while not stop.is_set():
            if saved.is_dir() and not any(saved.iterdir()):
                saved.rmdir()
                saved.write_text("not a directory any more")
                return
            time.sleep(0.001)

    t = threading.Thread(target=saboteur, daemon=True)
    t.start()
    try:
        rc = main(
            [
                "bench", "sweep", "--base-url", srv.url, "-c", "1", "--warmup", "1", "--requests", "1",
                "--no-ignore-eos", "--prompts", str(_write(tmp_path / "p.jsonl", OPENAI)),
                "--save-responses", str(saved), "--output", str(report_path), "--no-progress",
            ]
        )  # fmt: skip
    finally:
        stop.set()
        t.join(timeout=5)
    report = json.loads(report_path.read_text())
    assert rc == 0 and report["levels"][0]["ok"] == 1
    assert any("--save-responses" in n and "not saved" in n for n in report["notes"]), report["notes"]
    assert "later phases were not saved" in capsys.readouterr().out  # the table's notes say it too
