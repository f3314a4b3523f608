"""`station smoke` — the operator's go/no-go after every switch.

Four checks against an OpenAI-compatible server, each with a result, a latency and a one-line reason:

1. `models`           GET /v1/models lists the served name (without --model: the single listed model).
2. `chat`             a chat completion returns content (or reasoning content); finish_reason and usage.
3. `tool_call`        get_weather(location, unit) with tool_choice auto|required: exactly one call, type
                      function, name get_weather, arguments a JSON object with a non-empty location.
4. `tool_call_stream` the same call streamed: the name arrives once, the argument fragments join to a JSON
                      object with the same keys as the non-streamed call's and a non-empty location.

Exit: 0 every check passed (warnings allowed), 1 a check failed, 2 usage/config error (e.g. several models
served and no --model, missing key file), 3 the endpoint is unreachable (refused, DNS, connect timeout).
The checks are `vllm_station.api.checks`; the core is the plan (`commands/smoke/plan.py`: options in, a
`SmokeReport` out); `run` renders it.
"""

from __future__ import annotations

import argparse
import sys

from vllm_station import options, report
from vllm_station.api.args import add_endpoint_args, endpoint_from_args
from vllm_station.api.checks import FAIL, PASS, SKIP, WARN
from vllm_station.commands.smoke.plan import Plan, SmokeReport
from vllm_station.errors import EXIT_FAIL, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE
from vllm_station.plans import Target


def configure(parser: argparse.ArgumentParser) -> None:
    add_endpoint_args(parser)
    options.add_model(parser)
    options.add_timeout(parser, default=60.0, what="each request, streams included")
    parser.add_argument(
        "--tool-choice",
        choices=["auto", "required"],
        default="auto",
        help="tool_choice for the get_weather checks (default auto)",
    )
    options.add_json(parser, what="the report (schema in docs/smoke.md)")


def run(args: argparse.Namespace) -> int:
    ep = endpoint_from_args(args)
    plan = Plan(timeout=args.timeout, tool_choice=args.tool_choice)
    rep = plan.run(Target(ep, args.model))
    if args.json:
        report.dump_json(rep)
        for c in rep.checks:  # for people reading CI logs; the table already shows these
            if c.result == FAIL:
                print(f"station smoke: {c.name}: {c.reason}", file=sys.stderr)
    else:
        print(render(rep))
    return rep.exit_code


def render(rep: SmokeReport) -> str:
    head = f"station smoke  {rep.base_url}  model={rep.model or '-'}  tool_choice={rep.tool_choice}"
    rows = [(c.name, c.result.upper(), c.latency_s, c.reason) for c in rep.checks]
    body = report.table(["check", "result", "latency_s", "reason"], rows)
    counts = {r: sum(c.result == r for c in rep.checks) for r in (PASS, WARN, FAIL, SKIP)}
    parts = [f"{counts[r]} {r}" for r in (PASS, WARN, FAIL, SKIP) if counts[r]]
    verdict = {
        EXIT_OK: "GO",
        EXIT_FAIL: "NO-GO",
        EXIT_USAGE: "NO-GO (usage)",
        EXIT_UNREACHABLE: "NO-GO (unreachable)",
    }.get(rep.exit_code, "NO-GO")
    return f"{head}\n{body}\n{verdict}: {', '.join(parts)} (exit {rep.exit_code})"
