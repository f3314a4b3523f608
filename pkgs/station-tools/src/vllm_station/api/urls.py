"""How a server URL is shown: in reports, tables and textfiles, never with its credentials.

The one home of the display form every verb prints (`station smoke`'s and `station probe`'s `base_url`).
Parsing and checking a `--base-url` is `api.client.split_base_url`.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def display_url(url: str) -> str:
    """The URL without user:password@ (never print credentials)."""
    p = urlsplit(url)
    if p.username is None and p.password is None:
        return url
    host = p.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{p.port}" if p.port else "")
    return urlunsplit((p.scheme, netloc, p.path, p.query, p.fragment))
