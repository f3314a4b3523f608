"""`station simulate`: serve until SIGTERM (exit 0) or SIGINT (130); the emitted schedule on exit."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path

from vllm_station import argtypes, output
from vllm_station.api import load_api_key
from vllm_station.bench.sim.config import ENGINE_MODES, FAIL_KINDS, SimConfig, parse_fail
from vllm_station.bench.sim.server import serve
from vllm_station.bench.sim.tools import MODES as GATES_MODES
from vllm_station.errors import EXIT_INTERRUPTED, EXIT_OK, UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--port",
        type=argtypes.port(zero_ok=True),
        default=8000,
        help="0 picks a free port (printed on stderr)",
    )
    parser.add_argument("--model", default="sim", help="served model name")
    parser.add_argument(
        "--ttft",
        type=argtypes.seconds(zero_ok=True, hi=3600),
        default=0.05,
        help="seconds to the first token (default 0.05)",
    )
    parser.add_argument(
        "--itl",
        type=argtypes.seconds(zero_ok=True, hi=60),
        default=0.01,
        help="seconds between tokens (default 0.01)",
    )
    parser.add_argument(
        "--jitter",
        type=argtypes.seconds(zero_ok=True, hi=60),
        default=0.0,
        help="± uniform jitter per token, seconds",
    )
    parser.add_argument(
        "--prefill-per-token",
        type=argtypes.seconds(zero_ok=True, hi=1),
        default=0.0,
        help="extra TTFT per prompt token, seconds (e.g. 3e-5)",
    )
    parser.add_argument(
        "--output-len",
        type=argtypes.count(hi=10_000_000),
        default=64,
        help="tokens when the request sets no max_tokens",
    )
    parser.add_argument(
        "--eos-after",
        type=argtypes.count(hi=10_000_000),
        default=None,
        help="stop after N tokens unless ignore_eos (emulates EOS)",
    )
    parser.add_argument("--max-model-len", type=argtypes.count(hi=100_000_000), default=131072 + 4096)
    parser.add_argument(
        "--fail", default=None, help="failure injection KIND=RATE,… kinds: " + ", ".join(FAIL_KINDS)
    )
    parser.add_argument("--seed", type=argtypes.count(lo=0, hi=2**32 - 1), default=0)
    parser.add_argument(
        "--engine",
        choices=ENGINE_MODES,
        default="normal",
        help="wedge: /health 200, /metrics frozen, no token ever; serial: one prefill at a time",
    )
    parser.add_argument(
        "--no-tokenize", action="store_true", help="serve no /tokenize (like a non-vLLM server)"
    )
    parser.add_argument(
        "--gates",
        choices=GATES_MODES,
        default=None,
        help="answer station gates' requests like a correct deployment (reference) or through one "
        "serving fault (docs/gates.md)",
    )
    parser.add_argument(
        "--api-key-file", type=Path, default=None, help="require the bearer key in this file on /v1"
    )
    parser.add_argument(
        "--stats-file", type=output.out_file(), default=None, help="write the emitted schedule here on exit"
    )


def options(args: argparse.Namespace) -> SimConfig:
    key = load_api_key(args.api_key_file, env={}) if args.api_key_file else None  # the server's own key
    if args.ttft < 0 or args.itl < 0 or args.jitter < 0:
        raise UsageError("--ttft, --itl and --jitter must be >= 0")
    return SimConfig(
        model=args.model,
        ttft=args.ttft,
        itl=args.itl,
        jitter=args.jitter,
        prefill_per_token=args.prefill_per_token,
        output_len=args.output_len,
        eos_after=args.eos_after,
        max_model_len=args.max_model_len,
        fail=parse_fail(args.fail),
        seed=args.seed,
        tokenize=not args.no_tokenize,
        api_key=key,
        engine=args.engine,
        gates=args.gates,
    )


def run(args: argparse.Namespace) -> int:
    config = options(args)
    if args.stats_file is not None:
        output.check_file("--stats-file", args.stats_file)  # before serving, not on exit
    return asyncio.run(_run(config, args.host, args.port, args.stats_file))


async def _run(config: SimConfig, host: str, port: int, stats_file: Path | None) -> int:
    try:
        runner, sim, actual = await serve(config, host, port)
    except OSError as err:
        raise UsageError(f"cannot listen on {host}:{port}: {err.strerror}; pick another --port") from None
    print(
        f"station simulate: listening on http://{host}:{actual} (model {config.model}, ttft {config.ttft}s, "
        f"itl {config.itl}s)",
        file=sys.stderr,
        flush=True,
    )
    stop = asyncio.Event()
    received: list[int] = []

    def on_signal(signum: int) -> None:
        received.append(signum)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, on_signal, sig)
    await stop.wait()
    await runner.cleanup()
    stats = sim.stats()
    em = stats["emitted"]
    if em["ttft"]["n"]:
        print(
            f"station simulate: emitted {stats['completed']} streams; "
            f"TTFT median {em['ttft']['median']:.4f}s "
            f"(configured {config.ttft}s), token gap median {em['itl_gaps']['median'] or 0:.4f}s "
            f"(configured {config.itl}s), lateness p99 {em['lateness']['p99'] or 0:.4f}s",
            file=sys.stderr,
        )
    if stats_file is not None:
        output.write_text(stats_file, json.dumps(stats, indent=2) + "\n", option="--stats-file")
    return EXIT_INTERRUPTED if received and received[0] == signal.SIGINT else EXIT_OK
