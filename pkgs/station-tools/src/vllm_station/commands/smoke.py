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
The checks are `vllm_station.api.checks`; the core (`run_smoke`) takes options and returns a `SmokeReport`;
`run` renders it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_station import options, report
from vllm_station.api import ApiClient
from vllm_station.api.args import add_endpoint_args, endpoint_from_args
from vllm_station.api.checks import (
    CHECKS,
    FAIL,
    PASS,
    SKIP,
    WARN,
    CheckResult,
    check_chat,
    check_models,
    check_tool_call,
    check_tool_call_stream,
    skipped,
)
from vllm_station.api.urls import display_url
from vllm_station.errors import EXIT_FAIL, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE

SCHEMA_VERSION = 1


@dataclass
class SmokeOptions:
    base_url: str
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0
    tool_choice: str = "auto"
    ca_file: Path | None = None


@dataclass
class SmokeReport:
    schema: int
    base_url: str
    model: str | None
    tool_choice: str
    timeout_s: float
    result: str  # pass | fail
    exit_code: int
    checks: list[CheckResult]


def _skipped(names: tuple[str, ...], why: str) -> list[CheckResult]:
    return [skipped(n, why) for n in names]


def run_smoke(opts: SmokeOptions, client: Callable[[SmokeOptions], ApiClient] | None = None) -> SmokeReport:
    """Run the four checks in order and return the report (never raises ApiError)."""
    make = client or (lambda o: ApiClient(o.base_url, o.api_key, o.timeout_s, ca_file=o.ca_file))
    checks: list[CheckResult] = []
    model = opts.model
    with make(opts) as api:
        base = api.api_url
        res, model_found, stop = check_models(api, opts.model)
        checks.append(res)
        if stop:
            why = "endpoint unreachable" if stop == EXIT_UNREACHABLE else "the models check failed"
            checks += _skipped(CHECKS[1:], f"not run: {why}")
            return _finish(opts, base, model, checks, stop)
        assert model_found is not None
        model = model_found
        plain_args: dict[str, Any] | None = None
        for name in CHECKS[1:]:
            if any(_unreachable(c) for c in checks):  # the server went away: do not wait on it 3 times
                checks.append(skipped(name, "not run: endpoint unreachable"))
            elif name == "chat":
                checks.append(check_chat(api, model))
            elif name == "tool_call":
                tc, plain_args = check_tool_call(api, model, opts.tool_choice)
                checks.append(tc)
            else:
                checks.append(check_tool_call_stream(api, model, opts.tool_choice, plain_args))
    unreachable = any(_unreachable(c) for c in checks)
    code = (
        EXIT_UNREACHABLE if unreachable else EXIT_FAIL if any(c.result == FAIL for c in checks) else EXIT_OK
    )
    return _finish(opts, base, model, checks, code)


def _unreachable(c: CheckResult) -> bool:
    return c.error == "unreachable"


def _finish(
    opts: SmokeOptions, base: str, model: str | None, checks: list[CheckResult], code: int
) -> SmokeReport:
    return SmokeReport(
        SCHEMA_VERSION,
        display_url(base),
        model,
        opts.tool_choice,
        opts.timeout_s,
        PASS if code == EXIT_OK else FAIL,
        code,
        checks,
    )


# ---- CLI ----------------------------------------------------------------------------------------


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
    opts = SmokeOptions(
        base_url=args.base_url,
        model=args.model,
        api_key=ep.api_key,
        ca_file=ep.ca_file,
        timeout_s=args.timeout,
        tool_choice=args.tool_choice,
    )
    rep = run_smoke(opts)
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
