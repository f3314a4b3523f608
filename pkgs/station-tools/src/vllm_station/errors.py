"""One small error hierarchy. Messages are written for operators; the CLI maps them to exit codes."""

from __future__ import annotations


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
