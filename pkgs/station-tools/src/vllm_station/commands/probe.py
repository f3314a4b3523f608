"""`station probe` — the synthetic probe a timer runs every few minutes, for Prometheus.

One user, two requests, in order:

1. a streamed chat completion of a fixed length (`--max-tokens`, default 64, with vLLM's `ignore_eos` so
   every run generates the same number of tokens): TTFT (to the first generated text, reasoning included),
   the inter-token latency and the decode rate one user sees, `(tokens − 1) / (last − first token)` — the
   figure behind the recipe's alert "token throughput below 100 tok/s for one user" (145.9 tok/s
   expected), independent of the probe's length — and the whole request's rate, `tokens / request time`;
2. `station smoke`'s get_weather tool call (the same request and the same judgement: one definition,
   `vllm_station.api.checks`).

With `--textfile-dir` the figures replace `station-probe.prom` in node_exporter's textfile directory
(atomically; see `vllm_station.textfile`), failures included: a failed generation exports
`station_probe_success 0` and NaN for its figures, so no alert compares a rate it never measured.

Exit: 0 both passed (a tool-call warning included), 1 one failed, 2 usage, 3 the endpoint is unreachable.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from vllm_station import argtypes, options, report, textfile
from vllm_station.api import ApiClient, ApiError, ChatChunk, checks, collect_stream
from vllm_station.api.args import add_endpoint_args, endpoint_from_args
from vllm_station.api.urls import display_url
from vllm_station.errors import EXIT_FAIL, EXIT_OK, EXIT_UNREACHABLE, UsageError

SCHEMA_VERSION = 1
TEXTFILE = "station-probe.prom"
MESSAGES = [{"role": "user", "content": "Count from 1 to 1000, one number per line, without any other text."}]
MAX_TOKENS_LIMIT = 4096


@dataclass
class ProbeReport:
    schema: int
    base_url: str
    model: str | None
    max_tokens: int
    ok: bool  # the generation worked and produced tokens
    tokens_per_second: float | None  # decode rate: (tokens − 1) / (last − first token)
    request_tokens_per_second: float | None  # tokens / whole request
    ttft_s: float | None
    itl_s: float | None
    completion_tokens: int | None
    duration_s: float
    reason: str
    tool_call: str  # pass | warn | fail | skip
    tool_call_reason: str
    exit_code: int
    at_unix: float


def generate(api: ApiClient, model: str, max_tokens: int) -> tuple[ProbeReport, str | None]:
    """The fixed-length streamed generation: (its figures, error kind or None)."""
    t0 = time.perf_counter()
    chunks: list[ChatChunk] = []
    try:
        extra = {"ignore_eos": True}
        for chunk in api.chat_stream(
            model, MESSAGES, max_tokens=max_tokens, temperature=0, seed=checks.SEED, extra=extra
        ):
            chunks.append(chunk)
    except ApiError as err:
        rep = _report(api, model, max_tokens, time.perf_counter() - t0, False, f"generation failed: {err}")
        return rep, checks.error_kind(err)
    duration = time.perf_counter() - t0
    result = collect_stream(chunks)
    texts = [c.elapsed_s for c in chunks if (c.content or "") + (c.reasoning_content or "")]
    n = result.usage.completion_tokens if result.usage is not None else None
    if not texts or not n:
        why = "no usage" if not n else "no generated text"
        return _report(api, model, max_tokens, duration, False, f"generation returned {why}"), "protocol"
    first, last = texts[0], texts[-1]
    rep = _report(api, model, max_tokens, duration, True, "")
    rep.completion_tokens = n
    rep.ttft_s = round(first, 4)
    rep.request_tokens_per_second = round(n / duration, 2) if duration > 0 else None
    if n > 1 and last > first:
        rep.itl_s = round((last - first) / (n - 1), 5)
        rep.tokens_per_second = round((n - 1) / (last - first), 2)
    rate = f"{rep.tokens_per_second:g} tok/s" if rep.tokens_per_second is not None else "rate unmeasured"
    rep.reason = f"{n} tokens in {duration:.2f} s: {rate} decode (one user), TTFT {first * 1000:.0f} ms" + (
        f", finish_reason {result.finish_reason}" if result.finish_reason != "length" else ""
    )
    return rep, None


def _report(
    api: ApiClient, model: str | None, max_tokens: int, duration: float, ok: bool, reason: str
) -> ProbeReport:
    return ProbeReport(
        SCHEMA_VERSION, display_url(api.api_url), model, max_tokens, ok, None, None, None, None, None,
        round(duration, 4), reason, checks.SKIP, "not run", EXIT_FAIL, time.time(),
    )  # fmt: skip


def run_probe(api: ApiClient, model: str | None, max_tokens: int, tool_choice: str | None) -> ProbeReport:
    """Both requests (the tool call skipped when `tool_choice` is None); never raises ApiError."""
    models, found, stop = checks.check_models(api, model)
    if stop or found is None:
        rep = _report(api, model, max_tokens, models.latency_s or 0.0, False, f"models: {models.reason}")
        rep.exit_code = EXIT_UNREACHABLE if models.error == "unreachable" else stop or EXIT_FAIL
        rep.tool_call_reason = "not run: no model"
        return rep
    rep, error = generate(api, found, max_tokens)
    if tool_choice is not None and error != "unreachable":
        tool, _ = checks.check_tool_call(api, found, tool_choice)
        rep.tool_call, rep.tool_call_reason = tool.result, tool.reason
    elif tool_choice is not None:
        rep.tool_call_reason = "not run: endpoint unreachable"
    tool_ok = tool_choice is None or rep.tool_call in (checks.PASS, checks.WARN)
    if error == "unreachable":
        rep.exit_code = EXIT_UNREACHABLE
    else:
        rep.exit_code = EXIT_OK if rep.ok and tool_ok else EXIT_FAIL
    return rep


def families(rep: ProbeReport) -> list[textfile.Family]:
    F = textfile.Family

    def num(v: float | int | None) -> float:
        return math.nan if v is None else float(v)

    passed = rep.tool_call in (checks.PASS, checks.WARN)
    tool = math.nan if rep.tool_call == checks.SKIP else 1.0 if passed else 0.0
    return [
        F.one(
            "station_probe_success",
            "1 when the probe's fixed-length generation worked",
            1.0 if rep.ok else 0.0,
        ),
        F.one(
            "station_probe_tokens_per_second",
            "Decode rate one user sees: (tokens-1)/(last-first token)",
            num(rep.tokens_per_second),
        ),
        F.one(
            "station_probe_request_tokens_per_second",
            "Generated tokens / whole request time",
            num(rep.request_tokens_per_second),
        ),
        F.one("station_probe_ttft_seconds", "Time to the first generated token", num(rep.ttft_s)),
        F.one(
            "station_probe_inter_token_latency_seconds", "Mean time between generated tokens", num(rep.itl_s)
        ),
        F.one(
            "station_probe_completion_tokens", "Tokens the generation returned", num(rep.completion_tokens)
        ),
        F.one("station_probe_max_tokens", "Tokens the generation asks for (fixed length)", rep.max_tokens),
        F.one(
            "station_probe_tool_call_success", "1 when the get_weather tool call passed (NaN: not run)", tool
        ),
        F.one("station_probe_duration_seconds", "Wall time of the probe's generation", rep.duration_s),
        F.one("station_probe_last_run_timestamp_seconds", "When the probe last ran (Unix time)", rep.at_unix),
    ]


# ---- CLI ------------------------------------------------------------------------------------------------


def configure(parser: argparse.ArgumentParser) -> None:
    add_endpoint_args(parser)
    options.add_model(parser)
    parser.add_argument(
        "--max-tokens",
        type=argtypes.count(hi=MAX_TOKENS_LIMIT),
        default=64,
        help="fixed length of the generation, tokens (default 64)",
    )
    options.add_timeout(parser, default=60.0, what="each request")
    parser.add_argument(
        "--tool-choice",
        choices=["auto", "required", "none"],
        default="auto",
        help="tool_choice of the get_weather call; none: no tool call (default auto)",
    )
    parser.add_argument(
        "--textfile-dir",
        type=Path,  # not checked when parsed: see PLAIN_OUTPUT_OPTIONS in test_architecture_output
        default=None,
        help=f"write {TEXTFILE} here for node_exporter (default: none)",
    )
    options.add_json(parser)


def run(args: argparse.Namespace) -> int:
    if args.textfile_dir is not None and not args.textfile_dir.is_dir():
        raise UsageError(f"--textfile-dir {args.textfile_dir}: not a directory")
    ep = endpoint_from_args(args)
    with ep.client(timeout=args.timeout) as api:
        rep = run_probe(
            api, args.model, args.max_tokens, None if args.tool_choice == "none" else args.tool_choice
        )
    if args.textfile_dir is not None:
        textfile.write(args.textfile_dir, TEXTFILE, families(rep))
    if args.json:
        report.dump_json(rep)
    else:
        tool = f"tool call {rep.tool_call.upper()}: {rep.tool_call_reason}"
        print(f"station probe  {rep.base_url}  model={rep.model or '-'}")
        print(f"generation {'PASS' if rep.ok else 'FAIL'}: {rep.reason}")
        print(tool)
    if rep.exit_code != EXIT_OK:
        print(f"station probe: {rep.reason if not rep.ok else rep.tool_call_reason}", file=sys.stderr)
    return rep.exit_code
