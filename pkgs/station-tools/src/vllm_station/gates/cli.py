"""`station gates {tools,agent,needle}`: the quality gates before go-live (docs/gates.md).

    station gates tools  --base-url http://127.0.0.1:8888 [--cases my-cases/] [--json]
    station gates agent  --base-url … [--repeats 3] [--json]
    station gates needle --base-url … [--lengths 25%,50%,90%] [--depths 0,50,100] [--json]

Exit codes: 0 every case passed, 1 a case failed, 2 usage (bad options, a broken case file, several
models served and no --model), 3 the server is unreachable.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from vllm_station import report
from vllm_station.api.args import add_endpoint_args, endpoint_from_args
from vllm_station.errors import EXIT_FAIL, EXIT_OK, UsageError
from vllm_station.gates.cases import ToolCase, load_tool_cases
from vllm_station.gates.common import Sampling, resolve_model


def _json_object(text: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError("give a JSON object, e.g. '{\"chat_template_kwargs\": {}}'")
    return obj


def _common(sp: argparse.ArgumentParser, timeout: float, max_tokens: int) -> None:
    add_endpoint_args(sp)
    sp.add_argument("--model", metavar="NAME", help="served model name (default: the single model listed)")
    sp.add_argument(
        "--timeout",
        type=float,
        default=timeout,
        metavar="S",
        help=f"seconds per request (default {timeout:g})",
    )
    sp.add_argument(
        "--max-tokens", type=int, default=max_tokens, metavar="N", help=f"per answer (default {max_tokens})"
    )
    sp.add_argument(
        "--extra-body",
        type=_json_object,
        default={},
        metavar="JSON",
        help="more fields for every request, e.g. '{\"chat_template_kwargs\": {\"enable_thinking\": false}}'",
    )
    sp.add_argument("--json", action="store_true", help="print the report as JSON (docs/gates.md)")
    sp.add_argument("--output", type=Path, metavar="FILE", help="also write the JSON report here")
    sp.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (__doc__ or "").split("\n\n", 1)[1]
    verbs = parser.add_subparsers(dest="gate", metavar="GATE", required=True)

    def verb(name: str, help_text: str) -> argparse.ArgumentParser:
        sp = verbs.add_parser(name, help=help_text, description=help_text)
        sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        return sp

    def case_options(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--cases",
            type=Path,
            action="append",
            default=[],
            metavar="PATH",
            help="more case files (a file, or a directory of *.json), in the battery's format (repeatable)",
        )
        sp.add_argument(
            "--no-builtin", action="store_true", help="only the --cases files, not the shipped ones"
        )
        sp.add_argument("--category", action="append", default=[], help="only this category (repeatable)")
        sp.add_argument(
            "--case", action="append", default=[], metavar="ID", help="only this case (repeatable)"
        )

    tools = verb("tools", "the tool-call battery: BFCL-style cases, each non-streamed and streamed")
    _common(tools, 120.0, 1024)
    case_options(tools)
    listing = verb("list", "list the tool-call battery's cases (no server needed)")
    case_options(listing)


def _emit(rep: Any, args: argparse.Namespace, text: str) -> None:
    if args.output is not None:
        try:
            args.output.write_text(json.dumps(report.to_jsonable(rep), indent=2) + "\n")
        except OSError as exc:
            raise UsageError(f"--output {args.output}: {exc.strerror or exc}") from None
    if args.json:
        report.dump_json(rep)
    else:
        print(text)


def _sampling(args: argparse.Namespace) -> Sampling:
    if args.max_tokens < 1:
        raise UsageError("--max-tokens must be at least 1")
    return Sampling(max_tokens=args.max_tokens, extra=dict(args.extra_body))


def _tool_cases(args: argparse.Namespace) -> list[ToolCase]:
    cases = load_tool_cases(args.cases, builtin=not args.no_builtin)
    if args.category:
        known = sorted({c.category for c in cases})
        unknown = [c for c in args.category if c not in known]
        if unknown:
            raise UsageError(
                f"--category {', '.join(unknown)}: the battery's categories are {', '.join(known)}"
            )
        cases = [c for c in cases if c.category in args.category]
    if args.case:
        ids = {c.id for c in cases}
        unknown = [i for i in args.case if i not in ids]
        if unknown:
            raise UsageError(f"--case {', '.join(unknown)}: no such case (see `station gates list`)")
        cases = [c for c in cases if c.id in args.case]
    return cases


def _run_list(args: argparse.Namespace) -> int:
    cases = _tool_cases(args)
    rows = [(c.id, c.category, ", ".join(e.name for e in c.calls) or "(no call)", c.source) for c in cases]
    print(report.table(["case", "category", "expects", "source"], rows))
    return EXIT_OK


def _run_tools(args: argparse.Namespace) -> int:
    from vllm_station.gates.tools import render, run_battery

    cases = _tool_cases(args)
    sampling = _sampling(args)
    ep = endpoint_from_args(args)
    with ep.client(timeout=args.timeout) as api:
        model = resolve_model(api, args.model)
        rep = run_battery(api, model, cases, sampling, quiet=args.quiet)
    _emit(rep, args, render(rep))
    return EXIT_OK if rep.result == "pass" else EXIT_FAIL


def run(args: argparse.Namespace) -> int:
    if args.gate == "tools":
        return _run_tools(args)
    if args.gate == "list":
        return _run_list(args)
    raise UsageError(f"unknown gate {args.gate!r}")  # argparse's choices make this unreachable
