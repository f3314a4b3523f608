"""`station weights-check`: weight memory per rank, from vLLM's model-loading line, vs the expected share.

vLLM's GPU worker logs, once loading is done (vLLM 0.32.0, `vllm/v1/worker/gpu_model_runner.py:5149`;
model runner V2: `vllm/v1/worker/gpu/model_runner.py:424`), on one line::

    (Worker_TP0 pid=4242) INFO 12-01 09:14:07 [gpu_model_runner.py:5149]
        Model loading took 218.4 GiB memory and 95.123456 seconds

The `(NAME pid=N)` tag is `vllm/logger.py`'s `_FORMAT`; a multiprocess worker names itself
`Worker[_DPd][_PPd][_PCPd][_TPd][_DCPd][_EPd]` once its parallel groups exist
(`vllm/v1/executor/multiproc_executor.py`, `setup_proc_title_and_log_prefix`), i.e. before the model
loads: `_TP<n>` is its tensor-parallel rank, and no `_TP` means the engine ran with TP 1. vLLM's CPU
worker logs no memory figure, only `Loading weights took 0.08 seconds`
(`vllm/model_executor/model_loader/default_loader.py:501`).

The expected share of a rank is the checkpoint's weight size / `--tensor-parallel-size`: the
`*.safetensors` sizes listed in the verify stamp of `--checkpoint`, or (without a usable stamp) the
sizes of the `*.safetensors` files on disk, said in the report. Verdicts (docs/weights-check.md):

- FAIL    a rank holds >= 90 % of the whole checkpoint while TP > 1 ("tensor parallelism not
          applied"); or vLLM's engine config says `tensor_parallel_size=1` while N > 1
- WARN    a rank outside ±30 % of its expected share (a skewed split)
- PASS    every rank seen within ±30 % of its share
- SKIP    the CPU build: weights loaded, but it logs no weight memory
- PENDING no model-loading line yet

Exit codes (the family in `vllm_station.errors`): 0 PASS, WARN or SKIP; 1 FAIL; 2 bad arguments or
no checkpoint size; 3 the log could not be read; 4 PENDING. `--wait SECONDS` polls until a verdict.

The assessment (`Scanner`, `assess`) is pure: lines and a checkpoint size in, `WeightsReport` out.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vllm_station import argtypes, options, polling
from vllm_station.checkpoint.stamp import STAMP_NAME, StampError, StampMissing, read_stamp
from vllm_station.errors import EXIT_FAIL, EXIT_OK, EXIT_PENDING, UsageError
from vllm_station.host.journal import log_reader
from vllm_station.report import dump_json, table
from vllm_station.status import Status, worst

GiB = 1024**3
WHOLE_MODEL_FRACTION = 0.90  # a rank with this much of the whole checkpoint: TP did not split it
SHARE_TOLERANCE = 0.30  # a rank further than this from checkpoint / TP: a skewed split
WEIGHT_SUFFIX = ".safetensors"


# --- vLLM's line formats (vLLM 0.32.0; docs/weights-check.md names the source of each) -------------

# `logger.info_once("Model loading took %s GiB memory and %.6f seconds", format_gib(…), …)`
# (v1/worker/gpu_model_runner.py:5149; v1/worker/gpu/model_runner.py:424, `logger.info`). vLLM <= 0.10 printed
# "Model loading took %.4f GiB and %.6f seconds".
_MODEL_LOADING = re.compile(
    r"\bModel loading took (?P<gib>\d+(?:\.\d+)?) GiB(?: memory)? and (?P<secs>\d+(?:\.\d+)?) seconds"
)
# `logger.info_once("Loading weights took %.2f seconds", …)`
# (model_executor/model_loader/default_loader.py:501)
_LOADING_WEIGHTS = re.compile(r"\bLoading weights took (?P<secs>\d+(?:\.\d+)?) seconds")
# `"Starting to load model %s..."` (v1/worker/gpu_model_runner.py:5039, v1/worker/cpu_model_runner.py:68)
_STARTING = re.compile(r"\bStarting to load model\b")
# `"(%(vllm_process_name)s pid=%(process)d) %(levelname)s …"` (logger.py `_FORMAT`); vLLM <= 0.10
# named workers `VllmWorker rank=N`.
_TAG = re.compile(r"\((?P<name>[A-Za-z][^()]*?)\s+pid=(?P<pid>\d+)\)")
_TP_RANK = re.compile(r"_TP(?P<rank>\d+)(?![0-9])|\brank=(?P<old>\d+)\b")
# The CPU worker's own files in the `[%(fileinfo)s:%(lineno)d]` field, or the engine's device config.
_CPU = re.compile(r"\bcpu_(?:model_runner|worker)\.py:\d+\]|\bdevice_config=cpu\b")
# `"Initializing a V1 LLM engine (v%s) with config: %s"` (v1/engine/core.py) lists tensor_parallel_size.
_ENGINE_CONFIG = re.compile(r"\bInitializing a V1 LLM engine\b.*?\btensor_parallel_size=(?P<tp>\d+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# --- checkpoint size ------------------------------------------------------------------------------


@dataclass
class CheckpointSize:
    dir: str
    bytes: int
    files: int
    source: str  # "stamp": the verify stamp's file sizes; "safetensors": the files on disk
    note: str | None = None  # why the stamp was not used


def checkpoint_size(directory: Path) -> CheckpointSize:
    """The checkpoint's weight bytes: the `*.safetensors` sizes the verify stamp lists, or else the
    sizes of the `*.safetensors` files under `directory` (with the reason in `note`). UsageError when
    neither gives a size."""
    if not directory.is_dir():
        raise UsageError(f"--checkpoint {directory} is not a directory")
    try:
        stamp = read_stamp(directory)
    except StampMissing:
        note = f"no verify stamp ({STAMP_NAME})"
    except StampError as err:
        note = f"the verify stamp is unusable ({err.problem})"
    else:
        weights = [f for f in stamp.files if f.path.endswith(WEIGHT_SUFFIX)]
        sizes = [f.size for f in weights if f.size is not None]
        if weights and len(sizes) == len(weights):
            return CheckpointSize(str(directory), sum(sizes), len(weights), "stamp")
        note = (
            f"the verify stamp lists no {WEIGHT_SUFFIX} file"
            if not weights
            else f"the verify stamp has no size for {len(weights) - len(sizes)} {WEIGHT_SUFFIX} file(s)"
        )
    total = 0
    count = 0
    try:
        for path in sorted(directory.rglob(f"*{WEIGHT_SUFFIX}")):
            total += path.stat().st_size
            count += 1
    except OSError as err:
        raise UsageError(
            f"{note}, and the {WEIGHT_SUFFIX} files of {directory} cannot be read: {err}"
        ) from err
    if count == 0:
        raise UsageError(
            f"{note}, and {directory} has no {WEIGHT_SUFFIX} files: no checkpoint size to compare with"
        )
    return CheckpointSize(
        str(directory),
        total,
        count,
        "safetensors",
        f"{note}: summed the {count} {WEIGHT_SUFFIX} file(s) on disk",
    )


# --- the scanner ----------------------------------------------------------------------------------


@dataclass
class RankLoad:
    """One vLLM process's loading, as logged; the verdict fields are set by `assess`."""

    process: str  # vLLM's process name from the log tag ("Worker_TP0"); "?" when the line has no tag
    pid: int | None
    tp_rank: int | None  # from `_TP<n>`; None: the name carries no TP rank (the engine ran TP 1)
    memory_gib: float | None = None  # "Model loading took X GiB"; None: only "Loading weights took"
    load_seconds: float | None = None
    weights_seconds: float | None = None
    line: str = ""
    memory_bytes: int | None = None
    share_of_expected: float | None = None
    share_of_checkpoint: float | None = None
    status: Status | None = None
    note: str = ""


@dataclass
class Scanner:
    """Feed vLLM log lines (any prefix: journald, docker), get the loading of each process."""

    lines_read: int = 0
    cpu: bool = False
    logged_tp: int | None = None
    loading: bool = False  # "Starting to load model" seen
    loads: dict[str, RankLoad] = field(default_factory=dict)  # by process name; a restart's line wins

    def feed_text(self, text: str) -> None:
        for line in text.splitlines():
            self.feed(line)

    def feed(self, raw: str) -> None:
        line = _ANSI.sub("", raw.rstrip("\r\n").replace("\x00", ""))
        self.lines_read += 1
        if not self.cpu and _CPU.search(line):
            self.cpu = True
        if m := _ENGINE_CONFIG.search(line):
            self.logged_tp = int(m["tp"])
        if not self.loading and _STARTING.search(line):
            self.loading = True
        model = _MODEL_LOADING.search(line)
        weights = None if model else _LOADING_WEIGHTS.search(line)
        if model is None and weights is None:
            return
        tag = _TAG.search(line)
        name = tag["name"] if tag else "?"
        pid = int(tag["pid"]) if tag else None
        load = self.loads.get(name)
        if load is None or (load.pid != pid and load.memory_gib is not None):  # a new start of this rank
            load = RankLoad(process=name, pid=pid, tp_rank=_tp_rank(name))
            self.loads[name] = load
        load.pid = pid
        if model is not None:
            load.memory_gib = float(model["gib"])
            load.load_seconds = float(model["secs"])
            load.line = line.strip()
        elif weights is not None:
            load.weights_seconds = float(weights["secs"])
            load.line = load.line or line.strip()


def _tp_rank(name: str) -> int | None:
    m = _TP_RANK.search(name)
    if m is None:
        return None
    return int(m["rank"] if m["rank"] is not None else m["old"])


# --- the verdict ----------------------------------------------------------------------------------


@dataclass
class Thresholds:
    whole_model_fraction: float = WHOLE_MODEL_FRACTION
    share_tolerance: float = SHARE_TOLERANCE


@dataclass
class WeightsReport:
    """The verdict. JSON keys are stable (documented in docs/weights-check.md)."""

    status: Status
    summary: str
    fix: str | None
    source: str
    lines_read: int
    platform: str | None  # "cpu" when the log shows vLLM's CPU worker
    tensor_parallel_size: int
    logged_tensor_parallel_size: int | None  # vLLM's engine config line, when in the log
    checkpoint: CheckpointSize
    expected_bytes_per_rank: int
    thresholds: Thresholds
    ranks: list[RankLoad]
    notes: list[str]
    exit_code: int = 0

    @property
    def final(self) -> bool:
        return self.status is not Status.PENDING


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def _judge(load: RankLoad, ckpt: CheckpointSize, tp: int, expected: int) -> None:
    assert load.memory_gib is not None
    held = round(load.memory_gib * GiB)
    load.memory_bytes = held
    load.share_of_expected = held / expected if expected else None
    load.share_of_checkpoint = held / ckpt.bytes if ckpt.bytes else None
    of_share = load.share_of_expected or 0.0
    of_whole = load.share_of_checkpoint or 0.0
    what = f"{load.process} holds {load.memory_gib:.2f} GiB of weights"
    # the shares compared at 9 decimals (a fraction of a kilobyte of a 200 GiB share): a rank exactly on a
    # documented boundary (90 %, ±30 %) is judged as documented, not by the float error of the division
    if tp > 1 and round(of_whole, 9) >= WHOLE_MODEL_FRACTION:
        load.status = Status.FAIL
        load.note = (
            f"{what} = {_pct(of_whole)} of the whole checkpoint ({_gib(ckpt.bytes)}): tensor parallelism "
            f"not applied (expected {_gib(expected)} per rank with TP {tp})"
        )
    elif round(abs(of_share - 1), 9) > SHARE_TOLERANCE:
        load.status = Status.WARN
        load.note = (
            f"{what}, {_pct(of_share)} of its expected share {_gib(expected)} "
            f"(outside ±{_pct(SHARE_TOLERANCE)}): a skewed split"
        )
    else:
        load.status = Status.PASS
        load.note = f"{what}, {_pct(of_share)} of its expected share {_gib(expected)}"
    if load.tp_rank is not None and load.tp_rank >= tp:
        load.status = worst([load.status, Status.WARN])
        load.note += f"; its TP rank {load.tp_rank} does not exist with --tensor-parallel-size {tp}"


def assess(scanner: Scanner, ckpt: CheckpointSize, tp: int, source: str) -> WeightsReport:
    """The report for what the scanner has seen, against `ckpt` split `tp` ways."""
    expected = ckpt.bytes // tp
    loads = sorted(scanner.loads.values(), key=lambda r: (r.tp_rank is None, r.tp_rank or 0, r.process))
    measured = [r for r in loads if r.memory_gib is not None]
    loaded_cpu = scanner.cpu and any(r.weights_seconds is not None for r in loads)
    notes: list[str] = []

    def report(status: Status, summary: str, fix: str | None) -> WeightsReport:
        code = {Status.FAIL: EXIT_FAIL, Status.PENDING: EXIT_PENDING}.get(status, EXIT_OK)
        return WeightsReport(
            status=status,
            summary=summary,
            fix=fix,
            source=source,
            lines_read=scanner.lines_read,
            platform="cpu" if scanner.cpu else None,
            tensor_parallel_size=tp,
            logged_tensor_parallel_size=scanner.logged_tp,
            checkpoint=ckpt,
            expected_bytes_per_rank=expected,
            thresholds=Thresholds(),
            ranks=loads,
            notes=notes,
            exit_code=code,
        )

    if ckpt.note:
        notes.append(f"checkpoint size: {ckpt.note}")
    if not measured and not loaded_cpu:
        started = "weights are loading" if loads or scanner.loading else "loading has not started"
        return report(
            Status.PENDING,
            f"no 'Model loading took … GiB' line yet ({started}; {scanner.lines_read} line(s) read)",
            "wait: vLLM logs it once the weights are on the GPU (minutes for GLM-5.3); pass --wait SECONDS",
        )
    for load in measured:
        _judge(load, ckpt, tp, expected)
    for load in loads:
        if load.tp_rank is None and load.memory_gib is not None and tp > 1:
            notes.append(
                f"{load.process}'s log tag names no TP rank: that vLLM ran with tensor parallel size 1"
            )
    seen = sorted({r.tp_rank for r in measured if r.tp_rank is not None})
    if measured and tp > 1 and len(seen) < tp:
        notes.append(
            f"TP rank(s) {', '.join(map(str, seen)) or 'none'} seen of {tp}: vLLM logs this line once per "
            "node (its local first rank), so each station's journal shows its own rank"
        )
    statuses = [r.status for r in measured if r.status is not None]
    status = worst(statuses)  # SKIP: none measured (vLLM's CPU build logs no weight memory)
    judged = [r for r in measured if r.status is status]
    if status is Status.SKIP:
        secs = next((r.weights_seconds for r in loads if r.weights_seconds is not None), 0.0)
        summary = (
            f"vLLM's CPU build logs no weight memory ('Loading weights took {secs:.2f} seconds' only): "
            f"nothing to compare with the expected {_gib(expected)} per rank"
        )
        fix: str | None = "run on the GPU build (the stations) for a verdict"
    elif status is Status.PASS:
        summary = (
            "; ".join(f"{r.process} {r.memory_gib:.2f} GiB" for r in measured)
            + f": within ±{_pct(SHARE_TOLERANCE)} of the expected {_gib(expected)} per rank "
            f"({_gib(ckpt.bytes)} / TP {tp})"
        )
        fix = None
    elif status is Status.WARN:
        summary = "; ".join(r.note for r in judged)
        fix = (
            "compare with the other station's `station weights-check`; a checkpoint other than the verified "
            "one, another quantization, or extra layers loaded (MTP/draft) change the figure"
        )
    else:
        summary = "; ".join(r.note for r in judged)
        fix = (
            f"start vLLM with --tensor-parallel-size {tp} across both stations (the engine line "
            "'tensor_parallel_size=' in the log says what it ran with); `station preflight --only "
            "pair-workers` shows which worker holds this GPU"
        )
    if scanner.logged_tp is not None and scanner.logged_tp != tp:
        mismatch = (
            f"vLLM's engine config says tensor_parallel_size={scanner.logged_tp}, --tensor-parallel-size {tp}"
        )
        if scanner.logged_tp < tp and scanner.logged_tp == 1 and status is not Status.FAIL:
            status = Status.FAIL
            summary = f"tensor parallelism not applied: {mismatch}"
            fix = f"start vLLM with --tensor-parallel-size {tp} (and the pair's --nnodes 2 on both stations)"
        elif status in (Status.PASS, Status.SKIP):
            status = Status.WARN
            summary = f"{mismatch}: the expected share assumes the wrong TP size; {summary}"
            fix = "pass the --tensor-parallel-size the unit starts vLLM with"
        else:
            notes.append(mismatch)
    return report(status, summary, fix)


def scan(text: str, ckpt: CheckpointSize, tp: int, source: str = "-") -> WeightsReport:
    scanner = Scanner()
    scanner.feed_text(text)
    return assess(scanner, ckpt, tp, source)


def poll(
    read: Callable[[], tuple[str, str]],
    ckpt: CheckpointSize,
    tp: int,
    wait: float | None,
    interval: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WeightsReport:
    """Read and assess; with `wait`, re-read every `interval` s until a verdict or the time is up."""

    def reading() -> WeightsReport:
        text, label = read()
        return scan(text, ckpt, tp, label)

    latest = polling.poll_latest(
        reading, final=lambda r: r.final, wait_s=wait, interval_s=interval, clock=clock, sleep=sleep
    )
    report = latest.value
    if latest.timed_out:
        report.summary = polling.still_pending(report.summary, latest.wait_s)
    return report


# --- CLI ------------------------------------------------------------------------------------------


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "exit: 0 PASS, WARN (a skewed split) or SKIP (CPU build: no memory figure); 1 FAIL (a rank holds "
        "the whole model: tensor parallelism not applied); 2 bad arguments or no checkpoint size; 3 the "
        "log could not be read; 4 PENDING (no model-loading line yet). See docs/weights-check.md."
    )
    options.add_log_source(parser.add_mutually_exclusive_group(required=True))
    parser.add_argument(
        "--checkpoint",
        required=True,
        metavar="DIR",
        help="the checkpoint directory: the *.safetensors sizes its verify stamp lists (else the files')",
    )
    parser.add_argument(
        "--tensor-parallel-size",
        required=True,
        type=argtypes.count(hi=1024),
        metavar="N",
        help="the TP size vLLM runs with (2 for the pair): each rank's expected share is checkpoint / N",
    )
    options.add_log_wait(parser, until="the model-loading line appears")
    options.add_all_invocations(parser)
    options.add_json(parser)


def run(args: argparse.Namespace) -> int:
    tp = args.tensor_parallel_size
    if tp < 1:
        raise UsageError(f"--tensor-parallel-size must be 1 or more, got {tp}")
    if args.wait is not None:
        polling.check_seconds("--wait", args.wait, zero_ok=True)
    polling.check_seconds("--interval", args.interval)
    ckpt = checkpoint_size(Path(args.checkpoint))
    log_file = Path(args.log) if args.log is not None else None
    read = log_reader(args.unit, log_file, all_invocations=args.all_invocations, command="weights-check")
    report = poll(read, ckpt, tp, args.wait, args.interval)
    if args.json:
        dump_json(report)
    else:
        print(render(report))
    if report.status is Status.WARN:
        print(f"station weights-check: WARN: {report.summary}", file=sys.stderr)
    return report.exit_code


def render(report: WeightsReport) -> str:
    ck = report.checkpoint
    origin = "verify stamp" if ck.source == "stamp" else f"{WEIGHT_SUFFIX} files on disk"
    lines = [
        f"{report.status.value:<8}{report.summary}",
        f"  source:     {report.source} ({report.lines_read} lines)"
        + (" — vLLM CPU build" if report.platform == "cpu" else ""),
        f"  checkpoint: {ck.dir}: {_gib(ck.bytes)} in {ck.files} {WEIGHT_SUFFIX} file(s) ({origin})",
        f"  expected:   {_gib(report.expected_bytes_per_rank)} per rank (TP {report.tensor_parallel_size}); "
        f"WARN outside ±{_pct(SHARE_TOLERANCE)}, FAIL at >= {_pct(WHOLE_MODEL_FRACTION)} of the whole "
        "checkpoint",
    ]
    if report.ranks:
        rows = [
            [
                r.process,
                str(r.pid) if r.pid is not None else "-",
                str(r.tp_rank) if r.tp_rank is not None else "-",
                f"{r.memory_gib:.2f}" if r.memory_gib is not None else "-",
                f"{r.share_of_expected * 100:.0f}" if r.share_of_expected is not None else "-",
                f"{r.load_seconds or r.weights_seconds or 0:.2f}",
                r.status.value if r.status is not None else "-",
            ]
            for r in report.ranks
        ]
        headers = ["process", "pid", "TP rank", "weights GiB", "% of share", "load s", "verdict"]
        lines.extend("  " + row for row in table(headers, rows).splitlines())
    lines.extend(f"  note:       {note}" for note in report.notes)
    if report.fix:
        lines.append(f"  fix:        {report.fix}")
    return "\n".join(lines)
