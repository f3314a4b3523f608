"""`station rollout`: upgrade the stations behind a gateway one batch at a time (docs/rollout.md).

    station rollout --station a=10.10.0.1 --station b=10.10.0.2 --station c=10.10.0.3 --flake .
    station rollout --fleet fleet.toml --batch 2 --dry-run        # the plan: every command, nothing runs

Per station, in order (after wait-ready on its current generation: the checks work before anything
changes): drain → switch → wait-ready → golive → undrain on GO. A failed or hung switch, a
station not ready in time or a NO-GO: rolled back (when the switch changed its generation), wait-ready
and golive on the old generation, undrained only on that GO (else left drained, said loudly), and the
rollout stops: the stations not reached are never touched. `--batch K` stations at once (at most K out
of rotation; K must leave at least one station serving).

Command templates (shell words; `{name}` `{host}` `{url}` `{flake}` `{timeout}` filled in; a first word
`{remote}` runs the rest on the station through --remote-command):
  --switch-command     nixos-rebuild switch --flake {flake}#{name} --target-host {host}
                       (deploy-rs: deploy {flake}#{name} ; colmena: colmena apply --on {name})
  --rollback-command   nixos-rebuild switch --rollback --target-host {host}
vLLM with a key (serve.apiKeyFile): add --api-key-file FILE (its path on the station) to both
--wait-command and --golive-command.

Exit codes: 0 every station upgraded (or the plan printed), 1 a station failed (rolled back, or left
drained), 2 usage (nothing ran), 3 a station could not be reached before anything changed on it, 130
Ctrl-C (the report holds what finished). SIGTERM stops it as Ctrl-C does (every running command stopped,
the report printed), then ends it by SIGTERM (143 in a shell).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from vllm_station import argtypes, options
from vllm_station import report as report_mod
from vllm_station.commands.rollout import core, fleet
from vllm_station.errors import UsageError

DEFAULTS = core.Templates()
DEADLINES = core.Deadlines()


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (__doc__ or "").split("\n\n", 1)[1]
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--station", type=fleet.station_arg, action="append", metavar="NAME=HOST",
        help=f"a station, in rollout order (repeat); its URL for the checks: {fleet.DEFAULT_URL} on it",
    )  # fmt: skip
    where.add_argument(
        "--fleet", type=Path, metavar="FILE",
        help="the stations in order: a .json or .toml file, a list `stations` of {name, host, url}",
    )  # fmt: skip
    parser.add_argument(
        "--batch", type=argtypes.count(hi=1000), default=1, metavar="K",
        help="stations upgraded at once, at most K out of rotation (default 1; less than the stations)",
    )  # fmt: skip
    parser.add_argument(
        "--flake", default=".", metavar="REF", help="the flake of the stations' systems, {flake} (default .)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print every station's steps; run nothing")
    for key, what in (
        ("remote", "the runner of a command on a station"),
        ("switch", "switch a station to the new system"),
        ("rollback", "switch a station back to its previous system"),
        ("generation", "print the station's current system generation"),
        ("wait", "wait until the station serves; {timeout} is --ready-timeout"),
        ("golive", "the go-live gates against the station directly (JSON on stdout)"),
        ("stop", "a pair: stop a half's serving unit before the switches"),
        ("start", "a pair: start a half's serving unit after them (the worker first)"),
    ):
        default = getattr(DEFAULTS, key)
        parser.add_argument(
            core.OPTION[key], dest=f"{key}_command", default=default, metavar="TEMPLATE",
            help=f"{what} (default: {default.replace('%', '%%')})",
        )  # fmt: skip
    for name, dest, what, hi in (
        ("--command-timeout", "command", "generation, drain and undrain, each", argtypes.DAY),
        ("--switch-timeout", "switch", "a switch or a rollback", argtypes.DAY),
        ("--ready-timeout", "ready", "wait-ready (its own --timeout)", argtypes.WEEK),
        ("--golive-timeout", "golive", "golive", argtypes.WEEK),
    ):
        default_s = getattr(DEADLINES, dest)
        parser.add_argument(
            name, dest=f"{dest}_timeout", type=argtypes.seconds(hi=hi), default=default_s, metavar="S",
            help=f"seconds for {what} (default {default_s:g})",
        )  # fmt: skip
    options.add_json(parser)
    options.add_quiet(parser)


def make_options(args: argparse.Namespace) -> core.Options:
    stations = fleet.read_fleet(args.fleet) if args.fleet is not None else list(args.station)
    fleet.check(stations, args.batch)
    if args.flake.startswith("-") or not args.flake.strip():
        raise UsageError(f"--flake {args.flake!r}: give a flake reference (a path or URL), not an option")
    opts = core.Options(
        stations=stations,
        batch=args.batch,
        flake=args.flake,
        templates=core.Templates(**{k: getattr(args, f"{k}_command") for k in core.OPTION}),
        deadlines=core.Deadlines(
            command=args.command_timeout, switch=args.switch_timeout, ready=args.ready_timeout,
            golive=args.golive_timeout,
        ),
        quiet=args.quiet,
    )  # fmt: skip
    for st in stations:
        core.commands_for(st, opts)  # a bad template: exit 2 before anything runs
    return opts


def run(args: argparse.Namespace) -> int:
    opts = make_options(args)
    rep = core.plan(opts) if args.dry_run else core.run(opts)
    if args.json:
        report_mod.dump_json(rep)
    else:
        print(render_plan(rep, opts) if rep.dry_run else render(rep))
    if rep.failure:
        print(f"station rollout: {rep.result}: {rep.failure}", file=sys.stderr)
    for st in rep.stations:
        if st.routed is False:
            print(f"station rollout: WARNING: {st.name} ({st.host}) is LEFT DRAINED, out of the gateways' "
                  "rotation: fix it, then `station undrain` on it", file=sys.stderr)  # fmt: skip
    return rep.exit_code


def render_plan(rep: core.RolloutReport, opts: core.Options) -> str:
    n, k = len(rep.stations), rep.batch
    lines = [f"station rollout --dry-run: {n} stations, batch {k} (at most {k} out of rotation, "
             f"{n - k} of {n} always serving), flake {rep.flake}; nothing was run"]  # fmt: skip
    by_name = {st.name: st for st in rep.stations}
    for i, wave in enumerate(core.waves(opts.stations, opts.batch), 1):
        lines.append(f"wave {i}: {', '.join(st.name for st in wave)}")
        for st in wave:
            pair = f", with its worker {st.worker.name} ({st.worker.host}) as one pair" if st.worker else ""
            lines.append(f"  {st.name} ({st.host}, checks at {st.url}{pair}):")
            for j, step in enumerate(by_name[st.name].steps, 1):
                label = step.step + (f" ({step.generation})" if step.generation else "")
                label += " [worker]" if step.on == "worker" else ""
                when = f"  [{step.when}]" if step.when else ""
                cmd = shlex.join(step.argv)
                lines.append(f"    {j:2d}. {label:<18} {cmd}  (≤ {step.deadline_s:g} s){when}")
    lines.append("a failure stops the rollout after its wave: the stations after it are never touched")
    return "\n".join(lines)


def render(rep: core.RolloutReport) -> str:
    rows = []
    for st in rep.stations:
        routed = "-" if st.routed is None else ("yes" if st.routed else "NO")
        last = next((s for s in reversed(st.steps) if s.step == "golive"), None)
        what = st.failure or (f"GO on {st.generation_after}" if st.state == "upgraded" and st.generation_after
                              else (last.summary if last else ""))  # fmt: skip
        host = st.host + (f" + worker {st.worker['host']}" if st.worker else "")
        rows.append((st.name, host, st.state, routed, round(st.seconds, 1), what))
    body = report_mod.table(["station", "host", "state", "routed", "seconds", "what"], rows)
    head = f"station rollout  {len(rep.stations)} stations, batch {rep.batch}, flake {rep.flake}"
    return f"{head}\n{body}\n{rep.result.upper()} (exit {rep.exit_code})"
