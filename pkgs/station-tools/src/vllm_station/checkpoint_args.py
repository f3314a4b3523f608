"""The command-line options that `station verify`, `station download` and `station copy` share: what the
checkpoint must be (`--expect-*`) and, for the two bulk-I/O commands, the NUMA binding (`--membind`)."""

from __future__ import annotations

import argparse

from vllm_station import argtypes
from vllm_station.checkpoint.verification import Expectations, parse_expectations
from vllm_station.membind import bind_memory


def add_expectations(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--expect-arch", metavar="NAME", help="config.json architectures must be [NAME] (A,B: a list)"
    )
    parser.add_argument(
        "--expect-quant-algo", metavar="ALGO", help="quantization_config.quant_algo must be ALGO"
    )
    parser.add_argument(
        "--expect-shards",
        metavar="N",
        type=argtypes.count(hi=1_000_000),
        help="the index must list exactly N shards",
    )


def expectations(args: argparse.Namespace) -> Expectations:
    return parse_expectations(args.expect_arch, args.expect_quant_algo, args.expect_shards)


def add_membind(parser: argparse.ArgumentParser, what: str) -> None:
    bind = parser.add_mutually_exclusive_group()
    bind.add_argument("--membind", default="0", metavar="NODES", help=f"NUMA nodes for {what} (default 0)")
    bind.add_argument("--no-membind", action="store_true", help="do not bind memory (machines without NUMA)")


def membind(args: argparse.Namespace, purpose: str) -> str | None:
    """Bind now (before any I/O) unless --no-membind; the kernel's read-back, e.g. "bind:0"."""
    return None if args.no_membind else bind_memory(args.membind, purpose)
