"""Every option of every subcommand, fed hostile values: exit 2 with a message, or a value in range.

The walk covers `station <command> [verb] --option VALUE` for every command in `cli.COMMANDS` (and
every verb of commands with verbs). A numeric option must use a bounded type from
`vllm_station.argtypes` (a bare `type=int`/`type=float` accepts nan, inf, -1 and 10**30); any other
`type=` (lists, URLs, sizes) must turn each hostile value into an argparse error or a value, never a
traceback. The values are only parsed: no command runs.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_station import argtypes, cli

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
INT_TEXT = re.compile(r"[+-]?[0-9]{1,30}")

HOSTILE = ["nan", "NaN", "inf", "-inf", "-1", "0", "1e30", "99999999999999999999", "1e-30", "abc", "", " "]


def _walk(parser: argparse.ArgumentParser, path: list[str]) -> Iterator[tuple[list[str], argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, [*path, name])
        elif action.option_strings and action.type is not None:
            yield path, action


def _options() -> list[tuple[list[str], argparse.Action]]:
    found = []
    for name in cli.COMMANDS:
        try:
            parser = cli.build_parser(name)
        except cli.CommandUnavailable:
            continue
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        found.extend(_walk(sub.choices[name], [name]))
    return found


OPTIONS = _options()
IDS = [" ".join([*p, a.option_strings[-1]]) for p, a in OPTIONS]


def test_the_walk_sees_the_numeric_options() -> None:
    """A walk that found nothing would pass everything below."""
    assert "smoke --timeout" in IDS and "prestart --max-file-pages-gib" in IDS and "simulate --port" in IDS
    assert "pair wait-worker --timeout" in IDS and "verify --expect-shards" in IDS
    assert len(OPTIONS) >= 30


@pytest.mark.parametrize(("path", "action"), OPTIONS, ids=IDS)
def test_numeric_options_are_bounded(path: list[str], action: argparse.Action) -> None:
    assert action.type not in (int, float), (
        f"station {' '.join(path)} {action.option_strings[-1]}: type={action.type.__name__} accepts nan, "
        "inf, "
        "-1 and 10**30; use a bounded type from vllm_station.argtypes"
    )


@pytest.mark.parametrize(("path", "action"), OPTIONS, ids=IDS)
def test_hostile_values_are_usage_errors_or_in_range(
    path: list[str], action: argparse.Action, capsys: pytest.CaptureFixture[str]
) -> None:
    convert = action.type
    assert callable(convert)
    opt = action.option_strings[-1]
    for value in HOSTILE:
        try:
            got = convert(value)
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            code = cli.main([*path, f"{opt}={value}"])
            err = capsys.readouterr().err
            assert code == 2, f"station {' '.join(path)} {opt}={value!r}: exit {code}"
            assert opt in err and "Traceback" not in err, err
            continue
        if isinstance(convert, argtypes.Bounded):
            assert isinstance(got, int | float) and math.isfinite(got)
            assert convert.lo <= got <= convert.hi, (opt, value, got)
        elif isinstance(got, int | float):
            pytest.fail(f"{opt}: a custom type returned a bare number {got!r} for {value!r}; use argtypes")
        elif isinstance(got, list):  # lists of numbers (bench --concurrency 1,8,32): each bounded
            assert all(isinstance(v, int | float) and math.isfinite(v) and v > 0 for v in got), (opt, got)
        else:
            assert isinstance(got, str | Path), (opt, value, got)


@settings(max_examples=300, deadline=None)
@given(
    lo=st.integers(min_value=-1000, max_value=1000),
    span=st.integers(min_value=0, max_value=10**6),
    text=st.one_of(
        st.integers(min_value=-(10**7), max_value=10**7).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.text(max_size=12),
    ),
)
def test_bounded_int_accepts_exactly_its_range(lo: int, span: int, text: str) -> None:
    t = argtypes.number(int, lo=lo, hi=lo + span)
    # ASCII digits only: Python's int() also reads "٣" and "1_000", the shared types do not
    expected = int(text.strip()) if INT_TEXT.fullmatch(text.strip()) else None
    if expected is not None and lo <= expected <= lo + span:
        assert t(text) == expected
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="must be a whole number from"):
            t(text)


@settings(max_examples=300, deadline=None)
@given(value=st.floats(allow_nan=True, allow_infinity=True), zero_ok=st.booleans())
def test_seconds_refuse_nan_inf_and_out_of_range(value: float, zero_ok: bool) -> None:
    t = argtypes.seconds(zero_ok=zero_ok, hi=3600)
    ok = math.isfinite(value) and (value >= 0 if zero_ok else value > 0) and value <= 3600
    if ok:
        assert t(repr(value)) == value
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="seconds"):
            t(repr(value))


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    found: list[tuple[str, argparse.ArgumentParser]] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        found.append((path, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")

    for name in cli.COMMANDS:
        try:
            parser = cli.build_parser(name)
        except cli.CommandUnavailable:
            continue
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        walk(sub.choices[name], name)
    return found


@pytest.mark.parametrize(("path", "parser"), _parsers(), ids=[p for p, _ in _parsers()])
def test_every_help_renders(path: str, parser: argparse.ArgumentParser) -> None:
    """argparse %-formats help strings: a bare "90%" in one is a traceback at `--help` time."""
    text = parser.format_help()
    assert path.split()[-1] in text
