"""Reading vLLM's Prometheus exposition (`GET /metrics`): the one parser `station bench` (its server-side
view of a level) and `station watchdog` (engine progress) share.

It knows the text format, not the metric names: those belong to the readers (and, on the Nix side, to the
rules and the dashboard).
"""

from __future__ import annotations


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum each metric name over its label sets."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if "{" in line and "}" in line:
            name = line[: line.index("{")]
            tail = line[line.rindex("}") + 1 :].split()
        else:
            name, *tail = line.split()
        if not tail:
            continue
        value_s = tail[0]  # a trailing timestamp may follow
        try:
            value = float(value_s)
        except ValueError:
            continue
        out[name] = out.get(name, 0.0) + value
    return out
