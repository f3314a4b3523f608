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
from vllm_station.errors import EXIT_INTERRUPTED, EXIT_OK, UsageError
from vllm_station.sim import profiles
from vllm_station.sim.config import ENGINE_MODES, FAIL_KINDS, SimConfig, parse_fail
from vllm_station.sim.server import serve
from vllm_station.sim.tools import MODES as GATES_MODES
from vllm_station.sim.tools import REFERENCE

FLAT = profiles.FLAT
FLAT_MAX_MODEL_LEN = 131072 + 4096
FLAT_OPTIONS = ("ttft", "itl", "jitter", "prefill_per_token")
GATES_OFF = "off"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--port",
        type=argtypes.port(zero_ok=True),
        default=8000,
        help="0 picks a free port (printed on stderr)",
    )
    parser.add_argument(
        "--profile",
        choices=profiles.NAMES,
        default=None,
        help=f"timing calibrated to a recipe's measurements (default {profiles.DEFAULT}; "
        f"{FLAT}: the fixed --ttft/--itl schedule, implied by those options; docs/bench.md)",
    )
    parser.add_argument(
        "--time-scale",
        type=argtypes.number(float, lo=0.0, hi=100.0, lo_open=True),
        default=None,
        help="multiply the profile's prefill time (TTFT, the needle's 35 s) by this; decode is never "
        "scaled (default 1: as measured)",
    )
    parser.add_argument("--model", default=None, help="served model name (default: the profile's; flat: sim)")
    parser.add_argument(
        "--ttft",
        type=argtypes.seconds(zero_ok=True, hi=3600),
        default=None,
        help=f"seconds to the first token ({FLAT} schedule; default 0.05)",
    )
    parser.add_argument(
        "--itl",
        type=argtypes.seconds(zero_ok=True, hi=60),
        default=None,
        help=f"seconds between tokens ({FLAT} schedule; default 0.01)",
    )
    parser.add_argument(
        "--jitter",
        type=argtypes.seconds(zero_ok=True, hi=60),
        default=None,
        help=f"± uniform jitter per token, seconds ({FLAT} schedule)",
    )
    parser.add_argument(
        "--prefill-per-token",
        type=argtypes.seconds(zero_ok=True, hi=1),
        default=None,
        help=f"extra TTFT per prompt token, seconds, e.g. 3e-5 ({FLAT} schedule)",
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
    parser.add_argument(
        "--max-model-len",
        type=argtypes.count(hi=100_000_000),
        default=None,
        help=f"context length (default: the profile's; {FLAT}: {FLAT_MAX_MODEL_LEN})",
    )
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
        choices=(*GATES_MODES, GATES_OFF),
        default=REFERENCE,
        help="answer station gates' requests like a correct deployment (reference, the default) or "
        f"through one serving fault (docs/gates.md); {GATES_OFF}: a generic tool call built from the "
        "schema for every request (what the gates score as wrong)",
    )
    parser.add_argument(
        "--api-key-file", type=Path, default=None, help="require the bearer key in this file on /v1"
    )
    parser.add_argument(
        "--stats-file", type=output.out_file(), default=None, help="write the emitted schedule here on exit"
    )


def profile_of(args: argparse.Namespace) -> profiles.Profile | None:
    """The calibrated profile, or None for the fixed schedule (--profile flat, or any of its options)."""
    fixed = [f"--{o.replace('_', '-')}" for o in FLAT_OPTIONS if getattr(args, o) is not None]
    name = args.profile
    if fixed and name not in (None, FLAT):
        raise UsageError(
            f"{', '.join(fixed)} {'sets' if len(fixed) == 1 else 'set'} the fixed schedule; --profile {name} "
            "has its own: drop one of them "
            f"(or say --profile {FLAT})"
        )
    if fixed or name == FLAT:
        if args.time_scale is not None:
            raise UsageError(f"--time-scale scales a profile's prefill; the {FLAT} schedule has none")
        return None
    return profiles.PROFILES[name or profiles.DEFAULT]


def options(args: argparse.Namespace) -> SimConfig:
    key = load_api_key(args.api_key_file, env={}) if args.api_key_file else None  # the server's own key
    profile = profile_of(args)
    flat = SimConfig()
    return SimConfig(
        model=args.model or (profile.model if profile is not None else flat.model),
        ttft=flat.ttft if args.ttft is None else args.ttft,
        itl=flat.itl if args.itl is None else args.itl,
        jitter=flat.jitter if args.jitter is None else args.jitter,
        prefill_per_token=(
            flat.prefill_per_token if args.prefill_per_token is None else args.prefill_per_token
        ),
        profile=profile,
        time_scale=1.0 if args.time_scale is None else args.time_scale,
        output_len=args.output_len,
        eos_after=args.eos_after,
        max_model_len=args.max_model_len
        or (profile.max_model_len if profile is not None else FLAT_MAX_MODEL_LEN),
        fail=parse_fail(args.fail),
        seed=args.seed,
        tokenize=not args.no_tokenize,
        api_key=key,
        engine=args.engine,
        gates=None if args.gates == GATES_OFF else args.gates,
    )


def run(args: argparse.Namespace) -> int:
    config = options(args)
    if args.stats_file is not None:
        output.check_file("--stats-file", args.stats_file)  # before serving, not on exit
    return asyncio.run(_run(config, args.host, args.port, args.stats_file))


def _schedule(config: SimConfig) -> str:
    p = config.profile
    if p is None:
        return f"ttft {config.ttft}s, itl {config.itl}s"
    scale = f", prefill time x{config.time_scale:g}" if config.time_scale != 1.0 else ""
    return (
        f"profile {p.name}: {p.summary}; 1 user {p.decode_rate(1):.1f} tok/s, "
        f"TTFT {p.ttft_alone(profiles.BENCH_PROMPT_TOKENS, config.time_scale):.3f}s{scale}; "
        f"gates {config.gates or GATES_OFF}"
    )


async def _run(config: SimConfig, host: str, port: int, stats_file: Path | None) -> int:
    try:
        runner, sim, actual = await serve(config, host, port)
    except OSError as err:
        raise UsageError(f"cannot listen on {host}:{port}: {err.strerror}; pick another --port") from None
    print(
        f"station simulate: listening on http://{host}:{actual} (model {config.model}, {_schedule(config)})",
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
        configured = (
            f" (configured {config.ttft}s)",
            f" (configured {config.itl}s)",
        ) if config.profile is None else ("", "")  # fmt: skip
        print(
            f"station simulate: emitted {stats['completed']} streams; "
            f"TTFT median {em['ttft']['median']:.4f}s{configured[0]}"
            f", token gap median {em['itl_gaps']['median'] or 0:.4f}s{configured[1]}"
            f", lateness p99 {em['lateness']['p99'] or 0:.4f}s",
            file=sys.stderr,
        )
    if stats_file is not None:
        output.write_text(stats_file, json.dumps(stats, indent=2) + "\n", option="--stats-file")
    return EXIT_INTERRUPTED if received and received[0] == signal.SIGINT else EXIT_OK
