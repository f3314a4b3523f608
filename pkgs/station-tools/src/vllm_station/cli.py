"""`station` — argparse only. One subcommand per command module; errors become exit codes, never tracebacks.

This is the one home of the command table (`COMMANDS`: name, module, one-line help). Each command module
exposes::

    def configure(parser: argparse.ArgumentParser) -> None
    def run(args: argparse.Namespace) -> int    # the exit code

and never imports this module. A command's module is imported only when that subcommand runs, so
`station smoke` never imports matplotlib or cffi and `station --help` imports no command module at all.
The `station-<command>` scripts are generated from `COMMANDS` by `vllm_station.entry`.

Two ends every command shares are handled here, once:

* Secrets: stdout and stderr go through `vllm_station.redact` (every registered secret masked).
* Ctrl-C: a KeyboardInterrupt is one line on stderr and exit 130 (`EXIT_INTERRUPTED`). Commands that
  install their own SIGINT handler (simulate, pair beacon) return 130 themselves.
* SIGTERM: while a command runs, SIGTERM raises `errors.Terminated` (a KeyboardInterrupt) where Ctrl-C
  would, so the same cleanup runs (the commands it started through `vllm_station.process` are stopped, not
  left running in their own sessions); then the signal is delivered again with its default action, so the
  process still ends *by* SIGTERM, as systemd and shells expect. Commands that install their own SIGTERM
  handler (simulate, download, copy, watchdog, pair beacon) keep it.
* A closed stdout (`station verify --json DIR | head -1`): the BrokenPipeError of a write, or of the
  flush `main` does before it returns, points stdout (and a closed stderr) at /dev/null, so the
  interpreter's last flush is silent, and the exit is 141 (`EXIT_BROKEN_PIPE`, 128 + SIGPIPE) without
  a traceback. Python ignores SIGPIPE, so a socket's EPIPE stays an ordinary error of its command: a
  BrokenPipeError while stdout is still open is re-raised.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import select
import signal
import sys
import threading
from types import ModuleType
from typing import TYPE_CHECKING, TextIO

from vllm_station import __version__, redact

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

from vllm_station.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    StationError,
    Terminated,
    exit_table_text,
)

log = logging.getLogger("vllm_station")

# subcommand -> module (under vllm_station: every verb in commands/, `simulate` in sim/) and one line of help.
COMMANDS: dict[str, tuple[str, str]] = {
    "smoke": (
        "commands.smoke.cli",
        "go/no-go: model list, chat answer, get_weather tool call (plain and streamed)",
    ),
    "wait-ready": ("commands.wait_ready", "block until /health is 200 and a 1-token completion succeeds"),
    "prestart": (
        "commands.prestart",
        "before every start: sync, drop page cache, check HBM FilePages, keep old logs",
    ),
    "preflight": (
        "commands.preflight.cli",
        "know before you start: NUMA, page cache, GPU, checkpoint, disk, port",
    ),
    "numa-exec": ("commands.numa_exec", "run a command with its memory bound to NUMA nodes (default node 0)"),
    "download": (
        "commands.download",
        "download a pinned model revision bound to NUMA node 0, then verify it",
    ),
    "verify": (
        "commands.verify",
        "verify a checkpoint: config, index, shard headers, optional sha256; write a stamp",
    ),
    "revisions": (
        "commands.revisions",
        "a model's revisions side by side: list, prune old ones, adopt a flat copy",
    ),
    "bench": (
        "commands.bench.cli",
        "load test: concurrency sweep, burst, prefill; tables, JSON/CSV, PNG plots",
    ),
    "simulate": (
        "sim.cli",
        "an OpenAI-compatible server with a known timing schedule (bench ground truth)",
    ),
    "nccl-check": ("commands.nccl", "classify the NCCL transport (GPUDirect RDMA / IB / socket) from logs"),
    "start-gate": (
        "commands.gate",
        "the serving unit's start step: refuse to start without a verified checkpoint stamp",
    ),
    "pair": (
        "commands.pair.cli",
        "two-station ordering: wait for the worker, let the head stop first, the beacon",
    ),
    "exec": (
        "commands.secret_env",
        "run a command with secrets from files in its environment (the unit's API key)",
    ),
    "weights-check": (
        "commands.weights",
        "after a start: weight memory per rank (vLLM log) vs the expected share",
    ),
    "copy": (
        "commands.copy",
        "pull a verified checkpoint from the other station (rsync, NUMA node 0), verify it",
    ),
    "probe": (
        "commands.probe",
        "synthetic probe: 1-user tok/s, TTFT and one tool call, for Prometheus (textfile)",
    ),
    "watchdog": (
        "commands.watchdog",
        "restart a wedged engine (health 200, no progress, probes fail) via systemd",
    ),
    "drain": ("commands.drain", "out of the gateways' rotation: new requests get 503, running ones finish"),
    "undrain": ("commands.undrain", "put a drained station back into its gateways' rotation"),
    "gateway": ("commands.gateway", "the nginx gateway's start step: API key files into the map it includes"),
    "secrets": (
        "commands.secrets",
        "before a unit loads its secret files: each in place? (names option and file)",
    ),
    "gates": (
        "commands.gates.cli",
        "quality gates before go-live: tool-call battery, agent battery, needles",
    ),
    "golive": (
        "commands.golive.cli",
        "every gate in order (smoke, tools, agent, needle, bench): one JSON + HTML report",
    ),
    "rollout": (
        "commands.rollout.cli",
        "upgrade the stations behind a gateway in turn: drain, switch, golive, undrain; rollback on NO-GO",
    ),
}


# Old verb names that keep working, hidden from the help: old -> new. `gate` is what the serving units of
# earlier releases render (`station gate stamp …`, modules/serve.nix); it reads too much like `gates` (the
# quality gates before go-live) and `gateway` to stand beside them in the help.
ALIASES: dict[str, str] = {"gate": "start-gate"}


class CommandUnavailable(StationError):
    """A command's module (or a package it needs) is not installed: exit 1 with what is missing."""


def load(name: str) -> ModuleType:
    """The module of command `name`; a missing module or dependency is a `CommandUnavailable`."""
    module_name = f"vllm_station.{COMMANDS[name][0]}"
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise CommandUnavailable(f"this installation has no module {module_name} ({exc})") from None
        raise CommandUnavailable(f"{module_name} needs a package that is not installed: {exc}") from None


class _Parser(argparse.ArgumentParser):
    """argparse's parser, except that writing --help or a usage error to a closed stdout is not ignored.

    argparse swallows an OSError of that write; `main` needs the BrokenPipeError to answer 141 whether
    stdout is buffered or not (PYTHONUNBUFFERED). Subparsers (and a command's own verbs) inherit it.
    """

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        if message:
            (file or sys.stderr).write(message)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; only the subcommand `only` (if any) imports its module for its options."""
    parser = _Parser(
        prog="station",
        description="vllm-station operator tools",
        epilog=exit_table_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"station {__version__}")
    parser.add_argument("--debug", action="store_true", help="log debug details to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        if name == only:
            load(name).configure(sp)
    for old, new in ALIASES.items():  # no help= on purpose: argparse then lists no row for it
        sp = sub.add_parser(old, description=f"{COMMANDS[new][1]} (old name of `station {new}`)")
        sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        if only == old:
            load(new).configure(sp)
    return parser


def _reader_gone(fd: int) -> bool:
    """True if `fd` is a pipe or socket whose reading end is closed (poll reports an error or hang-up)."""
    try:
        poller = select.poll()
        poller.register(fd, 0)  # POLLERR and POLLHUP are always reported
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError):
        return False


def _silence(stream: TextIO | None) -> bool:
    """Point a stream whose reader is gone at /dev/null (the Python docs' recipe for SIGPIPE)."""
    try:
        fd = stream.fileno() if stream is not None else -1
    except (OSError, ValueError):  # io.UnsupportedOperation (a replaced sys.stdout) is both
        return False
    if fd < 0:
        return False
    if not _reader_gone(fd):
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
    return True


def _stdout_closed() -> bool:
    """`station … >&-`: fd 1 is not open. It is pointed at /dev/null before anything else opens a file,
    so no file the command writes can take fd 1 and receive what it prints."""
    try:
        os.fstat(1)
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        if devnull != 1:
            os.dup2(devnull, 1)
            os.close(devnull)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 - fd 1 for the process
        return True
    return False


def _stdout_failed(exc: OSError) -> bool:
    """Whether `exc` is stdout's own write failing (`>/dev/full`: ENOSPC, EIO); stdout then goes to
    /dev/null so the interpreter's last flush is silent."""
    stream = sys.stdout
    if not isinstance(stream, redact.RedactingStream) or stream.failed is not exc:
        return False
    stream.discard()
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
    finally:
        os.close(devnull)
    return True


def main(argv: list[str] | None = None) -> int:
    """`station ARGV...`: the exit code. A closed stdout is exit 141, Ctrl-C 130; never a traceback.

    Everything written to stdout and stderr passes through `vllm_station.redact` (secrets masked).
    A stdout closed before the start (`>&-`) is /dev/null (a warning on stderr); one that cannot be
    written (`>/dev/full`) is one error line on stderr and exit 1.
    """
    closed = _stdout_closed()
    redact.install()
    if closed:
        print("station: warning: stdout is closed; what would be printed there is discarded", file=sys.stderr)
    terminated: list[bool] = []
    previous = _sigterm_raises(terminated)
    try:
        return _main_guarded(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if terminated:  # the cleanup ran; now end as SIGTERM ends a process
            _flush_quietly()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)


def _sigterm_raises(terminated: list[bool]) -> signal._HANDLER | None:
    """In the main thread, where SIGTERM still has its default action: a handler that raises
    `Terminated` (and records it); the handler it replaced, or None when none was installed."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None  # an embedding program's own handler stays

    def raise_terminated(signum: int, frame: object) -> None:
        terminated.append(True)
        raise Terminated(f"signal {signum}")

    return signal.signal(signal.SIGTERM, raise_terminated)


def _flush_quietly() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def _main_guarded(argv: list[str] | None) -> int:
    try:
        code = _main(argv)
        redact.finish()
        sys.stdout.flush()  # here, not at interpreter exit, where a BrokenPipeError is only "ignored"
        return code
    except BrokenPipeError:
        silenced = _silence(sys.stdout)
        _silence(sys.stderr)  # `2>&1 | head -1`: the message about it would be lost anyway
        if not silenced:
            raise  # stdout is fine: a socket's EPIPE that its command did not handle (a bug there)
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:  # Ctrl-C before the command ran: while its modules were still importing
        print("station: interrupted", file=sys.stderr)
        redact.finish()
        return EXIT_INTERRUPTED
    except OSError as exc:
        if not _stdout_failed(exc):
            raise
        print(f"station: error: cannot write to stdout ({exc.strerror or exc})", file=sys.stderr)
        redact.finish()
        return EXIT_FAIL


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    only = command if command in COMMANDS or command in ALIASES else None
    try:
        parser = build_parser(only)
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    except StationError as err:
        print(f"station {only}: error: {err}" if only else f"station: error: {err}", file=sys.stderr)
        return err.exit_code
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "debug", False) else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(load(ALIASES.get(args.command, args.command)).run(args))
    except StationError as err:
        print(f"station {args.command}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt as stop:
        how = "terminated (SIGTERM)" if isinstance(stop, Terminated) else "interrupted"
        print(f"station {args.command}: {how}", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
