"""`station gates {tools,agent,needle}`: the quality gates before go-live (docs/gates.md).

    station gates tools  --base-url http://127.0.0.1:8888 [--cases my-cases/] [--json]
    station gates agent  --base-url … [--repeats 3] [--json]
    station gates needle --base-url … [--lengths 25%,50%,90%] [--depths 0,50,100] [--json]

Which key: direct to vLLM, its own key (serve.apiKeyFile), if any. Through services.vllm-station.gateway,
`tools` and `agent` take any key; `needle` needs a key with `role = "operator"` (it counts prompts with
/tokenize, which the gateway forwards for operator keys only: a user key gets 403).

Exit codes: 0 every case passed, 1 a case failed, 2 usage (bad options, a broken case file, several
models served and no --model), 3 the server is unreachable.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vllm_station import argtypes, bounded, options, output, report
from vllm_station.api.args import add_endpoint_args, endpoint_from_args
from vllm_station.api.served import MAX_CONTEXT, resolve_model
from vllm_station.batteries.cases import ToolCase, load_tool_cases
from vllm_station.batteries.needles import (
    DEFAULT_DEPTHS,
    DEFAULT_LENGTHS,
    depths_option,
    lengths_option,
    parse_depths,
)
from vllm_station.batteries.tasks import load_agent_tasks
from vllm_station.commands.gates.agent import DEFAULT_MAX_TURNS
from vllm_station.commands.gates.common import INTERRUPTED, Sampling
from vllm_station.commands.gates.needle import VARIANTS
from vllm_station.commands.gates.plan import AgentPlan, NeedlePlan, ToolsPlan
from vllm_station.errors import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE, UsageError
from vllm_station.plans import Target

MAX_TOKENS = 1_000_000


def _json_object(text: str) -> dict[str, Any]:
    try:
        obj = bounded.loads_json(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError("give a JSON object, e.g. '{\"chat_template_kwargs\": {}}'")
    return obj


def _common(sp: argparse.ArgumentParser, timeout: float, max_tokens: int) -> None:
    add_endpoint_args(sp)
    options.add_model(sp)
    options.add_timeout(sp, default=timeout, what="each request")
    sp.add_argument(
        "--max-tokens",
        type=argtypes.count(hi=MAX_TOKENS),
        default=max_tokens,
        metavar="N",
        help=f"per answer (default {max_tokens})",
    )
    sp.add_argument(
        "--extra-body",
        type=_json_object,
        default={},
        metavar="JSON",
        help='more fields for every request, e.g. \'{"chat_template_kwargs": {"enable_thinking": false}}\'',
    )
    options.add_json(sp, what="the report (docs/gates.md)")
    options.add_output(sp)
    options.add_quiet(sp)


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
    agent = verb("agent", "the agent battery: multi-step tasks against a stateful tool environment")
    _common(agent, 120.0, 1024)
    agent.add_argument(
        "--tasks",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="more task files (a file, or a directory of *.json), in the battery's format (repeatable)",
    )
    agent.add_argument(
        "--no-builtin", action="store_true", help="only the --tasks files, not the shipped ones"
    )
    agent.add_argument(
        "--task", action="append", default=[], metavar="ID", help="only this task (repeatable)"
    )
    agent.add_argument(
        "--repeats",
        type=argtypes.count(hi=100),
        default=1,
        metavar="K",
        help="trials per task, for pass^k (default 1)",
    )
    agent.add_argument(
        "--max-turns",
        type=argtypes.count(hi=100),
        default=DEFAULT_MAX_TURNS,
        metavar="N",
        help=f"answers per trial (default {DEFAULT_MAX_TURNS})",
    )
    agent.add_argument(
        "--no-stream", action="store_true", help="ask non-streamed (default: streamed, as agents do)"
    )
    needle = verb(
        "needle", "long-context retrieval: needles at exact prompt lengths up to 90 percent of max_model_len"
    )
    _common(needle, 900.0, 256)
    needle.add_argument(
        "--lengths",
        type=lengths_option,
        default=",".join(DEFAULT_LENGTHS),
        help="prompt lengths: N%% of max_model_len, Nk (x1024) or tokens (default "
        + ",".join(DEFAULT_LENGTHS).replace("%", "%%")
        + ")",
    )
    needle.add_argument(
        "--depths",
        type=depths_option,
        default=",".join(map(str, DEFAULT_DEPTHS)),
        help="needle depths in percent (default 0,50,100)",
    )
    needle.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"which of {', '.join(VARIANTS)} (default all)"
    )
    needle.add_argument(
        "--max-model-len",
        type=argtypes.count(lo=64, hi=MAX_CONTEXT),
        default=None,
        metavar="N",
        help="when /v1/models does not say (vLLM does)",
    )
    needle.add_argument(
        "--calibration-cache",
        type=Path,
        default=None,
        metavar="FILE",
        help="the /tokenize calibration file (default ~/.cache/vllm-station/needle-calibration.json)",
    )
    needle.add_argument("--no-calibration-cache", action="store_true", help="calibrate afresh, keep nothing")
    needle.add_argument(
        "--seed",
        type=argtypes.count(lo=0, hi=2**32 - 1),
        default=0,
        help="haystack and needle seed (default 0)",
    )
    listing = verb("list", "list the batteries' cases and tasks (no server needed)")
    case_options(listing)
    listing.add_argument(
        "--tasks", type=Path, action="append", default=[], metavar="PATH", help="more task files"
    )


def _emit(rep: Any, args: argparse.Namespace, text: str) -> int:
    """Print and write the report (a partial one too: Ctrl-C, a server gone); the exit code."""
    if args.output is not None:
        output.write_json(args.output, rep, option="--output")
    if args.json:
        report.dump_json(rep)
    else:
        print(text)
    if getattr(rep, "partial", False):
        print(f"station gates {args.gate}: {rep.stopped}; the report holds what ran", file=sys.stderr)
        return EXIT_INTERRUPTED if rep.stopped == INTERRUPTED else EXIT_UNREACHABLE
    return EXIT_OK if rep.result == "pass" else EXIT_FAIL


def _sampling(args: argparse.Namespace) -> Sampling:
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
    tasks = load_agent_tasks(args.tasks, builtin=not args.no_builtin)
    print()
    print(report.table(["task", "domain", "reference turns", "source"],
                       [(t.id, t.domain, len(t.reference), t.source) for t in tasks]))  # fmt: skip
    print(f"\n{len(cases)} tool-call cases, {len(tasks)} agent tasks")
    return EXIT_OK


def _target(args: argparse.Namespace) -> Target:
    """The endpoint, and the model checked against /v1/models (`--model`, else the only one served)."""
    ep = endpoint_from_args(args)
    with ep.client(timeout=args.timeout) as api:
        model = resolve_model(api, args.model)
    return Target(ep, model, args.quiet)


def _run_agent(args: argparse.Namespace) -> int:
    from vllm_station.commands.gates.agent import render

    tasks = load_agent_tasks(args.tasks, builtin=not args.no_builtin)
    if args.task:
        unknown = sorted(set(args.task) - {t.id for t in tasks})
        if unknown:
            raise UsageError(f"--task {', '.join(unknown)}: no such task (see `station gates list`)")
        tasks = [t for t in tasks if t.id in args.task]
    plan = AgentPlan(
        tuple(tasks), _sampling(args), repeats=args.repeats, stream=not args.no_stream,
        max_turns=args.max_turns, timeout=args.timeout,
    )  # fmt: skip
    rep = plan.run(_target(args))
    return _emit(rep, args, render(rep))


def _run_tools(args: argparse.Namespace) -> int:
    from vllm_station.commands.gates.tools import render

    plan = ToolsPlan(tuple(_tool_cases(args)), _sampling(args), timeout=args.timeout)
    rep = plan.run(_target(args))
    return _emit(rep, args, render(rep))


def _run_needle(args: argparse.Namespace) -> int:
    from vllm_station.commands.gates.needle import default_cache, render

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        raise UsageError(f"--variants {args.variants!r}: choose from {', '.join(VARIANTS)}")
    parse_depths(args.depths)  # before any request
    cache = None if args.no_calibration_cache else (args.calibration_cache or default_cache())
    if cache is not None:
        try:
            bounded.check_regular_or_absent(cache)
        except OSError as exc:
            raise UsageError(f"--calibration-cache {cache}: {exc.strerror or exc}") from None
    plan = NeedlePlan(
        lengths=args.lengths, depths=args.depths, variants=tuple(variants), sampling=_sampling(args),
        timeout=args.timeout, max_model_len=args.max_model_len, cache=cache, seed=args.seed,
    )  # fmt: skip
    rep = plan.run(_target(args))
    return _emit(rep, args, render(rep))


def run(args: argparse.Namespace) -> int:
    if getattr(args, "output", None) is not None:
        output.check_file("--output", args.output)  # before any request, not after the battery
    if args.gate == "needle":
        return _run_needle(args)
    if args.gate == "tools":
        return _run_tools(args)
    if args.gate == "list":
        return _run_list(args)
    if args.gate == "agent":
        return _run_agent(args)
    raise UsageError(f"unknown gate {args.gate!r}")  # argparse's choices make this unreachable
