"""One API-key rule for every command: --api-key-file, else $STATION_API_KEY, else $OPENAI_API_KEY, else none.

Unit cases for `api.load_api_key`, then each command that talks to a server (smoke, wait-ready, bench)
against `station simulate` requiring a key: the rule decides which key reaches the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from simserver import SimServer

from vllm_station.api import ApiKeyError, load_api_key
from vllm_station.cli import main
from vllm_station.sim.config import SimConfig

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
API_KEY_ENVS = ("STATION_API_KEY", "OPENAI_API_KEY")

RIGHT = "sk-right-0123456789"
WRONG = "sk-wrong-9876543210"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"STATION_API_KEY": RIGHT}, RIGHT),
        ({"OPENAI_API_KEY": RIGHT}, RIGHT),
        ({"STATION_API_KEY": RIGHT, "OPENAI_API_KEY": WRONG}, RIGHT),  # STATION_API_KEY first
        ({"STATION_API_KEY": f"  {RIGHT}\n"}, RIGHT),  # stripped
        ({"STATION_API_KEY": "", "OPENAI_API_KEY": WRONG}, None),  # set but empty: no key, no fallback
        ({"OPENAI_API_KEY": " "}, None),
    ],
)
def test_env_precedence(env: dict[str, str], expected: str | None) -> None:
    assert load_api_key(None, env=env) == expected


def test_order_is_station_then_openai() -> None:
    assert API_KEY_ENVS == ("STATION_API_KEY", "OPENAI_API_KEY")


def test_file_wins_over_both_variables(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text(f"{RIGHT}\n")
    env = {"STATION_API_KEY": WRONG, "OPENAI_API_KEY": WRONG}
    assert load_api_key(key, env=env) == RIGHT
    assert load_api_key(str(key), env=env) == RIGHT


def test_missing_file_is_a_usage_error_even_with_a_variable_set(tmp_path: Path) -> None:
    with pytest.raises(ApiKeyError, match=r"API key file .*nope: not found \(--api-key-file\)") as err:
        load_api_key(tmp_path / "nope", env={"STATION_API_KEY": RIGHT})
    assert err.value.exit_code == 2


def test_bad_openai_key_names_the_variable_not_the_key() -> None:
    with pytest.raises(ApiKeyError, match=r"^\$OPENAI_API_KEY: the key contains whitespace") as err:
        load_api_key(None, env={"OPENAI_API_KEY": f"{RIGHT} {RIGHT}"})
    assert RIGHT not in str(err.value) and err.value.exit_code == 2


# ---- the rule, command by command, against a server that requires RIGHT ---------------------------------
COMMANDS = {
    "smoke": ["--timeout", "10"],
    "wait-ready": ["--timeout", "10"],
    "bench": ["-c", "1", "--requests", "1", "--warmup", "0", "--output-len", "2", "--no-progress"],
}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(SimConfig(ttft=0.0, itl=0.0, output_len=3, api_key=RIGHT)) as s:
        yield s


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in API_KEY_ENVS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _run(command: str, sim: SimServer, *extra: str) -> int:
    return main([command, "--base-url", sim.base_url, *COMMANDS[command], *extra])


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(
    ("env", "ok"),
    [
        ({"OPENAI_API_KEY": RIGHT}, True),
        ({"STATION_API_KEY": RIGHT, "OPENAI_API_KEY": WRONG}, True),
        ({"STATION_API_KEY": WRONG, "OPENAI_API_KEY": RIGHT}, False),
        ({"STATION_API_KEY": "", "OPENAI_API_KEY": RIGHT}, False),
        ({}, False),
    ],
)
def test_command_sends_the_key_the_rule_picks(
    command: str,
    env: dict[str, str],
    ok: bool,
    sim: SimServer,
    clean_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    rc = _run(command, sim)
    out = capsys.readouterr()
    if ok:
        assert rc == 0, out.err
    else:
        assert rc == 1 and "401" in out.out + out.err
    assert RIGHT not in out.out + out.err and WRONG not in out.out + out.err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_command_key_file_wins_over_the_variables(
    command: str, sim: SimServer, clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("STATION_API_KEY", WRONG)
    clean_env.setenv("OPENAI_API_KEY", WRONG)
    key = tmp_path / "key"
    key.write_text(RIGHT + "\n")
    assert _run(command, sim, "--api-key-file", str(key)) == 0


@pytest.mark.parametrize("command", [*COMMANDS, "simulate"])
def test_command_missing_key_file_exits_2(
    command: str,
    sim: SimServer,
    clean_env: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    clean_env.setenv("STATION_API_KEY", RIGHT)
    missing = tmp_path / "no-key"
    if command == "simulate":  # the server's own key: a missing file stops it before it listens
        rc = main(["simulate", "--port", "0", "--api-key-file", str(missing)])
    else:
        rc = _run(command, sim, "--api-key-file", str(missing))
    assert rc == 2
    err = capsys.readouterr().err
    assert f"station {command}: error: API key file {missing}: not found (--api-key-file)" in err
    assert "Traceback" not in err
