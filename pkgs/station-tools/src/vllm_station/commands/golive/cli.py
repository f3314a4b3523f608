"""`station golive`: every gate before go-live, in order, and one report (docs/golive.md).

    station golive --base-url http://127.0.0.1:8888 --expect c1.tok_s>=100 --out /var/lib/golive/run1
    station golive --config /etc/vllm-station/golive.json          # what the NixOS module renders

Gates, in order: smoke (model list, chat, get_weather plain and streamed) → tools (the tool-call battery)
→ agent (the agent battery) → needle (long-context retrieval up to ~90 % of max_model_len) → bench (a
concurrency sweep, judged by the `--expect` thresholds, `failures==0` always among them). An unreachable
server stops the run at smoke; any other failure is recorded and the next gate runs.

Which key: direct to vLLM, its own key (serve.apiKeyFile), if any. Through services.vllm-station.gateway,
a key with `role = "operator"`: the needle gate counts prompts with /tokenize and the report reads
/version, which the gateway forwards for operator keys only (a user key gets 403 there).

The report records what was tested: the server's /version, the model and its max_model_len, and — from
`--config`, when the module runs it on a station — the preset, image, model revision and the rendered vLLM
flags. It is written as `golive.json` and a self-contained `golive.html` (plots inline) into `--out`.

Exit codes: 0 every gate held, 1 a gate failed, 2 usage (bad options or config file), 3 unreachable.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vllm_station import argtypes, bounded, options, output, thresholds
from vllm_station import report as report_mod
from vllm_station.api import ApiError
from vllm_station.api.args import Endpoint, add_endpoint_args, endpoint_from_args
from vllm_station.api.served import max_model_len, resolve_model
from vllm_station.batteries.cases import load_tool_cases
from vllm_station.batteries.needles import DEFAULT_DEPTHS, DEFAULT_LENGTHS, depths_option, lengths_option
from vllm_station.batteries.tasks import load_agent_tasks
from vllm_station.commands.bench import plan as bench
from vllm_station.commands.gates import plan as gates
from vllm_station.commands.smoke import plan as smoke
from vllm_station.errors import (
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    StationError,
    Unreachable,
    UsageError,
)
from vllm_station.plans import INTERRUPTED, UNREACHABLE, CannotRun, Target
from vllm_station.plans import Plan as GatePlan

SCHEMA_VERSION = 1
# The walk, in order: each gate is a verb's plan (vllm_station.plans), named by its plan.
GATES = tuple(p.gate for p in (smoke.Plan, gates.ToolsPlan, gates.AgentPlan, gates.NeedlePlan, bench.Plan))
REPORT_FILES = ("golive.json", "golive.html")
ALWAYS_EXPECT = "failures==0"


@dataclass
class GateOutcome:
    name: str
    held: bool | None  # None: skipped
    summary: str
    seconds: float
    report: Any = None  # the gate's own report, as JSON types


@dataclass
class GoliveReport:
    schema: int
    started_at: str
    finished_at: str
    base_url: str
    model: str | None
    server: dict[str, Any]  # /version, max_model_len
    station: dict[str, Any]  # from --config: preset, image, revision, vllmArgs, host
    expect: list[str]
    result: str  # go | no-go
    exit_code: int
    gates: list[GateOutcome] = field(default_factory=list)
    partial: bool = False  # stopped early (Ctrl-C, the server gone, a gate aborted): `stopped` says why
    stopped: str | None = None


# The bench gate's ranges are bench's own (its plan's); the config file's values go through the same types.
BENCH_LEVELS = argtypes.int_list(bench.MAX_CONCURRENCY, max_items=bench.MAX_LEVELS)
BENCH_REQUESTS = argtypes.request_count(lo=1, hi=bench.MAX_COUNT, per_user_hi=bench.MAX_PER_USER)
BENCH_OUTPUT_LEN = argtypes.count(hi=bench.MAX_OUTPUT_LEN)
AGENT_REPEATS = argtypes.count(hi=100)
TIMEOUT = argtypes.seconds(hi=argtypes.DAY)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (__doc__ or "").split("\n\n", 1)[1]
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="the module's golive.json (base URL, model, thresholds, station)",
    )
    add_endpoint_args(parser, from_config=True)
    options.add_model(parser, from_config=True)
    parser.add_argument(
        "--expect", action="append", default=[], metavar="EXPR",
        help="a bench threshold, e.g. c1.tok_s>=100 (repeatable; added to the config's; failures==0 always)",
    )  # fmt: skip
    parser.add_argument(
        "--out",
        type=output.out_dir(files=REPORT_FILES),
        metavar="DIR",
        help="write golive.json and golive.html here",
    )
    parser.add_argument(
        "--skip", default="", metavar="GATES", help=f"gates to leave out, comma-separated: {', '.join(GATES)}"
    )
    options.add_timeout(parser, default=None, what="each request (default: each gate's)")
    parser.add_argument(
        "--agent-repeats",
        type=AGENT_REPEATS,
        default=None,
        metavar="K",
        help="agent trials per task (default 1)",
    )
    parser.add_argument(
        "--needle-lengths",
        type=lengths_option,
        default=None,
        help="needle prompt lengths (default 25%%,50%%,90%%)",
    )
    parser.add_argument(
        "--needle-depths",
        type=depths_option,
        default=None,
        help="needle depths in percent (default 0,50,100)",
    )
    parser.add_argument(
        "--bench-concurrency",
        type=BENCH_LEVELS,
        default=None,
        metavar="LIST",
        help=f"sweep levels, 1…{bench.MAX_CONCURRENCY} each (default 1,32)",
    )
    parser.add_argument(
        "--bench-requests",
        type=BENCH_REQUESTS,
        default=None,
        metavar="N|Nx",
        help=f"measured requests per level, 1…{bench.MAX_COUNT} or 1x…{bench.MAX_PER_USER}x (default 2x)",
    )
    parser.add_argument(
        "--bench-output-len",
        type=BENCH_OUTPUT_LEN,
        default=None,
        metavar="N",
        help="tokens per answer (default 256)",
    )
    options.add_json(parser)
    options.add_quiet(parser)


# ---- golive.json: the contract with modules/golive.nix ----
# Every key the module writes, and nothing else: a key renamed on either side fails the file (exit 2)
# instead of falling back to a default. checks/test_contracts.py feeds the rendered file through it.
# The values are checked for type and range by `make_plan` (`_Config`), with the options' own types.


@dataclass(frozen=True)
class GoliveAgent:
    repeats: object


@dataclass(frozen=True)
class GoliveNeedle:
    lengths: object
    depths: object
    calibration_cache: object


@dataclass(frozen=True)
class GoliveBench:
    concurrency: object
    requests: object
    output_len: object


@dataclass(frozen=True)
class GoliveStation:
    """The station's record, copied into the report."""

    preset: object
    image: object
    revision: object
    vllm_args: object


@dataclass(frozen=True)
class GoliveConfig:
    base_url: object
    model: object
    expect: object
    skip: object
    timeout: object
    out_dir: object
    agent: GoliveAgent
    needle: GoliveNeedle
    bench: GoliveBench
    station: GoliveStation

    # Keys a file written by hand may add (the module passes the key as a credential instead).
    OPTIONAL_KEYS = frozenset({"apiKeyFile"})

    @staticmethod
    def key(name: str) -> str:
        head, *rest = name.split("_")
        return head + "".join(part.capitalize() for part in rest)

    @classmethod
    def keys(cls, section: type | None = None) -> list[str]:
        """The camelCase keys of the file (or of one section's dataclass), in field order."""
        return [cls.key(f.name) for f in fields(section or cls)]

    @classmethod
    def from_mapping(cls, data: dict[str, Any], where: str = "golive config") -> GoliveConfig:
        """Every key required and no other (`where`: the message's prefix, e.g. "--config FILE")."""
        config: GoliveConfig = cls._build(cls, data, where, "", cls.OPTIONAL_KEYS)
        return config

    @staticmethod
    def _build(kind: type, data: dict[str, Any], where: str, prefix: str, optional: frozenset[str]) -> Any:
        known = GoliveConfig.keys(kind)
        unknown = sorted(k for k in data if k not in known and k not in optional)
        if unknown:
            raise UsageError(
                f"{where}: {', '.join(prefix + k for k in unknown)}: unknown key{'s' * (len(unknown) > 1)}; "
                f"the keys{' of ' + prefix.rstrip('.') if prefix else ''}: {', '.join(known)}"
            )
        missing = [prefix + k for k in known if k not in data]
        if missing:
            raise UsageError(
                f"{where}: {', '.join(missing)}: missing (the NixOS module writes every key; is this file "
                "from another version of vllm-station?)"
            )
        values: dict[str, Any] = {}
        for f in fields(kind):
            value = data[GoliveConfig.key(f.name)]
            if isinstance(f.type, str) and f.type.startswith("Golive"):  # a section: an object of its own
                key = prefix + GoliveConfig.key(f.name)
                if not isinstance(value, dict):
                    raise UsageError(f"{where}: {key}: must be an object, got {argtypes.json_type(value)}")
                value = GoliveConfig._build(_SECTIONS[f.type], value, where, key + ".", frozenset())
            values[f.name] = value
        return kind(**values)


_SECTIONS: dict[str, type] = {
    t.__name__: t for t in (GoliveAgent, GoliveNeedle, GoliveBench, GoliveStation)
}


def _load_config(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        obj = bounded.read_json(path, limit=bounded.CONFIG_LIMIT)
    except FileNotFoundError:
        raise UsageError(f"--config {path}: not found") from None
    except OSError as exc:  # not a regular file (/dev/zero, a FIFO, a directory), too large, unreadable
        raise UsageError(f"--config {path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:  # not UTF-8, not JSON, nested too deep
        raise UsageError(f"--config {path}: cannot read it as JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise UsageError(f"--config {path}: expected a JSON object")
    GoliveConfig.from_mapping(obj, f"--config {path}")  # every key, no other: the module's file
    return obj


class _Config:
    """The config file's values, each checked for its type (and range) as it is read: "--config FILE:
    bench.requests: must be …" — never a traceback for a wrongly typed value."""

    def __init__(self, obj: dict[str, Any], path: Path | None) -> None:
        self.obj, self.path = obj, path

    def where(self, key: str) -> str:
        return f"--config {self.path}: {key}"

    def get(self, key: str) -> Any:
        node: Any = self.obj
        for part in key.split("."):
            if node is None:
                return None
            if not isinstance(node, dict):
                raise UsageError(f"{self.where(key.rsplit('.', 1)[0])}: must be an object")
            node = node.get(part)
        return node

    def text(self, key: str) -> str | None:
        v = self.get(key)
        if v is not None and not isinstance(v, str):
            raise UsageError(f"{self.where(key)}: must be a string, got {argtypes.json_type(v)}")
        return v or None

    def texts(self, key: str) -> list[str]:
        v = self.get(key)
        if v is None:
            return []
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise UsageError(f"{self.where(key)}: must be a list of strings")
        return list(v)

    def number(self, key: str, convert: Any, kinds: tuple[type, ...] = (int,)) -> Any:
        v = self.get(key)
        return None if v is None else argtypes.from_config(convert, v, self.where(key), kinds=kinds)

    def mapping(self, key: str) -> dict[str, Any]:
        v = self.get(key)
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise UsageError(f"{self.where(key)}: must be an object, got {argtypes.json_type(v)}")
        return v


@dataclass
class Plan:
    """What one golive run does: the config file's values, overridden by the command line."""

    model: str | None
    expect: list[str]
    skip: set[str]
    timeout: float | None
    agent_repeats: int
    needle_lengths: str
    needle_depths: str
    bench_levels: list[int]
    bench_requests: str
    bench_output_len: int
    station: dict[str, Any]
    out: Path | None
    needle_cache: Path | None


def make_plan(args: argparse.Namespace, cfg: dict[str, Any]) -> Plan:
    """Every value checked (type and range) before any gate runs: a bad one is exit 2, nothing sent."""
    c = _Config(cfg, getattr(args, "config", None))
    skip = {s.strip() for s in (args.skip or ",".join(c.texts("skip"))).split(",") if s.strip()}
    unknown = sorted(skip - set(GATES))
    if unknown:
        raise UsageError(f"--skip {', '.join(unknown)}: the gates are {', '.join(GATES)}")
    expect = [*c.texts("expect"), *args.expect]
    if ALWAYS_EXPECT not in expect:
        expect.append(ALWAYS_EXPECT)
    thresholds.parse(expect)  # a bad threshold is a usage error now, not after an hour of gates
    out_dir = c.text("outDir")
    cache = c.text("needle.calibrationCache")
    requests = args.bench_requests or c.number("bench.requests", BENCH_REQUESTS, (str, int)) or "2x"
    plan = Plan(
        model=args.model or c.text("model"),
        expect=expect,
        skip=skip,
        timeout=args.timeout or c.number("timeout", TIMEOUT, (int, float)),
        agent_repeats=args.agent_repeats or c.number("agent.repeats", AGENT_REPEATS) or 1,
        needle_lengths=args.needle_lengths
        or c.number("needle.lengths", lengths_option, (str,))
        or ",".join(DEFAULT_LENGTHS),
        needle_depths=args.needle_depths
        or c.number("needle.depths", depths_option, (str,))
        or ",".join(map(str, DEFAULT_DEPTHS)),
        bench_levels=args.bench_concurrency
        or c.number("bench.concurrency", BENCH_LEVELS, (list,))
        or [1, 32],
        bench_requests=requests,
        bench_output_len=args.bench_output_len or c.number("bench.outputLen", BENCH_OUTPUT_LEN) or 256,
        station=dict(c.mapping("station")),
        out=args.out or (Path(out_dir) if out_dir else None),
        needle_cache=Path(cache) if cache else None,
    )
    if plan.needle_cache is not None:
        try:
            bounded.check_regular_or_absent(plan.needle_cache)
        except OSError as exc:
            where = c.where("needle.calibrationCache")
            raise UsageError(f"{where} {plan.needle_cache}: {exc.strerror or exc}") from None
    bench_plan = _bench_plan(plan)
    bench_plan.check_thresholds()  # every threshold's level is in the sweep
    if "bench" not in plan.skip:  # what one level holds in memory: bench's own budgets
        bench_plan.check()
    return plan


def _bench_plan(plan: Plan) -> bench.Plan:
    return bench.Plan(
        levels=tuple(plan.bench_levels), requests=plan.bench_requests, output_len=plan.bench_output_len,
        timeout=plan.timeout or 600.0, expect=tuple(plan.expect),
    )  # fmt: skip


def gate_plans(plan: Plan) -> list[GatePlan[Any]]:
    """The walk: each gate's own plan, from golive's (a gate's default timeout where golive sets none)."""
    timeout = plan.timeout or 600.0
    return [
        smoke.Plan(timeout=plan.timeout or 120.0),
        gates.ToolsPlan(tuple(load_tool_cases()), timeout=timeout),
        gates.AgentPlan(tuple(load_agent_tasks()), repeats=plan.agent_repeats, timeout=timeout),
        gates.NeedlePlan(plan.needle_lengths, plan.needle_depths, timeout=timeout, cache=plan.needle_cache),
        _bench_plan(plan),
    ]


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        print(f"golive: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    cfg = _load_config(args.config)
    c = _Config(cfg, args.config)
    if args.base_url is None:  # --config's baseUrl, else the shared default
        args.base_url = c.text("baseUrl") or options.default_base_url()
    if args.api_key_file is None and c.text("apiKeyFile"):
        args.api_key_file = c.text("apiKeyFile")
    plan = make_plan(args, cfg)
    if plan.out is not None:  # before the first gate, not after the last
        output.check_dir("--out", plan.out, files=REPORT_FILES)
    ep = endpoint_from_args(args)
    rep, figures = run_golive(ep, plan, quiet=args.quiet)
    failed: output.OutputError | None = None
    if plan.out is not None:
        from vllm_station.commands.golive.page import write_report

        try:
            for p in write_report(rep, plan.out, figures):
                _say(args.quiet, f"wrote {p}")
        except output.OutputError as err:  # the verdict is still printed, then this error
            failed = err
    if args.json:
        report_mod.dump_json(rep)
    else:
        print(render(rep))
    if failed is not None:
        raise failed
    if rep.partial:
        print(f"station golive: {rep.stopped}; the report holds the gates that ran", file=sys.stderr)
    return rep.exit_code


def run_golive(
    ep: Endpoint, plan: Plan, *, quiet: bool = False
) -> tuple[GoliveReport, dict[str, Callable[[Path], list[Path]]]]:
    """Every gate of `plan` against `ep`, in one walk: the report, and the plots the gates offer (by gate:
    each draws its PNGs into a directory, for the page).

    Each gate is a verb's plan: run it, take its verdict, record it. Between smoke and the next gate,
    golive's first contact: the model (smoke's, else the only one served), max_model_len and /version. A
    server gone (at smoke, or any error that says so), Ctrl-C, or a gate that aborts (an error out of its
    core) ends the walk, with the gates that finished in the report; a gate that cannot run against this
    server (`CannotRun`) is recorded as not held, and the next one runs."""
    started = datetime.now(UTC).isoformat(timespec="seconds")
    outcomes: list[GateOutcome] = []
    server: dict[str, Any] = {}
    station = {"host": socket.gethostname(), **plan.station}
    target = Target(ep, plan.model, quiet)
    figures: dict[str, Callable[[Path], list[Path]]] = {}
    stopped: str | None = None
    unreachable = interrupted = contacted = False

    def record(o: GateOutcome) -> None:
        outcomes.append(o)
        state = "skipped" if o.held is None else ("held" if o.held else "FAILED")
        _say(quiet, f"{o.name}: {state} — {o.summary} ({o.seconds:.1f} s)")

    for gate in gate_plans(plan):
        name = gate.gate
        t0 = time.perf_counter()
        try:
            if name != smoke.Plan.gate and not contacted:
                contacted = True
                target = _contact(target, plan, server)
            if name in plan.skip:
                record(GateOutcome(name, None, "skipped", 0.0))
                continue
            _say(quiet, f"{name} …")
            t0 = time.perf_counter()
            verdict = gate.verdict(gate.run(target))
        except CannotRun as err:
            record(GateOutcome(name, False, err.summary, 0.0))
            continue
        except KeyboardInterrupt:  # the report keeps the gates that finished (exit 130)
            interrupted = True
            stopped = f"interrupted (Ctrl-C) during {name}"
            record(GateOutcome(name, False, stopped, time.perf_counter() - t0))
            break
        except Unreachable as err:
            unreachable = True
            stopped = f"server fault: {err}"
            record(GateOutcome("unreachable", False, str(err), 0.0))
            break
        except StationError as err:  # a gate aborted: recorded, the report still written
            stopped = f"{name} aborted: {err}"
            record(GateOutcome(name, False, stopped, 0.0))
            break
        record(GateOutcome(name, verdict.held, verdict.summary, time.perf_counter() - t0, verdict.report))
        if target.model is None and verdict.model is not None:
            target = replace(target, model=verdict.model)
        if verdict.figures is not None:
            figures[name] = verdict.figures
        if verdict.stop is not None:
            stopped = verdict.stop.why
            unreachable = verdict.stop.kind == UNREACHABLE
            interrupted = verdict.stop.kind == INTERRUPTED
            break
    held = [o.held for o in outcomes if o.held is not None]
    ok = bool(held) and all(held) and stopped is None
    code = EXIT_OK if ok else (EXIT_UNREACHABLE if unreachable else EXIT_FAIL)
    if interrupted:
        code = EXIT_INTERRUPTED
    rep = GoliveReport(
        schema=SCHEMA_VERSION,
        started_at=started,
        finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
        base_url=ep.api_url,
        model=target.model,
        server=server,
        station=station,
        expect=plan.expect,
        result="go" if ok else "no-go",
        exit_code=code,
        gates=outcomes,
        partial=stopped is not None,
        stopped=stopped,
    )
    return rep, figures


def _contact(target: Target, plan: Plan, server: dict[str, Any]) -> Target:
    """golive's first contact after smoke: the model the gates ask (smoke's, `--model`, else the only one
    served), its max_model_len and the server's /version into `server`; the target with the model."""
    with target.endpoint.client(timeout=plan.timeout or 600.0) as api:
        model = resolve_model(api, target.model)
        server["max_model_len"] = max_model_len(api, model)
        try:
            server["version"] = api.get_json("/version", timeout=30)
        except ApiError as err:
            server["version"] = {"error": str(err)}
    return replace(target, model=model)


def render(rep: GoliveReport) -> str:
    rows = [
        (
            o.name,
            "skipped" if o.held is None else ("held" if o.held else "FAILED"),
            round(o.seconds, 1),
            o.summary,
        )
        for o in rep.gates
    ]
    version = rep.server.get("version")
    vtext = version.get("version") if isinstance(version, dict) else version
    head = f"station golive  {rep.base_url}  model={rep.model or '-'}  vLLM {vtext or '?'}"
    verdict = "GO" if rep.result == "go" else "NO-GO"
    body = report_mod.table(["gate", "result", "seconds", "summary"], rows)
    partial = f"\nPARTIAL: {rep.stopped}" if rep.partial else ""
    return f"{head}\n{body}{partial}\n{verdict} (exit {rep.exit_code})"
