"""`station wait-ready`: block until the server is really serving, for systemd's start-up gate.

Ready means both: GET /health answers 200, and a 1-token completion succeeds (POST /v1/completions with
`max_tokens: 1`; a server without that endpoint — 404 — is probed with a 1-token chat completion instead).
/health alone turns 200 before the engine can serve in some failure modes; the completion proves it can.

Exit codes: 0 ready; 1 not ready before --timeout (the message names the last reason), or a failure that
waiting cannot fix (the server answers 401/403/4xx to the probe: wrong key or model name); 2 bad
arguments; 3 nothing ever answered at the address. Progress goes to stderr every --interval seconds;
`--json` prints the outcome (`WaitReport`) on stdout whatever it is, and exits with the same code.

Under systemd (`ExecStartPost=`) the server's process is `$MAINPID`: when it exits, waiting is over at
once (exit 1), instead of probing a dead address until --timeout.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from vllm_station import argtypes, bounded, options, report
from vllm_station.api import ApiClient, ApiError, ApiUnreachable, HttpStatusError, load_api_key
from vllm_station.api.args import add_endpoint_args
from vllm_station.api.urls import display_url
from vllm_station.errors import EXIT_OK, CheckFailed, StationError, Unreachable, UsageError
from vllm_station.polling import Tick, check_seconds, poll

SCHEMA = "station-wait-ready/1"
PROBE_PROMPT = "Hello"
MAX_REQUEST_TIMEOUT_S = 60.0  # one probe request; a first completion on a cold server can take a while
RETRYABLE_4XX = (408, 409, 425, 429)  # other 4xx answers to the probe will not fix themselves


@dataclass(frozen=True)
class Options:
    base_url: str
    model: str | None = None
    timeout_s: float = 900.0
    interval_s: float = 5.0
    api_key_file: str | None = None
    ca_file: str | None = None
    watch_pid: int | None = None  # give up as soon as this process is gone (the unit's main process)


@dataclass
class Outcome:
    ready: bool
    elapsed_s: float
    attempts: int
    model: str | None
    reason: str  # the last failure, or what succeeded
    reached: bool  # did anything ever answer at the address?
    gave_up: bool = False  # a failure that waiting cannot fix ended the wait early
    exited: bool = False  # the watched server process exited


@dataclass(frozen=True)
class WaitReport:
    """What `--json` prints (docs/wait-ready.md): the outcome, its verdict and the exit code."""

    schema: str
    base_url: str  # as shown: without user:password@
    model: str | None  # the model probed (the first listed when no --model)
    verdict: str  # ready | timeout | refused (waiting will not help) | exited | unreachable
    ready: bool
    reached: bool  # something answered at the address
    elapsed_s: float
    attempts: int
    reason: str  # what succeeded, or the last failure
    exit_code: int


def judge(out: Outcome) -> tuple[str, StationError | None]:
    """The verdict's name, and the error the entry point turns into the message and the exit code."""
    if out.ready:
        return "ready", None
    if out.exited:
        return "exited", CheckFailed(
            f"{out.reason} ({out.elapsed_s:.0f} s, {out.attempts} tries): read its log"
        )
    if not out.reached:
        return "unreachable", Unreachable(
            f"nothing answered within {out.elapsed_s:.0f} s ({out.attempts} tries): {out.reason}"
        )
    if out.gave_up:
        return "refused", CheckFailed(
            f"the server refuses the readiness probe (waiting will not help): {out.reason}"
        )
    return "timeout", CheckFailed(
        f"not ready after {out.elapsed_s:.0f} s ({out.attempts} tries); last reason: {out.reason}"
    )


def configure(parser: argparse.ArgumentParser) -> None:
    add_endpoint_args(parser)
    options.add_model(parser)
    options.add_timeout(parser, default=900.0, what="give up after this long", hi=argtypes.WEEK)
    parser.add_argument(
        "--interval",
        type=argtypes.seconds(hi=3600),
        default=5.0,
        help="seconds between probes and progress lines (5)",
    )
    parser.add_argument(
        "--watch-pid",
        type=argtypes.count(hi=4_194_304),
        help="stop waiting when this process exits (default: $MAINPID, which systemd sets for ExecStartPost)",
    )
    options.add_json(parser, what="the outcome (ready or why not)")


def _probe(api: ApiClient, model: str | None, request_timeout: float) -> tuple[str, str]:
    """One readiness probe: returns (model, description) or raises ApiError / CheckFailed."""
    api.health(timeout=request_timeout)
    if model is None:
        listed = api.models(timeout=request_timeout)
        if not listed:
            raise CheckFailed(f"GET /v1/models at {api.api_url}/models lists no model yet")
        model = listed[0].id
    t0 = time.perf_counter()
    try:
        api.completion(model, PROBE_PROMPT, max_tokens=1, timeout=request_timeout)
        what = "POST /v1/completions"
    except HttpStatusError as err:
        if err.status != 404:
            raise
        # No /v1/completions (a chat-only gateway), or an unknown model: the chat endpoint tells which.
        api.chat(
            model,
            [{"role": "user", "content": PROBE_PROMPT}],
            max_tokens=1,
            temperature=0.0,
            timeout=request_timeout,
        )
        what = "POST /v1/chat/completions"
    return model, f"/health 200 and a 1-token {what} for {model!r} in {time.perf_counter() - t0:.2f} s"


def wait(
    opts: Options,
    *,
    progress: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Probe until ready or --timeout; `progress` gets a line at most every interval."""
    check_seconds("--timeout", opts.timeout_s)
    check_seconds("--interval", opts.interval_s)
    key = load_api_key(opts.api_key_file)
    say = progress or (lambda _line: None)
    reached = False
    reason = "no probe ran"
    model = opts.model

    def probe(api: ApiClient, tick: Tick) -> str | None:
        """One try: "ready", "gave_up" or "exited" ends the wait; None tries again."""
        nonlocal reached, reason, model
        request_timeout = max(1.0, min(MAX_REQUEST_TIMEOUT_S, tick.left_s))
        try:
            model, reason = _probe(api, model, request_timeout)
            reached = True
            return "ready"
        except ApiUnreachable as err:
            reason = str(err)
        except HttpStatusError as err:
            reached = True
            reason = str(err)
            # /health is 200, so the server serves requests: 401/403 (key), 404 (model name) or
            # 400/422 (request) will not fix themselves. A 4xx from /health itself may (a gateway).
            permanent = 400 <= err.status < 500 and err.status not in RETRYABLE_4XX
            if permanent and not err.url.endswith("/health"):
                return "gave_up"
        except ApiError as err:  # timeouts, non-JSON, broken connections: something answered
            reached = True
            reason = str(err)
        except CheckFailed as err:
            reached = True
            reason = str(err)
        if opts.watch_pid is not None and not _alive(opts.watch_pid):
            reason = f"the server process (pid {opts.watch_pid}) exited before it was ready"
            return "exited"
        return None

    with ApiClient(
        opts.base_url,
        api_key=key,
        timeout=MAX_REQUEST_TIMEOUT_S,
        connect_timeout=min(5.0, opts.interval_s),
        ca_file=opts.ca_file,
    ) as api:
        say(f"waiting up to {opts.timeout_s:g} s for {api.root_url} (probe every {opts.interval_s:g} s)")
        polled = poll(
            lambda tick: probe(api, tick),
            timeout_s=opts.timeout_s,
            interval_s=opts.interval_s,
            progress=lambda t: say(f"not ready after {t.elapsed_s:.0f} s (try {t.attempt}): {reason}"),
            clock=clock,
            sleep=sleep,
        )
    return Outcome(
        ready=polled.value == "ready",
        elapsed_s=polled.elapsed_s,
        attempts=polled.attempts,
        model=model,
        reason=reason,
        reached=reached,
        gave_up=polled.value == "gave_up",
        exited=polled.value == "exited",
    )


def _alive(pid: int) -> bool:
    """The process exists and has not exited (a zombie waiting for its parent counts as exited)."""
    try:
        stat = bounded.read_text(f"/proc/{pid}/stat", limit=bounded.SYSFS_LIMIT, errors="replace")
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _watch_pid(arg: int | None) -> int | None:
    if arg is not None:
        if arg <= 0:
            raise UsageError(f"--watch-pid must be a process id, got {arg}")
        return arg
    value = os.environ.get("MAINPID", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def run(args: argparse.Namespace) -> int:
    opts = Options(
        base_url=args.base_url,
        model=args.model,
        timeout_s=args.timeout,
        interval_s=args.interval,
        api_key_file=args.api_key_file,
        ca_file=args.ca_file,
        watch_pid=_watch_pid(args.watch_pid),
    )

    def progress(line: str) -> None:
        print(f"station wait-ready: {line}", file=sys.stderr, flush=True)

    out = wait(opts, progress=progress)
    verdict, error = judge(out)
    if args.json:
        report.dump_json(
            WaitReport(
                schema=SCHEMA,
                base_url=display_url(opts.base_url),
                model=out.model,
                verdict=verdict,
                ready=out.ready,
                reached=out.reached,
                elapsed_s=round(out.elapsed_s, 3),
                attempts=out.attempts,
                reason=out.reason,
                exit_code=EXIT_OK if error is None else error.exit_code,
            )
        )
        sys.stdout.flush()
    elif out.ready:
        print(f"ready after {out.elapsed_s:.1f} s ({out.attempts} tries): {out.reason}", flush=True)
    if error is not None:
        raise error
    return EXIT_OK
