"""Mutants of `vllm_station.commands.weights` (scripts/bench-mutation): the verdict exactly on its documented
boundaries (docs/weights-check.md: FAIL at >= 90 % of the whole checkpoint on one rank, WARN outside ±30 %
of the share), the byte figures against literal units (2**30, never the module's own constant), the exit
codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_station.cli import main
from vllm_station.commands.weights import CheckpointSize, poll, render, scan

GIB = 2**30  # a literal: a wrong unit in the module must not move the expectation with it


def ckpt(n_bytes: int) -> CheckpointSize:
    return CheckpointSize(dir="/ck", bytes=n_bytes, files=2, source="stamp")


def log(*ranks: tuple[int, str]) -> str:
    """vLLM 0.32.0's lines (tests/data/weights names their source): one worker per TP rank."""
    lines = []
    for rank, gib in ranks:
        tag = f"(Worker_TP{rank} pid={100 + rank}) INFO 12-01 09:14:07"
        lines += [
            f"{tag} [gpu_model_runner.py:5039] Starting to load model /m...",
            f"{tag} [gpu_model_runner.py:5149] Model loading took {gib} GiB memory and 12.000000 seconds",
        ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("gib", "status", "code"),
    [
        ("9.00", "FAIL", 1),  # exactly 90 % of 10 GiB on a TP-2 rank: FAIL (>= 90 %)
        ("8.99", "WARN", 0),  # just below: a skewed split (180 % of the 5 GiB share), not a FAIL
    ],
)
def test_whole_model_fraction_exactly_on_ninety_percent(gib: str, status: str, code: int) -> None:
    rep = scan(log((0, gib)), ckpt(10 * GIB), 2)
    assert (rep.status, rep.exit_code) == (status, code)
    rank = rep.ranks[0]
    assert rank.memory_bytes == round(float(gib) * 2**30)
    if status == "FAIL":
        assert rep.summary == (
            "Worker_TP0 holds 9.00 GiB of weights = 90 % of the whole checkpoint (10.00 GiB): tensor "
            "parallelism not applied (expected 5.00 GiB per rank with TP 2)"
        )
    else:
        assert rep.summary == (
            "Worker_TP0 holds 8.99 GiB of weights, 180 % of its expected share 5.00 GiB (outside ±30 %): "
            "a skewed split"
        )


def test_whole_model_fraction_is_not_judged_at_tp1() -> None:
    """TP 1: one rank holds everything by design (100 % of the whole and of its share)."""
    rep = scan(log((0, "10.00")), ckpt(10 * GIB), 1)
    assert (rep.status, rep.exit_code) == ("PASS", 0)
    assert rep.ranks[0].share_of_checkpoint == 1.0 and rep.ranks[0].share_of_expected == 1.0


@pytest.mark.parametrize(
    ("gib", "status"),
    [
        ("6.50", "PASS"),  # exactly +30 % of the 5 GiB share: within ±30 %
        ("3.50", "PASS"),  # exactly -30 %
        ("6.51", "WARN"),  # just outside
        ("3.49", "WARN"),
        ("5.00", "PASS"),
    ],
)
def test_share_tolerance_exactly_on_thirty_percent(gib: str, status: str) -> None:
    rep = scan(log((0, gib), (1, "5.00")), ckpt(10 * GIB), 2)
    assert rep.status == status, rep.summary
    assert rep.exit_code == 0
    assert rep.ranks[0].share_of_expected == pytest.approx(float(gib) / 5, rel=1e-9)


def test_pass_summary_and_figures_in_literal_units() -> None:
    rep = scan(log((0, "5.00"), (1, "4.50")), ckpt(10 * GIB + 2), 2)
    assert rep.expected_bytes_per_rank == 5 * 2**30 + 1  # the checkpoint's bytes // TP
    assert [r.memory_bytes for r in rep.ranks] == [5 * 2**30, round(4.5 * 2**30)]
    assert rep.summary == (
        "Worker_TP0 5.00 GiB; Worker_TP1 4.50 GiB: within ±30 % of the expected 5.00 GiB per rank "
        "(10.00 GiB / TP 2)"
    )
    assert rep.fix is None and rep.exit_code == 0


def test_worst_rank_decides_and_fail_outranks_warn() -> None:
    rep = scan(log((0, "9.50"), (1, "1.00")), ckpt(10 * GIB), 2)
    assert [r.status for r in rep.ranks] == ["FAIL", "WARN"]
    assert rep.status == "FAIL" and rep.exit_code == 1
    assert rep.summary.startswith("Worker_TP0 holds 9.50 GiB of weights = 95 % of the whole checkpoint")


def test_a_tp_rank_beyond_the_size_warns_even_with_a_fair_share() -> None:
    rep = scan(log((2, "5.00")), ckpt(10 * GIB), 2)
    assert rep.status == "WARN" and rep.exit_code == 0
    assert rep.summary == (
        "Worker_TP2 holds 5.00 GiB of weights, 100 % of its expected share 5.00 GiB; its TP rank 2 does not "
        "exist with --tensor-parallel-size 2"
    )
    rep = scan(log((1, "5.00")), ckpt(10 * GIB), 2)  # rank 1 of 2 exists
    assert rep.status == "PASS"


def test_nothing_logged_yet_is_pending_exit_4(tmp_path: Path) -> None:
    rep = scan("(Worker_TP0 pid=1) INFO [gpu_model_runner.py:5039] Starting to load model /m...\n",
               ckpt(10 * GIB), 2)  # fmt: skip
    assert (rep.status, rep.exit_code) == ("PENDING", 4)
    assert rep.summary == "no 'Model loading took … GiB' line yet (weights are loading; 1 line(s) read)"


def test_the_rendered_report_whole() -> None:
    """Worker_TP0 exactly 30 % above its share is PASS; the worst rank (Worker_TP1, 40 %) decides."""
    assert render(scan(log((0, "6.50"), (1, "2.00")), ckpt(10 * GIB), 2)) == (
        "WARN    Worker_TP1 holds 2.00 GiB of weights, 40 % of its expected share 5.00 GiB (outside ±30 %): "
        "a skewed split\n"
        "  source:     - (4 lines)\n"
        "  checkpoint: /ck: 10.00 GiB in 2 .safetensors file(s) (verify stamp)\n"
        "  expected:   5.00 GiB per rank (TP 2); WARN outside ±30 %, FAIL at >= 90 % of the whole "
        "checkpoint\n"
        "  process     pid  TP rank  weights GiB  % of share  load s  verdict\n"
        "  ----------  ---  -------  -----------  ----------  ------  -------\n"
        "  Worker_TP0  100        0         6.50         130   12.00  PASS\n"
        "  Worker_TP1  101        1         2.00          40   12.00  WARN\n"
        "  fix:        compare with the other station's `station weights-check`; a checkpoint other than the "
        "verified one, another quantization, or extra layers loaded (MTP/draft) change the figure"
    )


HELP = """\
usage: station weights-check [-h] (--unit UNIT | --log FILE) --checkpoint DIR
                             --tensor-parallel-size N [--wait SECONDS] [--interval INTERVAL]
                             [--all-invocations] [--json]

after a start: weight memory per rank (vLLM log) vs the expected share

options:
  -h, --help            show this help message and exit
  --unit UNIT           read the journal of this systemd unit (current start)
  --log FILE            read this log file (e.g. a saved container log)
  --checkpoint DIR      the checkpoint directory: the *.safetensors sizes its verify stamp lists
                        (else the files')
  --tensor-parallel-size N
                        the TP size vLLM runs with (2 for the pair): each rank's expected share is
                        checkpoint / N
  --wait SECONDS        poll until the model-loading line appears or the time is up
  --interval INTERVAL   seconds between polls with --wait (5)
  --all-invocations     with --unit: read the unit's whole journal, not the current start
  --json                print the report as JSON on stdout

exit: 0 PASS, WARN (a skewed split) or SKIP (CPU build: no memory figure); 1 FAIL (a rank holds
the whole model: tensor parallelism not applied); 2 bad arguments or no checkpoint size; 3 the log
could not be read; 4 PENDING (no model-loading line yet). See docs/weights-check.md.
"""


def test_the_help_whole(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["weights-check", "--help"]) == 0
    assert capsys.readouterr().out == HELP


def test_poll_waits_for_the_line_then_gives_up_saying_so() -> None:
    now = [0.0]
    texts = ["", "", log((0, "5.00"), (1, "5.00"))]
    reads: list[float] = []

    def read() -> tuple[str, str]:
        reads.append(now[0])
        return texts[min(len(reads) - 1, 2)], "file x"

    def sleep(s: float) -> None:
        now[0] += s

    rep = poll(read, ckpt(10 * GIB), 2, 30.0, 5.0, clock=lambda: now[0], sleep=sleep)
    assert rep.status == "PASS" and reads == [0.0, 5.0, 10.0]
    texts[2] = ""
    reads.clear()
    now[0] = 0.0
    rep = poll(read, ckpt(10 * GIB), 2, 12.0, 5.0, clock=lambda: now[0], sleep=sleep)
    assert rep.status == "PENDING" and rep.exit_code == 4
    assert rep.summary == (
        "still pending after 12 s: no 'Model loading took … GiB' line yet (loading has not started; 0 "
        "line(s) read)"
    )
    reads.clear()
    # no --wait: one read
    rep = poll(read, ckpt(10 * GIB), 2, None, 5.0, clock=lambda: now[0], sleep=sleep)
    assert rep.status == "PENDING" and len(reads) == 1 and rep.summary.startswith("no 'Model loading")


CPU_LOG = (
    "(EngineCore_DP0 pid=7) INFO 12-01 09:07:12 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with "
    "config: model='/m', tensor_parallel_size=1, device_config=cpu\n"
    "(EngineCore_DP0 pid=7) INFO 12-01 09:07:41 [cpu_model_runner.py:68] Starting to load model /m...\n"
    "(EngineCore_DP0 pid=7) INFO 12-01 09:07:44 [default_loader.py:501] Loading weights took 2.50 seconds\n"
)
TP4_ENGINE = (
    "(EngineCore_DP0 pid=7) INFO 12-01 09:07:12 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with "
    "config: model='/m', tensor_parallel_size=4, device_config=cuda\n"
)
UNTAGGED = (
    "INFO 12-01 09:14:07 [gpu_model_runner.py:5149] Model loading took 9.50 GiB memory and 3.000000 seconds\n"
)
SKEWED = "of weights, 50 % of its expected share 5.00 GiB (outside ±30 %): a skewed split"


@pytest.mark.parametrize(
    ("text", "tp", "expected"),
    [
        (CPU_LOG, 1, ("SKIP", 0, "vLLM's CPU build logs no weight memory ('Loading weights took 2.50 "
                      "seconds' only): nothing to compare with the expected 10.00 GiB per rank",
                      "run on the GPU build (the stations) for a verdict", [], 3, "cpu", 1)),
        (CPU_LOG, 2, ("FAIL", 1, "tensor parallelism not applied: vLLM's engine config says "
                      "tensor_parallel_size=1, --tensor-parallel-size 2",
                      "start vLLM with --tensor-parallel-size 2 (and the pair's --nnodes 2 on both stations)",
                      [], 3, "cpu", 1)),
        (UNTAGGED, 2, ("FAIL", 1, "? holds 9.50 GiB of weights = 95 % of the whole checkpoint (10.00 GiB): "
                       "tensor parallelism not applied (expected 5.00 GiB per rank with TP 2)",
                       "start vLLM with --tensor-parallel-size 2 across both stations (the engine line "
                       "'tensor_parallel_size=' in the log says what it ran with); `station preflight --only "
                       "pair-workers` shows which worker holds this GPU",
                       ["?'s log tag names no TP rank: that vLLM ran with tensor parallel size 1",
                        "TP rank(s) none seen of 2: vLLM logs this line once per node (its local first "
                        "rank), so each station's journal shows its own rank"], 1, None, None)),
        (UNTAGGED, 1, ("PASS", 0,
                       "? 9.50 GiB: within ±30 % of the expected 10.00 GiB per rank (10.00 GiB / TP 1)",
                       None, [], 1, None, None)),
        (log((1, "5.00")), 2, ("PASS", 0, "Worker_TP1 5.00 GiB: within ±30 % of the expected 5.00 GiB per "
                               "rank (10.00 GiB / TP 2)", None,
                               ["TP rank(s) 1 seen of 2: vLLM logs this line once per node (its local first "
                                "rank), so each station's journal shows its own rank"], 2, None, None)),
        (TP4_ENGINE + log((0, "2.50"), (1, "2.50")), 2,
         ("WARN", 0, f"Worker_TP0 holds 2.50 GiB {SKEWED}; Worker_TP1 holds 2.50 GiB {SKEWED}",
          "compare with the other station's `station weights-check`; a checkpoint other than the verified "
          "one, another quantization, or extra layers loaded (MTP/draft) change the figure",
          ["vLLM's engine config says tensor_parallel_size=4, --tensor-parallel-size 2"], 5, None, 4)),
        (TP4_ENGINE + log((0, "5.00"), (1, "5.00")), 2,
         ("WARN", 0, "vLLM's engine config says tensor_parallel_size=4, --tensor-parallel-size 2: the "
          "expected share assumes the wrong TP size; Worker_TP0 5.00 GiB; Worker_TP1 5.00 GiB: within ±30 % "
          "of the expected 5.00 GiB per rank (10.00 GiB / TP 2)",
          "pass the --tensor-parallel-size the unit starts vLLM with", [], 5, None, 4)),
    ],
)  # fmt: skip
def test_whole_reports(text: str, tp: int, expected: tuple[object, ...]) -> None:
    rep = scan(text, ckpt(10 * GIB), tp)
    got = (rep.status, rep.exit_code, rep.summary, rep.fix, rep.notes, rep.lines_read, rep.platform,
           rep.logged_tensor_parallel_size)  # fmt: skip
    assert got == expected


def test_the_ranks_as_read_from_the_log() -> None:
    rep = scan(TP4_ENGINE + log((1, "2.50"), (0, "2.50")) + UNTAGGED, ckpt(10 * GIB), 2)
    assert [(r.process, r.pid, r.tp_rank, r.memory_bytes, r.load_seconds) for r in rep.ranks] == [
        ("Worker_TP0", 100, 0, 5 * 2**29, 12.0),
        ("Worker_TP1", 101, 1, 5 * 2**29, 12.0),
        ("?", None, None, round(9.5 * 2**30), 3.0),  # untagged: sorted last
    ]
    assert rep.ranks[0].line == (
        "(Worker_TP0 pid=100) INFO 12-01 09:14:07 [gpu_model_runner.py:5149] Model loading took 2.50 GiB "
        "memory and 12.000000 seconds"
    )


def test_the_rendered_report_of_the_cpu_build_and_an_untagged_rank() -> None:
    size = CheckpointSize(dir="/ck", bytes=10 * GIB, files=2, source="safetensors")
    assert render(scan(CPU_LOG + UNTAGGED, size, 1)) == (
        "PASS    ? 9.50 GiB: within ±30 % of the expected 10.00 GiB per rank (10.00 GiB / TP 1)\n"
        "  source:     - (4 lines) — vLLM CPU build\n"
        "  checkpoint: /ck: 10.00 GiB in 2 .safetensors file(s) (.safetensors files on disk)\n"
        "  expected:   10.00 GiB per rank (TP 1); WARN outside ±30 %, FAIL at >= 90 % of the whole "
        "checkpoint\n"
        "  process         pid  TP rank  weights GiB  % of share  load s  verdict\n"
        "  --------------  ---  -------  -----------  ----------  ------  -------\n"
        "  ?               -    -               9.50          95    3.00  PASS\n"
        "  EngineCore_DP0    7  -        -            -             2.50  -"
    )


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--tensor-parallel-size", "1025"],
         "argument --tensor-parallel-size: must be a whole number from 1 to 1,024, got '1025'"),
        (["--interval", "3601"],
         "argument --interval: must be a number of seconds from more than 0 to 3,600, got '3601'"),
        (["--unit", "bad/name"], "argument --unit: must be a systemd unit name"),
        # the largest values and --wait 0 pass the arguments: the next refusal is the checkpoint's
        (["--tensor-parallel-size", "1024", "--interval", "3600", "--wait", "0"],
         "--checkpoint /nonexistent is not a directory"),
    ],
)  # fmt: skip
def test_the_arguments_exactly_on_their_bounds(
    args: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["weights-check", "--checkpoint", "/nonexistent", "--tensor-parallel-size", "2"]
    if "--unit" not in args:
        base += ["--log", "/dev/null"]
    assert main([*base, *args]) == 2
    assert f"station weights-check: error: {error}" in capsys.readouterr().err
