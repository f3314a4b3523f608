"""`station bench`'s numbers are checked when the command line is parsed: every numeric option has a
range (exit 2 naming the option and the range), and the plan's size per level has a budget, before a
prompt is built or a request sent. Values that once allocated tens of GB run in a child process under
a 2 GiB address-space limit, so a regression fails the test instead of the machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from faultserver import FaultServer, fake_openai_routes
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_station import argtypes
from vllm_station.cli import main
from vllm_station.commands.bench import cli as bench_cli
from vllm_station.commands.bench.modes import Count

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
MAX_CONCURRENCY = 4096
MAX_TOKENS = 4 * 2**20
MAX_LEVELS = 32
MAX_COUNT = 100000
MAX_PER_USER = 1000


@pytest.fixture(scope="module")
def srv() -> Iterator[FaultServer]:
    with FaultServer(fake_openai_routes("fake")) as s:
        yield s


# option → (mode, bad values, the range its message must name)
BAD = {
    "--concurrency": ("sweep", ["100000000", "0", "-1", "nan", "1,8,4097", "x", ""], "from 1 to 4,096"),
    "--lengths": ("prefill", ["99999999999k", "0", "-1k", "nan", "4097k", "1.5k"], "from 1 to 4096k"),
    "--warmup": ("sweep", ["-1", "nan", "100001", "1001x", "1e3"], "from 0 to 100,000, or 0x to 1,000x"),
    "--requests": ("sweep", ["0", "-1", "nan", "100001", "1001x", "0x"], "from 1 to 100,000, or 1x to"),
    "--repeats": ("burst", ["0", "-1", "nan", "101"], "from 1 to 100"),
    # argtypes' own types: their message is `describe()`d (checked against the numbers below)
    "--input-len": ("sweep", ["0", "-1", "nan", str(4 * 1024 * 1024 + 1)], (1, 4 * 1024 * 1024)),
    "--output-len": ("sweep", ["0", "-1", "nan", "1048577"], (1, 1024 * 1024)),
    "--temperature": ("sweep", ["nan", "inf", "-1", "2.5"], (0, 2)),
    "--timeout": ("sweep", ["nan", "inf", "0", "-1", "86401"], (0, 86400)),
    "--seed": ("sweep", ["-1", "nan", str(2**32)], (0, 2**32 - 1)),
}


def _range_text(option: str, rng: str | tuple[int, int]) -> str:
    if isinstance(rng, str):
        return rng
    parser = argparse.ArgumentParser()
    bench_cli.configure(parser)
    action = next(a for a in parser._actions if option in a.option_strings)
    assert isinstance(action.type, argtypes.Bounded)
    assert (action.type.lo, action.type.hi) == rng  # the range this test expects is the one in use
    return action.type.describe()


CASES = [
    pytest.param(opt, mode, v, rng, id=f"{opt}={v}") for opt, (mode, vals, rng) in BAD.items() for v in vals
]


@pytest.mark.parametrize(("option", "mode", "value", "rng"), CASES)
def test_out_of_range_is_exit_2_naming_option_and_range(
    srv: FaultServer,
    capsys: pytest.CaptureFixture[str],
    option: str,
    mode: str,
    value: str,
    rng: str | tuple[int, int],
) -> None:
    before = len(srv.requests)
    code = main(["bench", mode, "--base-url", srv.url, "--no-progress", f"{option}={value}"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert option in err and _range_text(option, rng) in err, err
    assert "Traceback" not in err
    assert len(srv.requests) == before  # nothing was sent


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["sweep", "-c", "4096", "--requests", "1000x"], "--requests"),  # 4,096,000 requests
        (["prefill", "--lengths", "4096k", "--requests", "100"], "--lengths"),  # 100 × 4M prompt tokens
        (["burst", "-c", "4096", "--output-len", "1048576"], "--output-len"),  # 4 G tokens in one burst
        (["sweep", "-c", "64", "--input-len", "1000000", "--requests", "10x"], "--input-len"),
    ],
)
def test_plan_budget_is_exit_2_before_anything_is_built(
    srv: FaultServer, capsys: pytest.CaptureFixture[str], argv: list[str], names: str
) -> None:
    before = len(srv.requests)
    t0 = time.monotonic()
    code = main(["bench", *argv, "--base-url", srv.url, "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert names in err and ("per level" in err or "one repeat" in err), err
    assert time.monotonic() - t0 < 2.0  # refused from the plan, not after building prompts
    assert len(srv.requests) == before


def _limited() -> None:
    limit = 2 * 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@pytest.mark.parametrize(
    "argv",
    [
        ["sweep", "--concurrency", "100000000"],
        ["prefill", "--lengths", "99999999999k"],
    ],
    ids=["concurrency-1e8", "lengths-1e11k"],
)
def test_the_reported_huge_values_are_refused_in_a_bounded_child(srv: FaultServer, argv: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("STATION_API_KEY", "OPENAI_API_KEY")}
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_station", "bench", *argv, "--base-url", srv.url, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        preexec_fn=_limited,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert argv[1] in proc.stderr


# ---- the parsers themselves, property-based --------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=-(10**13), max_value=10**13), min_size=1, max_size=40), st.booleans())
def test_int_list_accepts_exactly_the_range(values: list[int], k: bool) -> None:
    conv = bench_cli._int_list(MAX_TOKENS if k else MAX_CONCURRENCY, k=k)
    hi = MAX_TOKENS if k else MAX_CONCURRENCY
    text = ",".join(str(v) for v in values)
    ok = all(1 <= v <= hi for v in values) and len(values) <= MAX_LEVELS
    if ok:
        assert conv(text) == values
    else:
        with pytest.raises(argparse.ArgumentTypeError):
            conv(text)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(10**12), max_value=10**12), st.booleans())
def test_k_suffix_and_count_suffix(n: int, per_user: bool) -> None:
    lengths = bench_cli._int_list(MAX_TOKENS, k=True)
    if 1 <= n * 1024 <= MAX_TOKENS:
        assert lengths(f"{n}k") == [n * 1024]
    else:
        with pytest.raises(argparse.ArgumentTypeError):
            lengths(f"{n}k")
    count = bench_cli._count(1)
    hi = MAX_PER_USER if per_user else MAX_COUNT
    text = f"{n}{'x' if per_user else ''}"
    if 1 <= n <= hi:
        c = Count.parse(count(text))
        assert (c.value, c.per_user) == (n, per_user)
    else:
        with pytest.raises(argparse.ArgumentTypeError):
            count(text)
