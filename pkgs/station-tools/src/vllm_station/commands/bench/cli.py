"""`station bench [sweep|burst|prefill]`: the go-live load test on any OpenAI-compatible endpoint.

    station bench sweep --base-url http://127.0.0.1:8888 --concurrency 1,8,16,32 --warmup 3x --requests 10x
    station bench burst --base-url … --concurrency 1,32,256 --output-len 256 --repeats 3
    station bench prefill --base-url … --lengths 8k,32k,128k
    … --output out.json --csv out.csv --plots plots/ --expect c1.tok_s>=100 --expect failures==0
    station bench sweep … --json > out.json      # the JSON report on stdout, the table on stderr
    station bench sweep … --prompts coding.jsonl --no-ignore-eos --save-responses responses/

Exit codes: 0 done (and every --expect held); 1 an expectation failed, no request succeeded, /v1/models
did not answer with a model list (401/403/429/…), or an output could not be written after the run;
2 usage (also: an out-of-range number, a bad --prompts file, an output path that cannot be written —
all before anything is sent); 3 server unreachable; 130 Ctrl-C (the outputs hold what finished).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import secrets
import sys
from collections.abc import Callable
from pathlib import Path

from vllm_station import argtypes, output, thresholds
from vllm_station import options as shared_options  # `options()` below builds BenchOptions
from vllm_station.api.args import add_endpoint_args, endpoint_from_args
from vllm_station.commands.bench import dataset, outputs
from vllm_station.commands.bench import expect as expect_mod
from vllm_station.commands.bench.modes import (
    DEFAULT_LEVELS,
    MAX_CONCURRENCY,
    MAX_COUNT,
    MAX_LEVELS,
    MAX_OUTPUT_LEN,
    MAX_PER_USER,
    MAX_REPEATS,
    MAX_TOKENS,
    BenchOptions,
    Count,
    check_budgets,
    execute,
    plan,
)
from vllm_station.commands.bench.report import BenchReport, render_table, to_csv, to_json
from vllm_station.errors import EXIT_INTERRUPTED, StationError, Unreachable, UsageError
from vllm_station.redact import redact

log = logging.getLogger("vllm_station.commands.bench")

MODE_DEFAULTS = {  # warmup, requests, repeats, output_len
    "sweep": ("1x", "4x", 1, 256),
    "burst": ("1", "1", 3, 256),
    "prefill": ("1", "3", 1, 1),
}

# Ranges and budgets: bench.modes holds them (golive's bench gate is held to the same ones).
MAX_TIMEOUT = argtypes.DAY
MAX_SEED = 2**32 - 1


MODES = ("sweep", "burst", "prefill")


def _mode(text: str) -> str:
    """The positional mode; anything else is a usage error that says what `--json` is now, so that
    `station bench --json out.json` (the old form, `--json FILE`) stops with a hint and writes nothing."""
    if text in MODES:
        return text
    raise argparse.ArgumentTypeError(
        f"invalid mode {text!r} (choose from {', '.join(MODES)}); note: --json is a switch (the report as "
        "JSON on stdout) — to write the report to a file, use --output FILE"
    )


def _int_list(hi: int, *, k: bool) -> Callable[[str], list[int]]:
    """`1,8,32` (or with `k`: `8k,32k` = ×1024): 1…hi each, at most MAX_LEVELS of them."""
    return argtypes.int_list(hi, k=k, max_items=MAX_LEVELS)


def _count(lo: int) -> Callable[[str], str]:
    """`N` (lo…MAX_COUNT) or `Nx` (× concurrency, lo…MAX_PER_USER); the checked text (options() makes
    it a `Count`)."""
    return argtypes.request_count(lo=lo, hi=MAX_COUNT, per_user_hi=MAX_PER_USER)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (thresholds.__doc__ or "") + "\n" + (__doc__ or "").split("\n\n", 1)[1]
    parser.add_argument("mode", nargs="?", type=_mode, choices=MODES, default="sweep")
    add_endpoint_args(parser)
    shared_options.add_model(parser)
    parser.add_argument(
        "--concurrency",
        "-c",
        type=_int_list(MAX_CONCURRENCY, k=False),
        default=None,
        help=f"sweep/burst: concurrency levels, 1…{MAX_CONCURRENCY} each (default sweep "
        "1,8,16,32,64,128,256; burst 1,32,256); prefill: requests in flight (default 1)",
    )
    parser.add_argument(
        "--lengths",
        type=_int_list(MAX_TOKENS, k=True),
        default=None,
        help="prefill: prompt lengths in tokens, 1…4096k each (default 8k,32k,128k; k = 1024)",
    )
    parser.add_argument(
        "--warmup",
        type=_count(0),
        default=None,
        help=f"warm-up requests per level, N (0…{MAX_COUNT}) or Nx (× concurrency, up to "
        f"{MAX_PER_USER}x); burst: warm-up bursts (defaults: sweep 1x, burst 1, prefill 1)",
    )
    parser.add_argument(
        "--requests",
        "-n",
        type=_count(1),
        default=None,
        help=f"measured requests per repeat, N (1…{MAX_COUNT}) or Nx (defaults: sweep 4x, prefill 3; "
        "burst = C)",
    )
    parser.add_argument(
        "--repeats",
        "-r",
        type=argtypes.count(hi=MAX_REPEATS),
        default=None,
        help=f"measured repeats per level, 1…{MAX_REPEATS} (defaults: sweep 1, burst 3, prefill 1)",
    )
    parser.add_argument(
        "--input-len",
        type=argtypes.count(hi=MAX_TOKENS),
        default=None,
        help=f"prompt tokens for sweep/burst (default 128; 1…{MAX_TOKENS})",
    )
    parser.add_argument(
        "--output-len",
        type=argtypes.count(hi=MAX_OUTPUT_LEN),
        default=None,
        help=f"output tokens, fixed with ignore_eos + min_tokens (default 256; prefill 1; "
        f"1…{MAX_OUTPUT_LEN})",
    )
    parser.add_argument(
        "--no-ignore-eos",
        action="store_true",
        help="let the model stop early (for servers without vLLM's ignore_eos/min_tokens); "
        "output length is then not verified",
    )
    parser.add_argument(
        "--temperature",
        type=argtypes.number(float, lo=0.0, hi=2.0),
        default=0.0,
        help="sampling temperature, 0…2 (default 0)",
    )
    shared_options.add_timeout(parser, default=600.0, what="each request", hi=MAX_TIMEOUT)
    parser.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="local tokenizer dir for exact prompt lengths when the server has no /tokenize",
    )
    parser.add_argument(
        "--prompts",
        type=Path,
        default=None,
        metavar="FILE.jsonl",
        help="sweep/burst: replay these prompts (one OpenAI messages list, or ShareGPT conversation, "
        "per line) instead of generated ones; see docs/bench.md",
    )
    parser.add_argument(
        "--scrape-metrics",
        action="store_true",
        help="read the server's /metrics before, during and after each level",
    )
    parser.add_argument(
        "--seed",
        type=argtypes.count(lo=0, hi=MAX_SEED),
        default=None,
        help="prompt seed (default: a fresh one per run, recorded in the report; with a fixed seed a "
        "second run repeats the same prompts and the server's prefix cache answers part of them)",
    )
    shared_options.add_json(parser, what="the report (the table goes to stderr then)")
    shared_options.add_output(parser)
    parser.add_argument(
        "--csv", dest="csv_out", type=output.out_file(), default=None, help="write one CSV row per level here"
    )
    parser.add_argument(
        "--plots", type=output.out_dir(), default=None, help="write PNG plots into this directory"
    )
    parser.add_argument(
        "--save-responses",
        type=output.out_dir(),
        default=None,
        metavar="DIR",
        help="keep every raw response with its timings: one JSONL file per level and phase in DIR",
    )
    parser.add_argument(
        "--expect",
        action="append",
        default=[],
        metavar="EXPR",
        help="gate, e.g. c1.tok_s>=100, c32.ttft_p50<=1.5, failures==0 (repeatable)",
    )
    shared_options.add_quiet(parser)


def _check_budgets(opts: BenchOptions) -> None:
    """What one level holds in memory, from the plan: a usage error naming the options to lower."""
    check_budgets(opts)


def _check_connections(max_concurrency: int) -> None:
    """Enough file descriptors for the connections (raising the soft limit up to the hard one)."""
    need = max_concurrency + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard == resource.RLIM_INFINITY or hard >= need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        return
    raise UsageError(
        f"--concurrency {max_concurrency} needs {need} open files; this process may open {hard} "
        "(raise `ulimit -n`, or lower --concurrency)"
    )


def _check_outputs(args: argparse.Namespace) -> None:
    """Every output can be written: before the first request, not after the run."""
    if args.output is not None:
        outputs.check_file("--output", args.output)
    if args.csv_out is not None:
        outputs.check_file("--csv", args.csv_out)
    if args.plots is not None:
        outputs.check_dir("--plots", args.plots)
        outputs.check_plots_backend()
    if args.save_responses is not None:
        outputs.check_dir("--save-responses", args.save_responses)
    if args.prompts is not None:
        for option, out in (("--output", args.output), ("--csv", args.csv_out)):
            if out is not None and out.exists() and out.resolve() == args.prompts.resolve():
                raise UsageError(f"{option} {out} is the --prompts file: it would be overwritten")


def options(args: argparse.Namespace) -> BenchOptions:
    mode: str = args.mode
    d_warm, d_req, d_rep, d_out = MODE_DEFAULTS[mode]
    if mode == "prefill":
        if args.concurrency is not None and len(args.concurrency) != 1:
            raise UsageError("prefill: --concurrency takes one number (requests in flight)")
        if args.prompts is not None:
            raise UsageError("--prompts is for sweep and burst; prefill builds prompts of --lengths tokens")
        levels = args.lengths or DEFAULT_LEVELS["prefill"]
        conc = args.concurrency[0] if args.concurrency else 1
    else:
        if args.lengths is not None:
            raise UsageError(f"--lengths is for prefill mode; {mode} takes --concurrency")
        levels = args.concurrency or DEFAULT_LEVELS[mode]
        conc = 1
    if args.prompts is not None and args.input_len is not None:
        raise UsageError(
            "--input-len and --prompts exclude each other: the file's prompts have their own length"
        )
    endpoint = endpoint_from_args(args)
    opts = BenchOptions(
        mode=mode,
        base_url=endpoint.root_url,
        model=args.model,
        api_key=endpoint.api_key,
        ca_file=str(endpoint.ca_file) if endpoint.ca_file else None,
        levels=levels,
        warmup=Count.parse(args.warmup or d_warm),
        requests=Count.parse(args.requests or d_req),
        repeats=args.repeats if args.repeats is not None else d_rep,
        concurrency=conc,
        input_len=args.input_len if args.input_len is not None else 128,
        output_len=args.output_len if args.output_len is not None else d_out,
        ignore_eos=not args.no_ignore_eos,
        temperature=args.temperature,
        timeout=args.timeout,
        tokenizer=args.tokenizer,
        scrape=args.scrape_metrics,
        seed=args.seed if args.seed is not None else secrets.randbits(31),
        progress=not args.quiet,
        expectations=expect_mod.parse(args.expect),
        prompts_file=args.prompts,
        save_responses=args.save_responses,
    )
    expect_mod.check_levels(opts.expectations, opts.level_names())
    _check_budgets(opts)
    _check_connections(max(lv.concurrency for lv in plan(opts)))
    return opts


def write_outputs(args: argparse.Namespace, report: BenchReport) -> None:
    """The table, and every requested output; all of them even when one fails (then: an error)."""
    to_stdout = bool(args.json)
    json_text = redact(to_json(report))
    written = outputs.Written()
    if args.output is not None:
        outputs.write_file(args.output, json_text, written, "--output")
    if args.csv_out:
        outputs.write_file(args.csv_out, redact(to_csv(report)), written, "--csv")
    if args.plots:
        from vllm_station.commands.bench.plots import write_plots

        try:
            written.paths.extend(write_plots(report, args.plots))
        except output.OutputError as exc:  # names the option and the file itself
            written.failed.append(str(exc))
        except OSError as exc:
            written.failed.append(f"--plots {args.plots}: {exc.strerror or exc}")
    print(redact(render_table(report)), file=sys.stderr if to_stdout else sys.stdout)
    if to_stdout:
        sys.stdout.write(json_text)
    if written.paths:  # where the files went: the operator should not have to guess
        print("station bench: wrote " + ", ".join(str(p) for p in written.paths), file=sys.stderr)
    if written.failed:
        outputs.rescue(json_text, written)


def run(args: argparse.Namespace) -> int:
    opts = options(args)
    _check_outputs(args)
    prompt_file = dataset.load(opts.prompts_file) if opts.prompts_file is not None else None
    report = asyncio.run(execute(opts, prompt_file))
    try:
        write_outputs(args, report)
    except StationError as err:
        if not report.partial:
            raise
        print(f"station bench: error: {err}", file=sys.stderr)  # still the Ctrl-C's 130
    if report.partial:
        print(
            f"station bench: interrupted during {report.interrupted_during}; "
            "the outputs hold the levels that finished",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    if report.levels and all(lv.ok == 0 for lv in report.levels):
        if all(set(lv.failures) == {"connect"} for lv in report.levels):
            raise Unreachable(f"{opts.base_url}: no request could connect; is the server up?")
        return 1
    return 0 if report.passed else 1
