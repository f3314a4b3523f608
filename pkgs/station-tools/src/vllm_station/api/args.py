"""The endpoint options every command that talks to a server shares, defined once.

    def configure(parser):
        add_endpoint_args(parser)                     # --base-url, --api-key-file, --ca-file (options)
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

from vllm_station import options
from vllm_station.api.client import (
    DEFAULT_CONNECT_TIMEOUT_S,
    ApiClient,
    load_api_key,
    split_base_url,
    tls_context,
)

KEY_HELP = options.KEY_HELP


def add_endpoint_args(parser: argparse.ArgumentParser, *, from_config: bool = False) -> None:
    """--base-url (default `options.default_base_url()`; `from_config`: the verb's config first),
    --api-key-file, --ca-file: made by `vllm_station.options`, the one home of their default and help."""
    options.add_base_url(parser, from_config=from_config)
    options.add_api_key_file(parser)
    options.add_ca_file(parser)


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
