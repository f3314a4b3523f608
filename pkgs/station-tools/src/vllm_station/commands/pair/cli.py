"""`station pair <verb>`: the commands that services.vllm-station.pair's units run.

    station pair wait-worker --url URL --timeout SECONDS --interval SECONDS --worker-address ADDR
    station pair wait-head-stop --head ADDR --port PORT --timeout SECONDS --interval SECONDS --unit UNIT
    station pair beacon --bind ADDR --port PORT --role head|worker --rank N [--stamp FILE]
                        [--head ADDR --master-port PORT]
    station pair rejoin --beacon URL --head ADDR --master-port PORT --unit UNIT --interval S --verdicts N

Exit codes (the family in `vllm_station.errors`): wait-worker 0 the worker is up and its engine waits
for a head, 1 the worker's engine is in (or ended) a session with an earlier head, or something else
answered there, 3 nothing answered; wait-head-stop always 0 (it only delays a stop); beacon 0 on
SIGTERM, 1 the port is in use, 2 bad arguments or a --bind address not on this host. Progress and
verdicts go to stderr as `vllm-station pair: …` lines (the journal of the unit that runs it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vllm_station import argtypes
from vllm_station.commands.pair import order
from vllm_station.errors import UsageError
from vllm_station.polling import check_seconds

PREFIX = "vllm-station pair:"


def say(line: str) -> None:
    print(f"{PREFIX} {line}", file=sys.stderr, flush=True)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "exit: wait-worker 0 up, 1 the worker's engine is not ready for a new head or something else "
        "answers there, 3 nothing answered; wait-head-stop 0; "
        "beacon 0 on SIGTERM, 1 port in use, 2 bad arguments"
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(name: str, help_text: str) -> argparse.ArgumentParser:
        sp = verbs.add_parser(name, help=help_text, description=help_text)
        sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        return sp

    ww = verb("wait-worker", "the head's ExecStartPre: wait until the worker's beacon answers /ready")
    ww.add_argument(
        "--url",
        type=argtypes.http_url,
        required=True,
        help="the worker beacon's /ready, e.g. http://192.168.100.2:29510/ready",
    )
    ww.add_argument(
        "--timeout",
        type=argtypes.seconds(hi=argtypes.WEEK),
        required=True,
        metavar="SECONDS",
        help="give up after this long",
    )
    ww.add_argument(
        "--interval",
        type=argtypes.seconds(hi=3600),
        required=True,
        metavar="SECONDS",
        help="seconds between tries",
    )
    ww.add_argument("--worker-address", required=True, metavar="ADDR", help="the worker's rail address")

    hs = verb("wait-head-stop", "the worker beacon's ExecStop: wait (bounded) until the head has stopped")
    hs.add_argument("--head", required=True, metavar="ADDR", help="the head's rail address (IPv6 bare: ::1)")
    hs.add_argument(
        "--port", type=argtypes.port(), required=True, help="the head's rendezvous port (--master-port)"
    )
    hs.add_argument(
        "--timeout",
        type=argtypes.seconds(zero_ok=True, hi=argtypes.DAY),
        required=True,
        metavar="SECONDS",
        help="stop the worker anyway after this long",
    )
    hs.add_argument(
        "--interval",
        type=argtypes.seconds(hi=3600),
        required=True,
        metavar="SECONDS",
        help="seconds between probes",
    )
    hs.add_argument(
        "--unit",
        type=argtypes.unit_name,
        required=True,
        help="the worker's serving unit: only an active one waits (vllm-station.service)",
    )

    rj = verb(
        "rejoin",
        "the worker's vllm-station-pair-rejoin unit: restart the worker's serving unit when its engine's "
        "session has ended and the head is down (the recipe's order: the head stops first)",
    )
    rj.add_argument(
        "--beacon", type=argtypes.http_url, required=True, metavar="URL", help="the local beacon's /ready"
    )
    rj.add_argument("--head", required=True, metavar="ADDR", help="the head's rail address")
    rj.add_argument(
        "--master-port", type=argtypes.port(), required=True, help="the head's rendezvous port"
    )
    rj.add_argument("--unit", type=argtypes.unit_name, required=True, help="the worker's serving unit")
    rj.add_argument("--systemctl", default="systemctl", help="the systemctl program (default: from PATH)")
    rj.add_argument(
        "--interval", type=argtypes.seconds(hi=3600), default=10.0, metavar="SECONDS",
        help="seconds between looks (10)",
    )  # fmt: skip
    rj.add_argument(
        "--verdicts", type=argtypes.count(hi=100), default=3,
        help="consecutive looks that find the session over before the restart (3)",
    )  # fmt: skip
    rj.add_argument(
        "--runtime", help="container runtime (docker, podman): kill the container after the restart's request"
    )
    rj.add_argument("--container", help="the serving container's name (with --runtime)")
    rj.add_argument(
        "--textfile-dir",
        type=Path,  # not checked when parsed: as the watchdog's (test_architecture_output)
        default=None,
        help="node_exporter textfile directory for station-pair-rejoin.prom (default: none, no export)",
    )
    rj.add_argument("--cycles", type=argtypes.count(hi=10**9), default=None, help=argparse.SUPPRESS)

    bc = verb("beacon", "serve /ready (role, rank, address) and /stamp on this station's rail address")
    bc.add_argument("--bind", required=True, metavar="ADDR", help="this station's rail address")
    bc.add_argument("--port", type=argtypes.port(), required=True, help="the beacon port (pair.beaconPort)")
    bc.add_argument("--role", required=True, choices=("head", "worker"), help="this station's role")
    bc.add_argument(
        "--rank", type=argtypes.count(lo=0, hi=1), required=True, help="this station's rank: head 0, worker 1"
    )
    bc.add_argument(
        "--stamp", type=Path, metavar="FILE", help="the verify stamp /stamp serves (read per request)"
    )
    bc.add_argument(
        "--head",
        metavar="ADDR",
        help="the worker's beacon: the head's rail address; /ready reports the engine's state from its "
        "connection to the head's rendezvous port (with --master-port)",
    )
    bc.add_argument(
        "--master-port", type=argtypes.port(), help="the head's rendezvous port (--master-port), with --head"
    )


def run(args: argparse.Namespace) -> int:
    if args.verb == "wait-worker":
        return order.wait_worker(
            args.url,
            args.worker_address,
            check_seconds("--timeout", args.timeout),
            check_seconds("--interval", args.interval),
            say,
        )
    if args.verb == "wait-head-stop":
        return order.wait_head_stop(
            args.head,
            args.port,
            check_seconds("--timeout", args.timeout, zero_ok=True),
            check_seconds("--interval", args.interval),
            args.unit,
            say,
        )
    if args.verb == "rejoin":
        from vllm_station.commands.pair import rejoin

        opts = rejoin.RejoinOptions(
            args.beacon, args.head, args.master_port, args.unit, args.systemctl,
            check_seconds("--interval", args.interval), args.verdicts, args.runtime, args.container,
            args.textfile_dir,
        )  # fmt: skip
        if (opts.runtime is None) != (opts.container is None):
            raise UsageError("--runtime and --container go together")
        return rejoin.rejoin(opts, say, cycles=args.cycles)
    from vllm_station.commands.pair import beacon  # aiohttp: only the beacon needs it

    cfg = beacon.BeaconConfig.checked(
        args.bind, args.port, args.role, args.rank, args.stamp, args.head, args.master_port
    )
    return beacon.serve(cfg, say)
