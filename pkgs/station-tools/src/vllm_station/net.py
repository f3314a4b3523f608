"""Small network helpers shared by commands: a bounded TCP connect probe, host literals for URLs."""

from __future__ import annotations

import errno
import os
import socket


def bare_host(host: str) -> str:
    """`[::1]` → `::1`: the form sockets take (URLs need the brackets, see `url_host`)."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def url_host(host: str) -> str:
    """`::1` → `[::1]`: an IPv6 literal as a URL's host part; names and IPv4 unchanged."""
    host = bare_host(host)
    return f"[{host}]" if ":" in host else host


def tcp_probe(host: str, port: int, timeout: float, *, source: str | None = None) -> tuple[bool, str]:
    """Does something accept a TCP connection on host:port within `timeout` seconds?

    Returns (True, "accepts connections") or (False, why not: "connection refused", "no answer
    within 2 s", "no route to host", "cannot resolve …"). The connection is closed at once; nothing
    is sent. `host` may be an IPv4/IPv6 literal (bare or in brackets) or a name; `source` binds the
    local address (the rail address, so the probe takes the rail).
    """
    target = bare_host(host)
    try:
        conn = socket.create_connection(
            (target, port), timeout=timeout, source_address=(bare_host(source), 0) if source else None
        )
    except TimeoutError:
        return False, f"no answer within {timeout:g} s"
    except socket.gaierror as err:
        return False, f"cannot resolve {target}: {err.strerror or err}"
    except OSError as err:
        if err.errno == errno.ECONNREFUSED:
            return False, "connection refused"
        return False, (os.strerror(err.errno) if err.errno else str(err)).lower()
    conn.close()
    return True, "accepts connections"
