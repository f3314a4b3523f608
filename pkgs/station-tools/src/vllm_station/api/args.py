"""The endpoint options every command that talks to a server shares, defined once.

    def configure(parser):
        add_endpoint_args(parser)                     # --base-url, --api-key-file, --ca-file
    def run(args):
        ep = endpoint_from_args(args)                 # validated; the key read by `load_api_key`'s rule
        with ep.client(timeout=30) as api: ...

The key rule is `load_api_key`'s (file, else `$STATION_API_KEY`, else `$OPENAI_API_KEY`); reading it
registers it with `vllm_station.redact`, so no output of the command can show it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from vllm_station.api.client import (
    DEFAULT_CONNECT_TIMEOUT_S,
    ApiClient,
    load_api_key,
    split_base_url,
    tls_context,
)

KEY_HELP = "file holding the API key (default: $STATION_API_KEY, else $OPENAI_API_KEY, else no key)"


def add_endpoint_args(
    parser: argparse.ArgumentParser, *, default_url: str | None = None, url_help: str | None = None
) -> None:
    """--base-url (required unless `default_url`), --api-key-file, --ca-file."""
    parser.add_argument(
        "--base-url",
        required=default_url is None,
        default=default_url,
        metavar="URL",
        help=url_help
        or "server root or its OpenAI /v1 base URL, e.g. http://127.0.0.1:8000 (or the gateway's https URL)"
        + (f" (default {default_url})" if default_url else ""),
    )
    parser.add_argument("--api-key-file", metavar="FILE", help=KEY_HELP)
    parser.add_argument(
        "--ca-file",
        metavar="PEM",
        help="verify https against this CA bundle only (a gateway with a private CA); default: system CAs",
    )


@dataclass(frozen=True)
class Endpoint:
    """A validated server address, its API key (or None) and its CA bundle (or None)."""

    base_url: str
    root_url: str
    api_url: str
    api_key: str | None
    ca_file: Path | None

    def client(self, timeout: float, *, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> ApiClient:
        return ApiClient(
            self.base_url, self.api_key, timeout, connect_timeout=connect_timeout, ca_file=self.ca_file
        )


def endpoint_from_args(args: argparse.Namespace) -> Endpoint:
    """The endpoint the options name; bad values are `UsageError`/`ApiKeyError` (exit 2)."""
    base_url: str = args.base_url
    root, api = split_base_url(base_url)
    ca = getattr(args, "ca_file", None)
    ca_file = Path(ca) if ca else None
    if ca_file is not None:
        tls_context(ca_file)  # fail now, before any request, on a missing or broken bundle
    return Endpoint(base_url, root, api, load_api_key(getattr(args, "api_key_file", None)), ca_file)
