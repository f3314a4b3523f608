"""One small error hierarchy. Messages are written for operators; the CLI maps them to exit codes."""

from __future__ import annotations

import textwrap


class StationError(Exception):
    """Base class: an operator-facing failure. `str(err)` is the whole message."""

    exit_code = 1


class CheckFailed(StationError):
    """A check ran and its result is a failure (exit 1)."""

    exit_code = 1


class UsageError(StationError):
    """Bad arguments or configuration (exit 2)."""

    exit_code = 2


class Unreachable(StationError):
    """The endpoint or peer could not be reached at all (exit 3)."""

    exit_code = 3


# Exit codes shared by every command. A command documents which of them it uses; none gives one of
# these numbers another meaning.
EXIT_OK = 0
EXIT_FAIL = 1  # the check ran and failed (CheckFailed)
EXIT_USAGE = 2  # bad arguments or configuration (UsageError; argparse too)
EXIT_UNREACHABLE = 3  # the endpoint, peer or input could not be reached or read at all (Unreachable)
EXIT_PENDING = 4  # no verdict yet: the evidence is not there (nccl-check: no NCCL transport line)
EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C): 128 + 2, what a shell reports for a process it killed
EXIT_BROKEN_PIPE = 141  # stdout closed by its reader (`station … | head -1`): 128 + SIGPIPE, like Unix tools

# The exit-code table: the same situation gives the same code in every verb (docs/architecture.md shows it;
# `station --help` prints it; tests/test_options_vocabulary.py runs every HTTP verb against each row's
# situation and compares codes). The rule: 2 is what only the operator can fix, found before anything is
# asked (arguments, files, configuration) or a choice only they can make (several models served and no
# --model); what a server answers (a refused key, a model it does not serve, an answer that is not HTTP) is
# a failed check, 1: the server is not what the operator expects; nothing answering at all is 3.
EXIT_TABLE: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "done: every check passed"),
    (EXIT_FAIL, "a check failed; also what the server answered: a refused API key (401/403), a model it does "
     "not serve (--model), an answer that is not HTTP (another program on that port)"),
    (EXIT_USAGE, "bad arguments or configuration, before anything was asked: an out-of-range number, an "
     "unreadable --api-key-file or --config, an output path that cannot be written; or a choice only the "
     "operator can make: several models served and no --model"),
    (EXIT_UNREACHABLE, "nothing answered at all: connection refused, a name that does not resolve, a "
     "connect timeout"),
    (EXIT_PENDING, "no verdict yet: the evidence is not there (nccl-check)"),
    (EXIT_INTERRUPTED, "Ctrl-C (SIGINT); reports hold what finished"),
    (EXIT_BROKEN_PIPE, "stdout closed by its reader (`station … | head -1`)"),
)


def exit_table_text() -> str:
    """The table as plain lines, for `station --help`."""
    rows = (
        textwrap.fill(
            what, width=79, break_on_hyphens=False, initial_indent=f"  {code:>3}  ", subsequent_indent=" " * 7
        )
        for code, what in EXIT_TABLE
    )
    return "exit codes (every verb):\n" + "\n".join(rows)


class Terminated(KeyboardInterrupt):
    """SIGTERM (`systemctl stop`, `kill`, a CI runner's cancel) while a command runs: raised where Ctrl-C
    would be, so every cleanup a Ctrl-C runs — the commands started through `vllm_station.process`
    stopped, partial files removed — runs for it too (`cli.main` installs the handler, then re-delivers
    the signal so the process still ends by SIGTERM)."""
