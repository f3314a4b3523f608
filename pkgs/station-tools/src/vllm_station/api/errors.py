"""Errors of the OpenAI-compatible client. Each message names what happened, where, and what to try.

Hierarchy (the CLI maps the bases to exit codes):

- `ApiError` (StationError, exit 1): base of everything the client raises.
  - `ApiUnreachable` (also `Unreachable`, exit 3): nothing answered — connection refused, DNS failure,
    connect timeout. `kind` is "refused", "dns", "connect-timeout" or "connect".
  - `ApiTimeout` (exit 1): connected, but the server did not answer (or stopped streaming) in time.
  - `HttpStatusError` (exit 1): the server answered with a non-2xx status; `status` and `body` (an excerpt).
  - `ProtocolError` (exit 1): the answer is not what the OpenAI API promises — non-JSON body,
    missing fields, connection dropped mid-response.
    - `StreamError`: a malformed or truncated server-sent-events stream, or an error event inside it.
- `ApiKeyError` (also `UsageError`, exit 2): the API key file is missing, unreadable or empty.
"""

from __future__ import annotations

from vllm_station.errors import StationError, Unreachable, UsageError


class ApiError(StationError):
    """Base of every error raised by `vllm_station.api`."""

    exit_code = 1


class ApiUnreachable(ApiError, Unreachable):
    """Nothing answered at the address: refused, DNS failure, or connect timeout (exit 3)."""

    exit_code = 3

    def __init__(self, message: str, *, kind: str, url: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.url = url


class ApiTimeout(ApiError):
    """Connected, but no (complete) answer within the timeout."""

    def __init__(self, message: str, *, url: str, timeout_s: float) -> None:
        super().__init__(message)
        self.url = url
        self.timeout_s = timeout_s


class HttpStatusError(ApiError):
    """The server answered with a non-2xx HTTP status."""

    def __init__(self, message: str, *, url: str, status: int, body: str) -> None:
        super().__init__(message)
        self.url = url
        self.status = status
        self.body = body


class ProtocolError(ApiError):
    """The answer does not follow the OpenAI-compatible API (non-JSON, missing fields, dropped connection)."""

    def __init__(self, message: str, *, url: str = "") -> None:
        super().__init__(message)
        self.url = url


class StreamError(ProtocolError):
    """A malformed or truncated server-sent-events stream, or an error event inside the stream."""


class ApiKeyError(ApiError, UsageError):
    """The API key could not be loaded (exit 2)."""

    exit_code = 2
