"""`station bench [sweep|burst|prefill]`: the go-live load test on any OpenAI-compatible endpoint.

    station bench sweep --base-url http://127.0.0.1:8888 --concurrency 1,8,16,32 --warmup 3x --requests 10x
    station bench burst --base-url … --concurrency 1,32,256 --output-len 256 --repeats 3
    station bench prefill --base-url … --lengths 8k,32k,128k
    … --json out.json --csv out.csv --plots plots/ --expect c1.tok_s>=100 --expect failures==0

Exit codes: 0 done (and every --expect held), 1 an expectation failed or no request succeeded,
2 usage, 3 server unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import sys
from pathlib import Path

from vllm_station.api import load_api_key, split_base_url
from vllm_station.bench import expect as expect_mod
from vllm_station.bench.modes import DEFAULT_LEVELS, BenchOptions, Count, execute
from vllm_station.bench.report import render_table, to_csv, to_json
from vllm_station.errors import Unreachable, UsageError

log = logging.getLogger("vllm_station.bench")

MODE_DEFAULTS = {  # warmup, requests, repeats, output_len
    "sweep": ("1x", "4x", 1, 256),
    "burst": ("1", "1", 3, 256),
    "prefill": ("1", "3", 1, 1),
}


def _int_list(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        p = part.strip().lower()
        if not p:
            continue
        try:
            out.append(int(p[:-1]) * 1024 if p.endswith("k") else int(p))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not a number (e.g. 1,8,32 or 8k,32k)") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError("give positive numbers, e.g. 1,8,16,32")
    return out


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (expect_mod.__doc__ or "") + "\n" + (__doc__ or "").split("\n\n", 1)[1]
    parser.add_argument("mode", nargs="?", choices=("sweep", "burst", "prefill"), default="sweep")
    parser.add_argument(
        "--base-url",
        default=os.environ.get("STATION_BASE_URL", "http://127.0.0.1:8000"),
        help="server root or …/v1 (default $STATION_BASE_URL or http://127.0.0.1:8000)",
    )
    parser.add_argument("--model", default=None, help="model name (default: the first of /v1/models)")
    parser.add_argument(
        "--api-key-file",
        metavar="FILE",
        help="file holding the API key (default: $STATION_API_KEY, else $OPENAI_API_KEY, else no key)",
    )
    parser.add_argument(
        "--concurrency",
        "-c",
        type=_int_list,
        default=None,
        help="sweep/burst: concurrency levels (default sweep 1,8,16,32,64,128,256; burst 1,32,256); "
        "prefill: requests in flight (default 1)",
    )
    parser.add_argument(
        "--lengths",
        type=_int_list,
        default=None,
        help="prefill: prompt lengths in tokens (default 8k,32k,128k; k = 1024)",
    )
    parser.add_argument(
        "--warmup",
        default=None,
        help="warm-up requests per level, N or Nx (× concurrency); burst: warm-up bursts "
        "(defaults: sweep 1x, burst 1, prefill 1)",
    )
    parser.add_argument(
        "--requests",
        "-n",
        default=None,
        help="measured requests per repeat, N or Nx (defaults: sweep 4x, prefill 3; burst = C)",
    )
    parser.add_argument(
        "--repeats",
        "-r",
        type=int,
        default=None,
        help="measured repeats per level (defaults: sweep 1, burst 3, prefill 1)",
    )
    parser.add_argument(
        "--input-len", type=int, default=128, help="prompt tokens for sweep/burst (default 128)"
    )
    parser.add_argument(
        "--output-len",
        type=int,
        default=None,
        help="output tokens, fixed with ignore_eos + min_tokens (default 256; prefill 1)",
    )
    parser.add_argument(
        "--no-ignore-eos",
        action="store_true",
        help="let the model stop early (for servers without vLLM's ignore_eos/min_tokens); "
        "output length is then not verified",
    )
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="per-request limit in seconds (default 600)"
    )
    parser.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="local tokenizer dir for exact prompt lengths when the server has no /tokenize",
    )
    parser.add_argument(
        "--scrape-metrics",
        action="store_true",
        help="read the server's /metrics before, during and after each level",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="prompt seed (default: a fresh one per run, recorded in the report; with a fixed seed a "
        "second run repeats the same prompts and the server's prefix cache answers part of them)",
    )
    parser.add_argument(
        "--json", dest="json_out", default=None, help="write the JSON report here ('-' = stdout)"
    )
    parser.add_argument(
        "--csv", dest="csv_out", type=Path, default=None, help="write one CSV row per level here"
    )
    parser.add_argument("--plots", type=Path, default=None, help="write PNG plots into this directory")
    parser.add_argument(
        "--expect",
        action="append",
        default=[],
        metavar="EXPR",
        help="gate, e.g. c1.tok_s>=100, c32.ttft_p50<=1.5, failures==0 (repeatable)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress display on stderr")


def options(args: argparse.Namespace) -> BenchOptions:
    mode: str = args.mode
    d_warm, d_req, d_rep, d_out = MODE_DEFAULTS[mode]
    if mode == "prefill":
        if args.concurrency is not None and len(args.concurrency) != 1:
            raise UsageError("prefill: --concurrency takes one number (requests in flight)")
        levels = args.lengths or DEFAULT_LEVELS["prefill"]
        conc = args.concurrency[0] if args.concurrency else 1
    else:
        if args.lengths is not None:
            raise UsageError(f"--lengths is for prefill mode; {mode} takes --concurrency")
        levels = args.concurrency or DEFAULT_LEVELS[mode]
        conc = 1
    repeats = args.repeats if args.repeats is not None else d_rep
    if repeats < 1:
        raise UsageError("--repeats must be at least 1")
    opts = BenchOptions(
        mode=mode,
        base_url=split_base_url(args.base_url)[0],
        model=args.model,
        api_key=load_api_key(args.api_key_file),
        levels=levels,
        warmup=Count.parse(args.warmup or d_warm),
        requests=Count.parse(args.requests or d_req),
        repeats=repeats,
        concurrency=conc,
        input_len=args.input_len,
        output_len=args.output_len if args.output_len is not None else d_out,
        ignore_eos=not args.no_ignore_eos,
        temperature=args.temperature,
        timeout=args.timeout,
        tokenizer=args.tokenizer,
        scrape=args.scrape_metrics,
        seed=args.seed if args.seed is not None else secrets.randbits(31),
        progress=not args.no_progress,
        expectations=expect_mod.parse(args.expect),
    )
    if opts.requests.resolve(1) < 1:
        raise UsageError("--requests must be at least 1")
    expect_mod.check_levels(opts.expectations, opts.level_names())
    return opts


def run(args: argparse.Namespace) -> int:
    opts = options(args)
    report = asyncio.run(execute(opts))
    to_stdout = args.json_out == "-"
    if args.json_out and not to_stdout:
        Path(args.json_out).write_text(to_json(report))
    if args.csv_out:
        args.csv_out.write_text(to_csv(report))
    if args.plots:
        from vllm_station.bench.plots import write_plots

        for p in write_plots(report, args.plots):
            log.info("wrote %s", p)
    print(render_table(report), file=sys.stderr if to_stdout else sys.stdout)
    if to_stdout:
        sys.stdout.write(to_json(report))
    if report.levels and all(lv.ok == 0 for lv in report.levels):
        if all(set(lv.failures) == {"connect"} for lv in report.levels):
            raise Unreachable(f"{opts.base_url}: no request could connect; is the server up?")
        return 1
    return 0 if report.passed else 1
