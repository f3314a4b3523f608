"""The metric names a PromQL expression selects (rules, dashboard panels), for the metric-name test.

Not a PromQL parser: a tokenizer good for the expressions this project writes. String literals, label
matchers `{…}`, range and offset durations `[…]`, grouping lists `by (…)`/`on (…)`/… and numbers are
dropped; what remains of the identifiers is a metric name unless it calls a function (`name(`) or is a
keyword. checks/test_monitoring_rules.py pins it on every rule (each rule names at least one metric).
"""

from __future__ import annotations

import re

KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
            "offset", "inf", "nan"}  # fmt: skip
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_NUMBERS = re.compile(r"(?<![\w:])\d+(?:\.\d+)?(?:e[+-]?\d+)?")
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*(?=\s*(\()?)")


def metric_names(expr: str) -> set[str]:
    text = _STRINGS.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _NUMBERS.sub(" ", text)
    names = set()
    for m in _IDENT.finditer(text):
        if m.group(1) or m.group(0) in KEYWORDS:
            continue
        names.add(m.group(0))
    return names


def template_queries(text: str) -> list[str]:
    """The `query "…"` calls inside an alert annotation's template."""
    return [q.encode().decode("unicode_escape") for q in re.findall(r'query\s+"((?:[^"\\]|\\.)*)"', text)]
