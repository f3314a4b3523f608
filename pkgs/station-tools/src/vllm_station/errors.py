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


# Exit codes shared by every command.
EXIT_OK = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130
