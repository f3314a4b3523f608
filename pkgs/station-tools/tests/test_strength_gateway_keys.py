"""Mutants of `vllm_station.commands.gateway` (station gateway keys; scripts/bench-mutation): every documented
bound exactly on it and one past it (a key 16-256 characters, a name 1-64, the stations' key at least 8, a key
file at most 64 KiB), keys told apart in more than case, and the rendered maps as literal text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllm_station import cli, redact
from vllm_station.commands import gateway
from vllm_station.commands.gateway import (
    KeySet,
    collect,
    read_keys,
    read_upstream_key,
    render_keys_map,
    render_upstream_map,
)
from vllm_station.errors import UsageError


@pytest.fixture(autouse=True)
def _clean_registry() -> Iterator[None]:
    yield
    redact.forget_all()


def keyfile(tmp_path: Path, text: str, name: str = "key-alice") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def refusal(fn: object, *args: object) -> str:
    with pytest.raises(UsageError) as err:
        fn(*args)  # type: ignore[operator]
    return str(err.value)


@pytest.mark.parametrize("length", [16, 256])
def test_a_key_exactly_on_its_length_bounds_is_read(tmp_path: Path, length: int) -> None:
    key = ("Ab1-._~+/=" * 30)[:length]
    assert read_keys(keyfile(tmp_path, f"# rotated\n\n  {key}  \n")) == [key]


@pytest.mark.parametrize("length", [15, 257])
def test_a_key_one_past_its_length_bounds_is_refused(tmp_path: Path, length: int) -> None:
    path = keyfile(tmp_path, "k" * 20 + "\n" + "x" * length + "\n")
    assert refusal(read_keys, path) == (
        f"{path} line 2: a key is 16-256 characters of A-Z a-z 0-9 - . _ ~ + / = (this one has {length} "
        "characters)"
    )


def test_a_key_with_a_character_not_allowed_says_so_not_the_key(tmp_path: Path) -> None:
    path = keyfile(tmp_path, "abcdefgh ijklmnop\n")
    text = refusal(read_keys, path)
    assert text == (
        f"{path} line 1: a key is 16-256 characters of A-Z a-z 0-9 - . _ ~ + / = (this one has 17 "
        "characters, some of them not allowed)"
    )


def test_the_same_key_twice_in_any_case_is_refused(tmp_path: Path) -> None:
    path = keyfile(tmp_path, "abcdefghijklmnopq\nABCDEFGHIJKLMNOPQ\n")
    assert refusal(read_keys, path) == f"{path} line 2: the same key comes twice in this file (in any case)"
    empty = keyfile(tmp_path, "# only a comment\n\n", "key-empty")
    assert refusal(read_keys, empty) == f"{empty} holds no key (one a line; empty and # lines are skipped)"


def test_the_key_file_size_exactly_on_64_kib(tmp_path: Path) -> None:
    key = "k" * 16 + "\n"
    filler = "#" * (64 * 1024 - len(key) - 1) + "\n"  # comment lines count toward the size, not as keys
    path = keyfile(tmp_path, filler + key)
    assert path.stat().st_size == 64 * 1024
    assert read_keys(path) == ["k" * 16]
    path.write_text(filler + key + "\n")
    assert refusal(read_keys, path) == f"the key file {path} is larger than 64 KiB"


@pytest.mark.parametrize(("name", "ok"), [("a", True), ("x" * 64, True), ("x" * 65, False), ("", False),
                                          ("al.ice", False), ("Al_i-ce9", True)])  # fmt: skip
def test_key_names_exactly_on_their_bounds(tmp_path: Path, name: str, ok: bool) -> None:
    path = keyfile(tmp_path, "k" * 16)
    keys = KeySet()
    if ok:
        keys.add(name, path)
        assert keys.keys == {name: ["k" * 16]} and keys.count() == 1
    else:
        assert refusal(keys.add, name, path) == (
            f"{path}: the key name {name!r} is not 1-64 characters of A-Z a-z 0-9 _ -"
        )


def test_two_names_holding_one_key_in_another_case_are_refused(tmp_path: Path) -> None:
    alice, bob = keyfile(tmp_path, "k" * 16 + "A"), keyfile(tmp_path, "K" * 16 + "a", "key-bob")
    keys = KeySet()
    keys.add("alice", alice)
    assert refusal(keys.add, "bob", bob) == (
        f"{bob} (bob) holds a key that {alice} (alice) holds too (keys are told apart in more than case)"
    )
    assert refusal(keys.add, "alice", bob) == f"the key name alice comes twice: {alice} and {bob}"


# (its 4096-character cap is not tested here: registering a secret that long for redaction takes ~35 s)
@pytest.mark.parametrize(("length", "ok"), [(7, False), (8, True)])
def test_the_stations_key_exactly_on_its_bounds(tmp_path: Path, length: int, ok: bool) -> None:
    path = keyfile(tmp_path, "u" * length + "\n", "upstream")
    if ok:
        assert read_upstream_key(path) == "u" * length
    else:
        assert refusal(read_upstream_key, path) == (
            f"{path}: the stations' key must be one line of at least 8 characters of A-Z a-z 0-9 - . _ ~ + "
            "/ ="
        )


def test_the_maps_as_nginx_reads_them(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    keyfile(tmp_path / "keys", "b" * 16 + "\n" + "c" * 16 + "\n", "keydir_zed")
    keyfile(tmp_path / "keys", "d" * 16, ".keydir_hidden")
    keyfile(tmp_path / "keys", "e" * 16, "other_name")
    (tmp_path / "keys" / "keydir_dir").mkdir()
    keys = collect([f"alice={keyfile(tmp_path, 'a' * 16)}"], [tmp_path / "keys"], "keydir_")
    assert render_keys_map(keys) == (
        "# Written by `station gateway keys` at the gateway's start; API key -> \"KEY NAME\". Do not edit.\n"
        f'"\\\\{"a" * 16}" "{"a" * 16} alice";\n'
        f'"\\\\{"b" * 16}" "{"b" * 16} zed";\n'
        f'"\\\\{"c" * 16}" "{"c" * 16} zed";\n'
    )
    assert render_upstream_map("u" * 8) == (
        "# Written by `station gateway keys`: the Authorization the gateway sends to the stations.\n"
        'default "Bearer uuuuuuuu";\n'
    )
    assert render_upstream_map(None) == (
        "# Written by `station gateway keys`: the Authorization the gateway sends to the stations.\n"
        'default "";\n'
    )


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (["alice"], "--key wants NAME=FILE, got 'alice'"),
        (["alice="], "--key wants NAME=FILE, got 'alice='"),
        ([], "no API keys found (no --key and no --key-dir): the gateway would refuse every request"),
    ],
)
def test_collect_refusals(specs: list[str], message: str) -> None:
    assert refusal(collect, specs, [], "keydir_") == message


def test_the_written_maps_are_private(tmp_path: Path) -> None:
    out = tmp_path / "keys.map"
    gateway.write_private(out, "x\n")
    assert out.read_text() == "x\n" and out.stat().st_mode & 0o777 == 0o400


# ---- the command -------------------------------------------------------------------------------------------

KEYS_HELP = """\
usage: station gateway keys [-h] --output FILE --upstream-out UPSTREAM_OUT [--key NAME=FILE]
                            [--key-dir DIR] [--prefix PREFIX] [--upstream-key-file FILE] [--json]

API key files -> the nginx map of key -> name (run before nginx starts)

options:
  -h, --help            show this help message and exit
  --output FILE         write the key map (nginx map entries) to this file
  --upstream-out UPSTREAM_OUT
                        the upstream Authorization map to write
  --key NAME=FILE       the keys of NAME (repeatable)
  --key-dir DIR         every regular file PREFIXNAME in DIR holds the keys of NAME (repeatable)
  --prefix PREFIX       --key-dir: only files named PREFIX… (default: all)
  --upstream-key-file FILE
                        the key the stations expect (default: no Authorization to the stations)
  --json                print what was written (names, not keys) as JSON on stdout
"""
GATEWAY_HELP = """\
usage: station gateway [-h] VERB ...

the nginx gateway's start step: API key files into the map it includes

positional arguments:
  VERB
    keys      API key files -> the nginx map of key -> name (run before nginx starts)

options:
  -h, --help  show this help message and exit

exit: 0 written, 1 an output could not be written, 2 bad arguments or key files
"""


@pytest.mark.parametrize(("argv", "text"), [(["gateway", "keys", "--help"], KEYS_HELP),
                                            (["gateway", "--help"], GATEWAY_HELP)])  # fmt: skip
def test_the_help_whole(argv: list[str], text: str, capsys: pytest.CaptureFixture[str],
                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("COLUMNS", "100")
    assert cli.main(argv) == 0
    assert capsys.readouterr().out == text


def test_the_command_writes_both_maps_and_says_what(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "d").mkdir()
    keyfile(tmp_path / "d", "b" * 16 + "\n" + "c" * 16 + "\n", "cred_bob")
    alice = keyfile(tmp_path, "a" * 16)
    upstream = keyfile(tmp_path, "u" * 8, "up")
    out, up = tmp_path / "keys.map", tmp_path / "up.map"
    code = cli.main(["gateway", "keys", "--output", str(out), "--upstream-out", str(up),
                     "--key", f"alice={alice}", "--key-dir", str(tmp_path / "d"), "--prefix", "cred_",
                     "--upstream-key-file", str(upstream), "--json"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0
    assert json.loads(captured.out) == {"out": str(out), "keys": 3, "names": {"alice": 1, "bob": 2},
                                        "upstream_key": True}  # fmt: skip
    assert captured.err == (
        f"vllm-station gateway: 3 keys for 2 names (alice, bob) -> {out}; the stations get the upstream "
        "key\n"
    )
    assert up.read_text().endswith('default "Bearer uuuuuuuu";\n') and up.stat().st_mode & 0o777 == 0o400
    assert out.read_text().count(" bob\";\n") == 2
    code = cli.main(["gateway", "keys", "--output", str(out), "--upstream-out", str(up),
                     "--key", f"alice={alice}"])  # fmt: skip
    assert code == 0 and capsys.readouterr().err == (
        f"vllm-station gateway: 1 keys for 1 names (alice) -> {out}; no Authorization goes to the stations\n"
    )
    assert up.read_text().endswith('default "";\n')


def test_a_bad_stations_key_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, up = tmp_path / "keys.map", tmp_path / "up.map"
    code = cli.main(["gateway", "keys", "--output", str(out), "--upstream-out", str(up),
                     "--key", f"alice={keyfile(tmp_path, 'a' * 16)}",
                     "--upstream-key-file", str(keyfile(tmp_path, 'short', 'up'))])  # fmt: skip
    assert code == 2 and not out.exists() and not up.exists()
    assert "the stations' key must be one line of at least 8 characters" in capsys.readouterr().err


def test_a_map_that_cannot_be_written_names_its_option(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    for option in ("--output", "--upstream-out"):
        with pytest.raises(gateway.WriteFailed) as err:
            if option == "--output":
                gateway.write_private(tmp_path / "d", "x\n")  # the default option
            else:
                gateway.write_private(tmp_path / "d", "x\n", option)
        assert str(err.value) == f"{option} {tmp_path / 'd'}: is a directory; it is not replaced"


@pytest.mark.parametrize("option", ["--output", "--upstream-out"])
def test_an_output_that_is_a_directory_is_refused_before_any_work(
    tmp_path: Path, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "d").mkdir()
    paths = {"--output": str(tmp_path / "o"), "--upstream-out": str(tmp_path / "u"),
             option: str(tmp_path / "d")}  # fmt: skip
    code = cli.main(["gateway", "keys", "--output", paths["--output"],
                     "--upstream-out", paths["--upstream-out"],
                     "--key", f"a={keyfile(tmp_path, 'a' * 16)}"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert f"error: argument {option}: {tmp_path / 'd'}: is a directory; give a file name" in err
    assert cli.main(["gateway"]) == 2
    assert "the following arguments are required: VERB" in capsys.readouterr().err


def test_the_json_report_as_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert cli.main(["gateway", "keys", "--output", str(out), "--upstream-out", str(tmp_path / "u"),
                     "--key", f"a={keyfile(tmp_path, 'a' * 16)}", "--json"]) == 0  # fmt: skip
    assert capsys.readouterr().out == (
        f'{{\n  "out": "{out}",\n  "keys": 1,\n  "names": {{\n    "a": 1\n  }},\n'
        '  "upstream_key": false\n}\n'
    )


def test_unreadable_files_and_directories(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_bytes(b"\xff\xfe" + b"k" * 16)
    assert refusal(read_keys, bad) == f"the key file {bad} is not UTF-8 text"
    assert refusal(read_upstream_key, bad) == f"the upstream key file {bad} is not UTF-8 text"
    assert refusal(read_keys, tmp_path).startswith(f"cannot read the key file {tmp_path}: ")
    assert refusal(read_upstream_key, tmp_path / "none") == (
        f"cannot read the upstream key file {tmp_path / 'none'}: No such file or directory"
    )
    assert refusal(collect, [], [tmp_path / "none"], "") == (
        f"cannot list the key directory {tmp_path / 'none'}: No such file or directory"
    )
    (tmp_path / "e1").mkdir()
    (tmp_path / "e2").mkdir()
    keyfile(tmp_path / "e1", "k" * 16, ".hidden")  # a dot file is never a key, whatever the prefix
    assert refusal(collect, [], [tmp_path / "e1", tmp_path / "e2"], "") == (
        f"no API keys found ({tmp_path / 'e1'}, {tmp_path / 'e2'}): the gateway would refuse every "
        "request"
    )


def test_a_key_file_path_holding_an_equals_sign(tmp_path: Path) -> None:
    (tmp_path / "a=b").mkdir()
    path = keyfile(tmp_path / "a=b", "k" * 16, "key")
    assert collect([f"alice={path}"], [], "").keys == {"alice": ["k" * 16]}


def test_keys_read_are_registered_for_redaction(tmp_path: Path) -> None:
    read_keys(keyfile(tmp_path, "a" * 16 + "\n"))
    read_upstream_key(keyfile(tmp_path, "u" * 9, "up"))
    assert redact.redact(f"x {'a' * 16} {'u' * 9}") == "x *** ***"


def test_a_short_key_of_allowed_characters_is_only_too_short(tmp_path: Path) -> None:
    path = keyfile(tmp_path, "ABCDEFGH\n")
    assert refusal(read_keys, path).endswith("(this one has 8 characters)")


@pytest.mark.parametrize("option", ["--output", "--upstream-out"])
def test_a_device_as_a_map_is_refused_when_parsed(
    tmp_path: Path, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A map is replaced whole (a new file renamed over it): a character device is refused before any key
    is read, not after (exit 2, nothing written)."""
    paths = {"--output": str(tmp_path / "o"), "--upstream-out": str(tmp_path / "u"), option: "/dev/null"}
    code = cli.main(["gateway", "keys", "--output", paths["--output"],
                     "--upstream-out", paths["--upstream-out"],
                     "--key", f"a={keyfile(tmp_path, 'a' * 16)}"])  # fmt: skip
    assert code == 2 and not (tmp_path / "o").exists() and not (tmp_path / "u").exists()
    assert f"error: argument {option}: /dev/null: is a character device, not a regular file" in (
        capsys.readouterr().err
    )
