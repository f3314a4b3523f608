"""`station drain`: take this station out of its gateways' rotation (`station undrain` puts it back).

    station drain [--reason TEXT] [--json]      planned work: new requests get 503, running ones finish
    station drain --stopping                    the serving unit's first ExecStop step (a stop begins)
    station drain --status [--json]             what the gateways see now, changing nothing

The flags and what reads them: vllm_station.drainflag. Draining an already drained station keeps the
first reason and time. Exit codes: 0 done (or already so), 1 the flag could not be written, 2 bad arguments.
"""

from __future__ import annotations

import argparse

from vllm_station import options
from vllm_station.drainflag import drain_flag, render, status, stopping_flag, write_flag
from vllm_station.errors import EXIT_OK


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reason", default="planned work", help="recorded in the flag (shown by --status)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--stopping",
        action="store_true",
        help="the serving unit's stop begins: write the stopping flag (removed with the unit's runtime dir)",
    )
    mode.add_argument("--status", action="store_true", help="show both flags, change nothing")
    options.add_json(parser, what="the status")


def run(args: argparse.Namespace) -> int:
    if args.status:
        changed = False
    elif args.stopping:
        changed = write_flag(stopping_flag(), "the serving unit is stopping")
    else:
        changed = write_flag(drain_flag(), args.reason)
    print(render(status(changed), args.json))
    return EXIT_OK
