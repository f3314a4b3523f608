"""The rollout: each station's steps, the waves of `--batch` stations, the report (`station-rollout/1`).

Per station, in order (docs/rollout.md):

1. `generation`: the station's system profile (`readlink /nix/var/nix/profiles/system`) before anything,
   and `wait-ready` on it: the checks work on the current generation (its URL, vLLM's key) before the
   station is taken out of rotation;
2. `drain` (`station drain --reason rollout` on the station): out of the gateways' rotation;
3. `switch` (`nixos-rebuild switch --flake FLAKE#NAME --target-host HOST`, or the `--switch-command`);
4. `wait-ready` (`station wait-ready` against the station's URL, bounded by `--ready-timeout`);
5. `golive` (`station golive` against the station directly: GO or NO-GO);
6. on GO `undrain` (`station undrain` on the station): the station is upgraded.

Any failure in 3-5 (a failed or hung switch, not ready in time, a NO-GO): read the generation again; if the
switch changed it, `rollback` (`nixos-rebuild switch --rollback --target-host HOST`) and check that the
generation is the one read in 1; then `wait-ready` and `golive` on the old generation, and `undrain` only
on its GO — otherwise the station stays drained, and the report says so loudly. A switch that did not
change the generation (it failed before activating) is not rolled back: `--rollback` would go one
generation further back. The rollout stops after a failure: the stations not reached are never touched.

A pair (a fleet entry with a `worker`: two stations serving one model with tensor parallelism) is one unit
of upgrade, in the pair's own order: both generations read, the head drained, then `stop` the head's serving
unit and the worker's (the head first: its engine leaves the NCCL session before the worker's), `switch` the
worker and the head, `start` the worker and then the head (whose start waits for the worker's beacon), and
wait-ready and golive against the head. A failure rolls back each of the two whose generation the switch
changed, in the same order (stop head, stop worker, roll back, start worker, start head), checks that both
are on the generations read before, and undrains on the old generation's GO. The worker's steps are marked
`on: worker` in the report.

Every command runs through `process.run_bounded`: a deadline (its process group is stopped there), a
bounded tail of its output kept in the report, redacted (`vllm_station.redact`).
"""

from __future__ import annotations

import shlex
import string
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from vllm_station import bounded, process, redact
from vllm_station.commands.rollout.fleet import Station, Worker
from vllm_station.errors import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE, Terminated, UsageError

SCHEMA = "station-rollout/1"
SSH_UNREACHABLE = 255  # ssh's exit status when it could not reach the host (or the connection failed)
REMOTE = "{remote}"
PLACEHOLDERS = ("name", "host", "url", "flake", "timeout")
OUTPUT_KEEP = 4000  # characters of each stream kept in the report, per command
GOLIVE_KEEP = 8 << 20  # golive's JSON on stdout is read whole (its gates' reports), up to this
SLACK_S = 60.0  # a wait-ready run through ssh: its own --timeout, plus this for the connection

DRAIN = "{remote} station drain --reason rollout"
UNDRAIN = "{remote} station undrain"


@dataclass(frozen=True)
class Templates:
    """The commands, as templates (shell words; `{name}` `{host}` `{url}` `{flake}` `{timeout}` filled
    in each word; a first word `{remote}` runs the rest on the station through `remote`)."""

    remote: str = "ssh -o BatchMode=yes {host}"
    switch: str = "nixos-rebuild switch --flake {flake}#{name} --target-host {host}"
    rollback: str = "nixos-rebuild switch --rollback --target-host {host}"
    generation: str = "{remote} readlink /nix/var/nix/profiles/system"
    wait: str = "{remote} station wait-ready --base-url {url} --timeout {timeout} --json"
    golive: str = "{remote} station golive --base-url {url} --json --quiet"
    # a pair's halves: their serving units stopped before the switches, started after (in order)
    stop: str = "{remote} systemctl stop vllm-station.service"
    start: str = "{remote} systemctl start --no-block vllm-station.service"


OPTION = {
    "remote": "--remote-command",
    "switch": "--switch-command",
    "rollback": "--rollback-command",
    "generation": "--generation-command",
    "wait": "--wait-command",
    "golive": "--golive-command",
    "stop": "--stop-command",
    "start": "--start-command",
}


@dataclass(frozen=True)
class Deadlines:
    command: float = 120.0  # generation, drain, undrain
    switch: float = 3600.0  # switch, rollback
    ready: float = 900.0  # wait-ready's own --timeout ({timeout}); the run's deadline adds SLACK_S
    golive: float = 14400.0  # the golive module's TimeoutStartSec


@dataclass(frozen=True)
class Options:
    stations: list[Station]
    batch: int = 1
    flake: str = "."
    templates: Templates = Templates()
    deadlines: Deadlines = Deadlines()
    quiet: bool = False


@dataclass(frozen=True)
class Commands:
    """One station's commands, expanded (what runs; the dry run prints them)."""

    generation: list[str]
    drain: list[str]
    switch: list[str]
    wait: list[str]
    golive: list[str]
    undrain: list[str]
    rollback: list[str]
    stop: list[str]
    start: list[str]


@dataclass
class StepRecord:
    step: str  # generation | drain | switch | wait-ready | golive | undrain | rollback
    generation: str | None  # current | new | old: which system it checked (None: drain, undrain)
    argv: list[str]
    deadline_s: float
    when: str | None = None  # in a plan: when the step runs (None: always)
    on: str | None = None  # "worker": a pair's worker (None: the station itself, a pair's head)
    ok: bool | None = None  # None: planned, not run
    exit_code: int | None = None  # None: not run, killed at its deadline or could not start
    timed_out: bool = False
    seconds: float = 0.0
    summary: str = "planned"
    stdout: str = ""  # the tail of each stream (OUTPUT_KEEP characters), redacted
    stderr: str = ""
    output_cut: bool = False
    gates: list[dict[str, Any]] | None = None  # golive: each gate's name, held, summary


@dataclass
class StationRecord:
    name: str
    host: str
    url: str
    # planned | untouched | upgraded | rolled-back | left-drained | unreachable | not-drained | interrupted
    state: str = "untouched"
    routed: bool | None = None  # in rotation at the end (None: never taken out)
    generation_before: str | None = None
    generation_after: str | None = None
    failure: str | None = None  # what went wrong, one line (None: upgraded or not reached)
    seconds: float = 0.0
    steps: list[StepRecord] = field(default_factory=list)
    worker: dict[str, str | None] | None = None  # a pair's worker: name, host, generation_before/_after


@dataclass
class RolloutReport:
    schema: str
    started_at: str
    finished_at: str
    dry_run: bool
    batch: int
    flake: str
    result: str  # planned | upgraded | failed | unreachable | interrupted
    exit_code: int
    failure: str | None
    stations: list[StationRecord]


# ---- templates -------------------------------------------------------------------------------------


def _fill(word: str, option: str, values: dict[str, str]) -> str:
    try:
        fields = [f for _, f, spec, conv in string.Formatter().parse(word) if f is not None or spec or conv]
        for f in fields:
            if f not in PLACEHOLDERS:
                raise UsageError(
                    f"{option}: unknown placeholder {{{f}}}; the placeholders: "
                    + " ".join("{" + p + "}" for p in PLACEHOLDERS)
                    + (f", and {REMOTE} as the first word" if option != OPTION["remote"] else "")
                )
        return word.format_map(values)
    except (ValueError, IndexError) as exc:  # an unmatched brace, a format spec
        raise UsageError(
            f"{option}: cannot fill {word!r} ({exc}); write a literal brace as {{{{ or }}}}"
        ) from None


def expand(template: str, option: str, values: dict[str, str], remote: list[str] | None) -> list[str]:
    """The argv of `template` for one station. A first word `{remote}` is the remote runner (`remote`),
    and the words after it are shell-quoted: ssh joins them with spaces for the station's shell."""
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise UsageError(f"{option} {template!r}: {exc}") from None
    if not words:
        raise UsageError(f"{option}: empty; give a command")
    if REMOTE in words[1:] or (words[0] == REMOTE and remote is None):
        raise UsageError(f"{option}: {REMOTE} may only be the first word of a command run on the station")
    if words[0] == REMOTE:
        assert remote is not None
        if len(words) == 1:
            raise UsageError(f"{option}: {REMOTE} alone runs nothing; add the command for the station")
        return [*remote, *(shlex.quote(_fill(w, option, values)) for w in words[1:])]
    return [_fill(w, option, values) for w in words]


def commands_for(st: Station, opts: Options) -> Commands:
    """Every command of `st`, expanded; a bad template is a UsageError naming its option."""
    t, d = opts.templates, opts.deadlines
    base = {"name": st.name, "host": st.host, "url": st.url, "flake": opts.flake}

    def values(timeout: float) -> dict[str, str]:
        return {**base, "timeout": f"{timeout:g}"}

    remote = expand(t.remote, OPTION["remote"], values(d.command), None)

    def cmd(template: str, option: str, timeout: float) -> list[str]:
        return expand(template, option, values(timeout), remote)

    return Commands(
        generation=cmd(t.generation, OPTION["generation"], d.command),
        drain=cmd(DRAIN, OPTION["remote"], d.command),
        switch=cmd(t.switch, OPTION["switch"], d.switch),
        wait=cmd(t.wait, OPTION["wait"], d.ready),
        golive=cmd(t.golive, OPTION["golive"], d.golive),
        undrain=cmd(UNDRAIN, OPTION["remote"], d.command),
        rollback=cmd(t.rollback, OPTION["rollback"], d.switch),
        stop=cmd(t.stop, OPTION["stop"], d.command),
        start=cmd(t.start, OPTION["start"], d.command),
    )


def worker_commands(st: Station, opts: Options) -> Commands | None:
    """A pair's worker's commands (its name and host in the templates; the head's URL), or None."""
    if st.worker is None:
        return None
    return commands_for(Station(st.worker.name, st.worker.host, st.url), opts)


# ---- the plan (--dry-run) --------------------------------------------------------------------------


def plan_steps(cmds: Commands, d: Deadlines) -> list[StepRecord]:
    wait_s = d.ready + SLACK_S
    return [
        StepRecord("generation", None, cmds.generation, d.command),
        StepRecord("wait-ready", "current", cmds.wait, wait_s),
        StepRecord("drain", None, cmds.drain, d.command),
        StepRecord("switch", "new", cmds.switch, d.switch),
        StepRecord("wait-ready", "new", cmds.wait, wait_s),
        StepRecord("golive", "new", cmds.golive, d.golive),
        StepRecord("undrain", None, cmds.undrain, d.command, when="on GO"),
        StepRecord("generation", None, cmds.generation, d.command, when="on a failure"),
        StepRecord(
            "rollback", "old", cmds.rollback, d.switch, when="on a failure, if the generation changed"
        ),
        StepRecord("generation", "old", cmds.generation, d.command, when="after a rollback"),
        StepRecord("wait-ready", "old", cmds.wait, wait_s, when="on a failure"),
        StepRecord("golive", "old", cmds.golive, d.golive, when="on a failure"),
        StepRecord("undrain", None, cmds.undrain, d.command, when="on the old generation's GO"),
    ]


def plan_pair_steps(cmds: Commands, w: Commands, d: Deadlines) -> list[StepRecord]:
    wait_s = d.ready + SLACK_S

    def on_worker(rec: StepRecord) -> StepRecord:
        rec.on = "worker"
        return rec

    fail, moved = "on a failure", "on a failure, if its generation changed"
    return [
        StepRecord("generation", None, cmds.generation, d.command),
        on_worker(StepRecord("generation", None, w.generation, d.command)),
        StepRecord("wait-ready", "current", cmds.wait, wait_s),
        StepRecord("drain", None, cmds.drain, d.command),
        StepRecord("stop", None, cmds.stop, d.command),
        on_worker(StepRecord("stop", None, w.stop, d.command)),
        on_worker(StepRecord("switch", "new", w.switch, d.switch)),
        StepRecord("switch", "new", cmds.switch, d.switch),
        on_worker(StepRecord("start", "new", w.start, d.command)),
        StepRecord("start", "new", cmds.start, d.command),
        StepRecord("wait-ready", "new", cmds.wait, wait_s),
        StepRecord("golive", "new", cmds.golive, d.golive),
        StepRecord("undrain", None, cmds.undrain, d.command, when="on GO"),
        StepRecord("generation", None, cmds.generation, d.command, when=fail),
        on_worker(StepRecord("generation", None, w.generation, d.command, when=fail)),
        StepRecord("stop", None, cmds.stop, d.command, when="on a failure, before a rollback"),
        on_worker(StepRecord("stop", None, w.stop, d.command, when="on a failure, before a rollback")),
        on_worker(StepRecord("rollback", "old", w.rollback, d.switch, when=moved)),
        StepRecord("rollback", "old", cmds.rollback, d.switch, when=moved),
        on_worker(StepRecord("start", "old", w.start, d.command, when="after a rollback")),
        StepRecord("start", "old", cmds.start, d.command, when="after a rollback"),
        StepRecord("wait-ready", "old", cmds.wait, wait_s, when=fail),
        StepRecord("golive", "old", cmds.golive, d.golive, when=fail),
        StepRecord("undrain", None, cmds.undrain, d.command, when="on the old generation's GO"),
    ]


def waves(stations: list[Station], batch: int) -> list[list[Station]]:
    return [stations[i : i + batch] for i in range(0, len(stations), batch)]


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def plan(opts: Options) -> RolloutReport:
    """What `--dry-run` prints: every station's steps in order, commands expanded; nothing runs."""
    stations = []
    for st in opts.stations:
        rec = StationRecord(st.name, st.host, st.url, state="planned", worker=_worker_record(st.worker))
        w = worker_commands(st, opts)
        cmds = commands_for(st, opts)
        d = opts.deadlines
        rec.steps = plan_steps(cmds, d) if w is None else plan_pair_steps(cmds, w, d)
        stations.append(rec)
    t = now()
    return RolloutReport(SCHEMA, t, t, True, opts.batch, opts.flake, "planned", EXIT_OK, None, stations)


def _worker_record(worker: Worker | None) -> dict[str, str | None] | None:
    if worker is None:
        return None
    return {"name": worker.name, "host": worker.host, "generation_before": None, "generation_after": None}


# ---- running it ------------------------------------------------------------------------------------


class _Cancelled(Exception):
    """Ctrl-C (or SIGTERM: `errors.Terminated`) in the main thread: no station starts another step."""


def _tail(text: str) -> tuple[str, bool]:
    text = redact.redact(text)
    return (text[-OUTPUT_KEEP:], True) if len(text) > OUTPUT_KEEP else (text, False)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _golive_gates(stdout: str) -> tuple[str | None, list[dict[str, Any]] | None]:
    """golive's result (go / no-go) and its gates, from its `--json` report; (None, None) if unreadable."""
    try:
        rep = bounded.loads_json(stdout)
    except ValueError:
        return None, None
    if not isinstance(rep, dict) or not isinstance(rep.get("gates"), list):
        return None, None
    gates = [
        {
            "name": str(g.get("name")),
            "held": g.get("held"),
            "summary": redact.redact(str(g.get("summary")))[:300],
        }
        for g in rep["gates"]
        if isinstance(g, dict)
    ]
    result = rep.get("result")
    return (result if isinstance(result, str) else None), gates


def _summary(step: str, ran: process.Ran, rec: StepRecord) -> str:
    if ran.error is not None:
        return ran.error
    if ran.timed_out:
        return f"killed at its deadline ({rec.deadline_s:g} s)"
    if step == "golive" and rec.gates is not None:
        failed = [g["name"] for g in rec.gates if g["held"] is False]
        if ran.exit_code == 0 and not failed:
            held = sum(g["held"] is True for g in rec.gates)
            skipped = sum(g["held"] is None for g in rec.gates)
            return f"GO ({held} gates held" + (f", {skipped} skipped)" if skipped else ")")
        what = f"not held: {', '.join(failed)}" if failed else f"exit {ran.exit_code}"
        return f"NO-GO ({what})"
    if step == "golive" and ran.exit_code == 0:
        return "NO-GO (exit 0, but no golive report on stdout: does the golive command have --json?)"
    if step == "generation" and ran.exit_code == 0:
        return redact.redact(ran.stdout.strip())[:300] or "(empty)"
    if ran.exit_code == 0:
        return "ok"
    why = _last_line(redact.redact(ran.stderr)) or _last_line(redact.redact(ran.stdout))
    if ran.exit_code == SSH_UNREACHABLE and why:
        return f"exit {SSH_UNREACHABLE} (the remote runner could not reach the host?): {why}"
    return f"exit {ran.exit_code}" + (f": {why}" if why else "")


class Runner:
    """Runs the steps of the stations (one thread per station of a wave); `say` prints progress."""

    def __init__(self, opts: Options, say: Callable[[str], None]) -> None:
        self.opts, self.say = opts, say
        self.cancel = threading.Event()
        self.stopped_by = "Ctrl-C"  # or SIGTERM: what the failure of the station in flight names

    def step(self, rec: StationRecord, name: str, generation: str | None, argv: list[str], deadline_s: float,
             keep: int = OUTPUT_KEEP * 4, on: str | None = None) -> StepRecord:  # fmt: skip
        if self.cancel.is_set():
            raise _Cancelled
        who = f"{rec.name}" + (f" ({on} {rec.worker['name']})" if on and rec.worker else "")
        self.say(f"{who}: {name}{f' ({generation})' if generation else ''} …")
        ran = process.run_bounded(argv, timeout_s=deadline_s, keep=keep)
        step = StepRecord(name, generation, list(argv), deadline_s, on=on)
        step.exit_code, step.timed_out, step.seconds = ran.exit_code, ran.timed_out, round(ran.seconds, 3)
        step.stdout, cut_out = _tail(ran.stdout)
        step.stderr, cut_err = _tail(ran.stderr)
        step.output_cut = ran.cut or cut_out or cut_err
        ok = ran.exit_code == 0
        if name == "golive":
            result, step.gates = _golive_gates(ran.stdout)
            ok = ok and result == "go"
        if name == "generation" and not ran.stdout.strip():
            ok = False
        step.ok = ok
        step.summary = _summary(name, ran, step)
        rec.steps.append(step)
        rec.seconds = round(rec.seconds + ran.seconds, 3)
        said = "ok" if ok else "FAILED"
        if step.summary != "ok":
            said += f" — {step.summary}"
        label = f"{name} ({generation})" if generation else name
        self.say(f"{who}: {label}: {said} ({ran.seconds:.1f} s)")
        if self.cancel.is_set():
            raise _Cancelled
        return step

    def upgrade(self, st: Station) -> StationRecord:
        rec = StationRecord(st.name, st.host, st.url, state="in progress", worker=_worker_record(st.worker))
        try:
            self._upgrade(st, rec)
        except _Cancelled:
            last = rec.steps[-1].step if rec.steps else "its first step"
            rec.state = "interrupted"
            rec.failure = (f"{st.name}: interrupted ({self.stopped_by}) at {last}: check the station "
                           "(drained? which generation?)")  # fmt: skip
        return rec

    def _upgrade(self, st: Station, rec: StationRecord) -> None:
        d = self.opts.deadlines
        cmds = commands_for(st, self.opts)
        w = worker_commands(st, self.opts)
        gen = self.step(rec, "generation", None, cmds.generation, d.command)
        if not gen.ok:
            unreachable = gen.exit_code == SSH_UNREACHABLE
            rec.state = "unreachable" if unreachable else "not-drained"
            rec.failure = f"{st.name}: cannot read its system generation: {gen.summary}; nothing was changed"
            return
        before = rec.generation_before = gen.stdout.strip()
        w_before = None
        if w is not None and rec.worker is not None:
            w_gen = self.step(rec, "generation", None, w.generation, d.command, on="worker")
            if not w_gen.ok:
                rec.state = "unreachable" if w_gen.exit_code == SSH_UNREACHABLE else "not-drained"
                rec.failure = (f"{st.name}: cannot read its worker {rec.worker['name']}'s system generation: "
                               f"{w_gen.summary}; nothing was changed")  # fmt: skip
                return
            w_before = rec.worker["generation_before"] = w_gen.stdout.strip()
        ready = self.step(rec, "wait-ready", "current", cmds.wait, d.ready + SLACK_S)
        if not ready.ok:  # wait-ready's exit 3: nothing answered at the URL
            gone = ready.exit_code in (SSH_UNREACHABLE, EXIT_UNREACHABLE)
            rec.state = "unreachable" if gone else "not-drained"
            rec.failure = (f"{st.name}: not ready on its current generation, before anything changed: "
                           f"{ready.summary}; nothing was changed (its url? vLLM's key: --api-key-file in "
                           "--wait-command and --golive-command)")  # fmt: skip
            return
        drain = self.step(rec, "drain", None, cmds.drain, d.command)
        if not drain.ok:
            rec.state = "unreachable" if drain.exit_code == SSH_UNREACHABLE else "not-drained"
            rec.failure = (f"{st.name}: drain failed: {drain.summary}; not switched (see `station drain "
                           "--status` on it)")  # fmt: skip
            return
        rec.routed = False
        failed = self._new_generation(rec, cmds, w)
        if failed is None:
            undrain = self.step(rec, "undrain", None, cmds.undrain, d.command)
            rec.state = "upgraded"
            if undrain.ok:
                rec.routed = True
            else:
                rec.failure = (f"{st.name}: upgraded (GO) but undrain failed: {undrain.summary}; it is LEFT "
                               "DRAINED: run `station undrain` on it")  # fmt: skip
            after = self.step(rec, "generation", "new", cmds.generation, d.command)
            rec.generation_after = after.stdout.strip() if after.ok else None
            if w is not None and rec.worker is not None:
                w_after = self.step(rec, "generation", "new", w.generation, d.command, on="worker")
                rec.worker["generation_after"] = w_after.stdout.strip() if w_after.ok else None
            return
        rec.failure = f"{st.name}: {failed}"
        if w is None or w_before is None:
            rec.failure += "; " + self._restore(rec, cmds, before)
        else:
            rec.failure += "; " + self._restore_pair(rec, cmds, w, before, w_before)

    def _new_generation(self, rec: StationRecord, cmds: Commands, w: Commands | None = None) -> str | None:
        """Switch (a pair: in its order), wait-ready, golive: None on GO, else what failed (the step, and
        golive's gates)."""
        d = self.opts.deadlines
        if w is not None:
            failed = self._pair_steps(rec, cmds, w, "new", "switch")
            if failed is not None:
                return failed
        else:
            switch = self.step(rec, "switch", "new", cmds.switch, d.switch)
            if not switch.ok:
                return f"switch failed: {switch.summary}"
        ready = self.step(rec, "wait-ready", "new", cmds.wait, d.ready + SLACK_S)
        if not ready.ok:
            return f"not ready on the new generation: {ready.summary}"
        golive = self.step(rec, "golive", "new", cmds.golive, d.golive, keep=GOLIVE_KEEP)
        if not golive.ok:
            return f"golive {golive.summary} on the new generation"
        return None

    def _pair_steps(self, rec: StationRecord, cmds: Commands, w: Commands, generation: str, how: str,
                    switch_worker: bool = True, switch_head: bool = True) -> str | None:  # fmt: skip
        """A pair's switch (`how`: switch or rollback) in its order: stop the head, stop the worker, switch
        the worker, switch the head, start the worker, start the head. None when every step passed, else
        the first that failed (nothing after it runs)."""
        d = self.opts.deadlines
        rolling_back = how == "rollback"
        worker_switch, head_switch = (w.rollback, cmds.rollback) if rolling_back else (w.switch, cmds.switch)
        order: list[tuple[str, str | None, list[str], float, str | None]] = [
            ("stop", None, cmds.stop, d.command, None),
            ("stop", None, w.stop, d.command, "worker"),
            *([(how, generation, worker_switch, d.switch, "worker")] if switch_worker else []),
            *([(how, generation, head_switch, d.switch, None)] if switch_head else []),
            ("start", generation, w.start, d.command, "worker"),
            ("start", generation, cmds.start, d.command, None),
        ]
        for name, gen, argv, deadline, on in order:
            step = self.step(rec, name, gen, argv, deadline, on=on)
            if not step.ok:
                who = f"the worker {rec.worker['name']}'s" if on and rec.worker else "the head's"
                what = "system" if name in ("switch", "rollback") else "serving unit"
                return f"{name} of {who} {what} failed: {step.summary}"
        return None

    def _restore_pair(self, rec: StationRecord, cmds: Commands, w: Commands, before: str,
                      w_before: str) -> str:  # fmt: skip
        """The pair back to the generations read before the switch — each half rolled back only if the
        switch changed it — in the pair's order, and into rotation on the old generation's GO."""
        d = self.opts.deadlines
        assert rec.worker is not None
        head_now = self.step(rec, "generation", None, cmds.generation, d.command)
        worker_now = self.step(rec, "generation", None, w.generation, d.command, on="worker")
        if not head_now.ok or not worker_now.ok:
            rec.state = "left-drained"
            why = head_now.summary if not head_now.ok else worker_now.summary
            return (f"cannot read the pair's generations after the failure ({why}), so it was not rolled "
                    "back; it is LEFT DRAINED")  # fmt: skip
        head_changed = head_now.stdout.strip() != before
        worker_changed = worker_now.stdout.strip() != w_before
        what = "the switch changed neither generation: no rollback"
        if head_changed or worker_changed:
            failed = self._pair_steps(rec, cmds, w, "old", "rollback", worker_changed, head_changed)
            if failed is not None:
                rec.state = "left-drained"
                return f"rollback: {failed}; it is LEFT DRAINED"
            head_back = self.step(rec, "generation", "old", cmds.generation, d.command)
            worker_back = self.step(rec, "generation", "old", w.generation, d.command, on="worker")
            got = (head_back.stdout.strip() if head_back.ok else head_back.summary,
                   worker_back.stdout.strip() if worker_back.ok else worker_back.summary)  # fmt: skip
            if got != (before, w_before):
                rec.state = "left-drained"
                return (f"rolled back, but the generations are {got[0]} (head) and {got[1]} (worker), not "
                        f"{before} and {w_before}; it is LEFT DRAINED")  # fmt: skip
            what = f"rolled back to {before} (head) and {w_before} (worker)"
        else:  # nothing switched, but both serving units were stopped: start them again, in order
            for name, argv, on in (("start", w.start, "worker"), ("start", cmds.start, None)):
                started = self.step(rec, name, "old", argv, d.command, on=on)
                if not started.ok:
                    rec.state = "left-drained"
                    return f"{what}; start failed: {started.summary}; it is LEFT DRAINED"
        rec.generation_after = before
        rec.worker["generation_after"] = w_before
        return self._serve_old(rec, cmds, what)

    def _restore(self, rec: StationRecord, cmds: Commands, before: str) -> str:
        """Back to the generation read before the switch, and into rotation on its GO; what happened."""
        d = self.opts.deadlines
        now_gen = self.step(rec, "generation", None, cmds.generation, d.command)
        if not now_gen.ok:
            rec.state = "left-drained"
            return (f"cannot read its generation after the failure ({now_gen.summary}), so it was not rolled "
                    "back; it is LEFT DRAINED")  # fmt: skip
        what = "the switch did not change its generation: no rollback"
        if now_gen.stdout.strip() != before:
            rollback = self.step(rec, "rollback", "old", cmds.rollback, d.switch)
            if not rollback.ok:
                rec.state = "left-drained"
                return f"rollback failed: {rollback.summary}; it is LEFT DRAINED"
            back = self.step(rec, "generation", "old", cmds.generation, d.command)
            if not back.ok or back.stdout.strip() != before:
                rec.state = "left-drained"
                return (f"rolled back, but its generation is {back.summary}, not {before}; it is LEFT "
                        "DRAINED")  # fmt: skip
            what = f"rolled back to {before}"
        rec.generation_after = before
        return self._serve_old(rec, cmds, what)

    def _serve_old(self, rec: StationRecord, cmds: Commands, what: str) -> str:
        """After a rollback (or none needed): wait-ready and golive on the old generation, undrain on GO."""
        d = self.opts.deadlines
        ready = self.step(rec, "wait-ready", "old", cmds.wait, d.ready + SLACK_S)
        golive = None
        if ready.ok:
            golive = self.step(rec, "golive", "old", cmds.golive, d.golive, keep=GOLIVE_KEEP)
        if golive is None or not golive.ok:
            rec.state = "left-drained"
            why = ready.summary if golive is None else f"golive {golive.summary}"
            return f"{what}, but the old generation is not serving well either ({why}); it is LEFT DRAINED"
        undrain = self.step(rec, "undrain", None, cmds.undrain, d.command)
        if not undrain.ok:
            rec.state = "left-drained"
            return f"{what}, GO, but undrain failed: {undrain.summary}; it is LEFT DRAINED"
        rec.state, rec.routed = "rolled-back", True
        return f"{what}: GO, undrained"


def run(opts: Options) -> RolloutReport:
    """The rollout: waves of `opts.batch` stations, each station's steps in its own thread; stops after
    the first wave with a failure (the stations after it stay untouched). Ctrl-C stops every command."""
    started = now()

    def say(text: str) -> None:
        if not opts.quiet:
            print(f"rollout: {text}", file=sys.stderr, flush=True)

    for st in opts.stations:
        commands_for(st, opts)  # every template checked for every station before the first command
    runner = Runner(opts, say)
    records = {st.name: StationRecord(st.name, st.host, st.url) for st in opts.stations}
    interrupted = stop = False
    for wave in waves(opts.stations, opts.batch):
        if stop:
            break
        say(f"wave: {', '.join(st.name for st in wave)}")
        with ThreadPoolExecutor(max_workers=len(wave), thread_name_prefix="rollout") as pool:
            futures = [pool.submit(runner.upgrade, st) for st in wave]
            try:
                done = [f.result() for f in futures]
            except KeyboardInterrupt as signalled:
                interrupted = True
                runner.stopped_by = "SIGTERM" if isinstance(signalled, Terminated) else "Ctrl-C"
                runner.cancel.set()
                while wait(futures, timeout=0).not_done:  # a step that began as we stopped the others
                    process.stop_running()
                    wait(futures, timeout=0.5)
                done = [f.result() for f in futures]
        for rec in done:
            records[rec.name] = rec
        stop = interrupted or any(r.state != "upgraded" or r.failure for r in done)
    stations = [records[st.name] for st in opts.stations]
    failures = [r.failure for r in stations if r.failure]
    untouched = [r.name for r in stations if r.state == "untouched"]
    if failures and untouched:
        failures.append(f"not reached: {', '.join(untouched)}")
    if interrupted:
        result, code = "interrupted", EXIT_INTERRUPTED
    elif not failures:
        result, code = "upgraded", EXIT_OK
    elif all(r.state == "unreachable" for r in stations if r.failure):
        result, code = "unreachable", EXIT_UNREACHABLE
    else:
        result, code = "failed", EXIT_FAIL
    return RolloutReport(SCHEMA, started, now(), False, opts.batch, opts.flake, result, code,
                         "; ".join(failures) or None, stations)  # fmt: skip
