"""`station gateway keys`: API key files into the nginx map the gateway includes.

The maps it writes are read by a real nginx (Debian's; skipped with the reason when it is not installed)
with the same `map` blocks services.vllm-station.gateway renders: a key matches only itself, exactly
(a hash lookup of the token, which nginx compares case-insensitively, then an exact comparison with the
key found; keys that differ only in case are refused). Exit codes
through `station`'s main (one run as a real process); messages are checked before `station`'s redaction,
which would mask a key that slipped into one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from vllm_station.cli import main
from vllm_station.commands import gateway
from vllm_station.errors import StationError

ALICE = "sk-alice.0123456789+abc/DEF=="  # every character class a key may use
ALICE_OLD = "sk-alice-rotated_0123456789~x"
BOB = "bob-0123456789ABCDEFGH"
# Keys nginx could misread: `~` (a map's regular expression), `\t`/`\n` after the entry's backslash.
TILDE = "~tilde-0123456789abcdef"
TAB = "tn-0123456789abcdefghij"
UPSTREAM = "sk-upstream-0123456789"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def station(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    def run(*args: str) -> Run:
        rc = main(["gateway", "keys", *args])
        out = capsys.readouterr()
        return Run(rc, out.out, out.err)

    return run


def messages_of(args: list[str]) -> str:
    """The error `station gateway keys ARGS` stops with, as raised (before any redaction)."""
    parser = argparse.ArgumentParser()
    gateway.configure(parser)
    with pytest.raises(StationError) as err:
        gateway.run(parser.parse_args(["keys", *args]))
    return str(err.value)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    keys = tmp_path / "keys"
    keys.mkdir()
    return {
        "alice": write(keys / "alice", f"# rotated on Monday\n{ALICE}\n\n{ALICE_OLD}\n"),
        "bob": write(keys / "bob", BOB + "\n"),
        "upstream": write(tmp_path / "upstream", UPSTREAM + "\n"),
        "out": tmp_path / "run" / "keys.map",
        "upstream_out": tmp_path / "run" / "upstream.map",
    }


def outputs(f: dict[str, Path]) -> list[str]:
    f["out"].parent.mkdir(exist_ok=True)
    return ["--output", str(f["out"]), "--upstream-out", str(f["upstream_out"])]


def test_writes_both_maps_private_and_names_only(station: Callable[..., Run], files: dict[str, Path]) -> None:
    r = station(
        *outputs(files),
        "--key", f"alice={files['alice']}", "--key", f"bob={files['bob']}",
        "--upstream-key-file", str(files["upstream"]), "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report == {
        "out": str(files["out"]),
        "keys": 3,
        "names": {"alice": 2, "bob": 1},
        "upstream_key": True,
    }
    assert "3 keys for 2 names (alice, bob)" in r.stderr
    for path in (files["out"], files["upstream_out"]):
        assert stat.S_IMODE(path.stat().st_mode) == 0o400
    entries = [line for line in files["out"].read_text().splitlines() if not line.startswith("#")]
    assert entries == [
        f'"\\\\{ALICE}" "{ALICE} alice";',
        f'"\\\\{ALICE_OLD}" "{ALICE_OLD} alice";',
        f'"\\\\{BOB}" "{BOB} bob";',
    ]
    assert files["upstream_out"].read_text().splitlines()[-1] == f'default "Bearer {UPSTREAM}";'


def test_rerun_replaces_the_read_only_maps(station: Callable[..., Run], files: dict[str, Path]) -> None:
    assert station(*outputs(files), "--key", f"bob={files['bob']}").returncode == 0
    write(files["bob"], "bob-second-key-0123456789\n")
    r = station(*outputs(files), "--key", f"bob={files['bob']}")
    assert r.returncode == 0, r.stderr
    assert "bob-second-key" in files["out"].read_text()
    assert files["upstream_out"].read_text().splitlines()[-1] == 'default "";'  # no upstream key: no header
    assert sorted(p.name for p in files["out"].parent.iterdir()) == ["keys.map", "upstream.map"]


def test_key_directory_with_credential_prefix(
    station: Callable[..., Run], files: dict[str, Path], tmp_path: Path
) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    write(creds / "keydir_carol", "carol-0123456789abcdef\n")
    write(creds / "keydir_dave", "dave-0123456789abcdef\n")
    write(creds / "upstream-key", UPSTREAM)  # another credential in the same directory: not a key
    write(creds / ".keydir_hidden", "hidden-0123456789abcdef\n")
    r = station(*outputs(files), "--key-dir", f"{creds}/", "--prefix", "keydir_", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["names"] == {"carol": 1, "dave": 1}


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        ("short-key\n", "line 1: a key is 16-256 characters"),
        ('sk-has"quote-0123456789\n', "some of them not allowed"),
        ("sk-has space 0123456789\n", "some of them not allowed"),
        ("sk-dollar-$host-0123456789\n", "some of them not allowed"),
        ("\n# only a comment\n", "holds no key"),
        (f"{BOB}\n{BOB}\n", "line 2: the same key comes twice"),
    ],
)
def test_bad_key_files_change_nothing(
    station: Callable[..., Run], files: dict[str, Path], content: str, expect: str
) -> None:
    assert station(*outputs(files), "--key", f"bob={files['bob']}").returncode == 0
    before = files["out"].read_text()
    write(files["alice"], content)
    r = station(*outputs(files), "--key", f"alice={files['alice']}", "--key", f"bob={files['bob']}")
    assert r.returncode == 2
    assert expect in r.stderr
    assert str(files["alice"]) in r.stderr
    assert "Traceback" not in r.stderr
    assert files["out"].read_text() == before
    raw = messages_of([*outputs(files), "--key", f"alice={files['alice']}"])
    for line in content.splitlines():
        if len(line.strip()) >= 8:
            assert line.strip() not in raw


def test_the_same_key_under_two_names_is_refused(station: Callable[..., Run], files: dict[str, Path]) -> None:
    write(files["bob"], ALICE_OLD + "\n")
    r = station(*outputs(files), "--key", f"alice={files['alice']}", "--key", f"bob={files['bob']}")
    assert r.returncode == 2
    assert f"{files['bob']} (bob) holds a key that {files['alice']} (alice) holds too" in r.stderr
    assert not files["out"].exists()
    raw = messages_of([*outputs(files), "--key", f"alice={files['alice']}", "--key", f"bob={files['bob']}"])
    assert ALICE_OLD not in raw


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--key", "al ice=/x"], "'al ice' is not 1-64 characters"),
        (["--key", "alice"], "--key wants NAME=FILE"),
        ([], "no API keys found"),
        (["--key", "alice=/nonexistent/alice"], "cannot read the key file /nonexistent/alice"),
    ],
)
def test_usage_errors(
    station: Callable[..., Run], files: dict[str, Path], args: list[str], expect: str
) -> None:
    r = station(*outputs(files), *args)
    assert r.returncode == 2
    assert expect in r.stderr


def test_bad_upstream_key_is_refused(station: Callable[..., Run], files: dict[str, Path]) -> None:
    write(files["upstream"], 'two words"\n')
    r = station(
        *outputs(files), "--key", f"bob={files['bob']}", "--upstream-key-file", str(files["upstream"])
    )
    assert r.returncode == 2
    assert "the stations' key must be one line" in r.stderr
    raw = messages_of(
        [*outputs(files), "--key", f"bob={files['bob']}", "--upstream-key-file", str(files["upstream"])]
    )
    assert "two words" not in raw


def test_unwritable_output_is_exit_2_before_any_work(
    station: Callable[..., Run], files: dict[str, Path], tmp_path: Path
) -> None:
    """The output paths are checked when parsed (vllm_station.output): nothing is read or written."""
    r = station("--output", str(tmp_path / "missing" / "keys.map"), "--upstream-out", str(tmp_path / "u.map"),
                "--key", f"bob={files['bob']}")  # fmt: skip
    assert r.returncode == 2
    assert "argument --output:" in r.stderr and "missing does not exist" in r.stderr
    assert not (tmp_path / "u.map").exists()


def test_out_is_the_old_name_of_output(station: Callable[..., Run], files: dict[str, Path]) -> None:
    """`--out FILE` (the units of the last release) writes the same map, and says on stderr that the name
    is old; the help shows --output only; neither, or both, is a usage error naming --output."""
    assert station(*outputs(files), "--key", f"bob={files['bob']}").returncode == 0
    new_map = files["out"].read_text()
    files["out"].unlink()
    old = station("--out", str(files["out"]), "--upstream-out", str(files["upstream_out"]),
                  "--key", f"bob={files['bob']}")  # fmt: skip
    assert old.returncode == 0, old.stderr
    assert files["out"].read_text() == new_map
    assert "station gateway keys: --out is the old name of --output (deprecated" in old.stderr
    assert "old name" not in station(*outputs(files), "--key", f"bob={files['bob']}").stderr
    helped = station("--help")
    assert "--output FILE" in helped.stdout and "--out " not in helped.stdout
    neither = station("--upstream-out", str(files["upstream_out"]), "--key", f"bob={files['bob']}")
    assert neither.returncode == 2 and "one of the arguments --output is required" in neither.stderr
    both = station(*outputs(files), "--out", str(files["out"]), "--key", f"bob={files['bob']}")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_key_entry_is_a_plain_escaped_source() -> None:
    assert gateway.key_entry("~a.b+c/d=e-g_h", "alice") == '"\\\\~a.b+c/d=e-g_h" "~a.b+c/d=e-g_h alice";'


def test_keys_differing_only_in_case_are_refused(station: Callable[..., Run], files: dict[str, Path]) -> None:
    write(files["bob"], BOB.lower() + "\n")
    write(files["alice"], BOB + "\n")
    r = station(*outputs(files), "--key", f"alice={files['alice']}", "--key", f"bob={files['bob']}")
    assert r.returncode == 2
    assert "told apart in more than case" in r.stderr
    assert not files["out"].exists()
    write(files["bob"], f"{BOB}\n{BOB.upper()}\n")
    r = station(*outputs(files), "--key", f"bob={files['bob']}")
    assert r.returncode == 2 and "line 2: the same key comes twice" in r.stderr


# ---- the maps in a real nginx: the `map` blocks the gateway module renders, around the written files ----


@pytest.fixture(scope="module")
def nginx_with_maps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One nginx for every case: the maps of a real `station gateway keys` process, included by the
    `map` blocks the gateway module renders."""
    if not Path(NGINX).exists():
        pytest.skip("nginx is not installed: apt-get install nginx (scripts/check installs it)")
    tmp = tmp_path_factory.mktemp("nginx-maps")
    alice = write(tmp / "alice", f"{ALICE}\n{ALICE_OLD}\n")
    bob = write(tmp / "bob", f"{BOB}\n{TILDE}\n{TAB}\n")
    upstream = write(tmp / "upstream", UPSTREAM + "\n")
    keys_map, upstream_map = tmp / "keys.map", tmp / "upstream.map"
    r = subprocess.run(
        [sys.executable, "-m", "vllm_station", "gateway", "keys", "--output", str(keys_map),
         "--upstream-out", str(upstream_map), "--key", f"alice={alice}", "--key", f"bob={bob}",
         "--upstream-key-file", str(upstream)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "2 names (alice, bob)" in r.stderr
    for secret in (ALICE, ALICE_OLD, BOB, UPSTREAM):
        assert secret not in r.stdout + r.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = tmp / "nginx.conf"
    conf.write_text(
        f"""
pid {tmp}/nginx.pid;
error_log stderr;
daemon off;
events {{}}
http {{
  access_log off;
  map $http_authorization $vllm_station_token {{
    default "";
    "~^(?i:bearer) +(?<vllm_station_t>[A-Za-z0-9._~+/=-]{{16,256}})$" $vllm_station_t;
  }}
  map $vllm_station_token $vllm_station_entry {{
    default "";
    include {keys_map};
  }}
  map "$vllm_station_entry|$vllm_station_token" $vllm_station_key {{
    default "";
    "~^(?<vllm_station_k>[^ |]+) (?<vllm_station_n>[A-Za-z0-9_-]+)[|]\\k<vllm_station_k>$" $vllm_station_n;
  }}
  map $host $vllm_station_upstream_authorization {{
    include {upstream_map};
  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{ return 200 "$vllm_station_key|$vllm_station_upstream_authorization"; }}
  }}
}}
"""
    )
    proc = subprocess.Popen([NGINX, "-c", str(conf)], stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def _ask(url: str, authorization: str | None) -> tuple[str, str]:
    req = urllib.request.Request(url, headers={"Authorization": authorization} if authorization else {})
    with urllib.request.urlopen(req, timeout=10) as resp:
        name, _, upstream = resp.read().decode().partition("|")
        return name, upstream


@pytest.mark.parametrize(
    ("authorization", "name"),
    [
        (f"Bearer {ALICE}", "alice"),
        (f"Bearer {ALICE_OLD}", "alice"),  # rotation: both keys of the file
        (f"Bearer {BOB}", "bob"),
        (f"bearer {BOB}", "bob"),  # the scheme is case-insensitive (RFC 7235) ...
        (f"Bearer {BOB.lower()}", ""),  # ... the key is not
        (f"Bearer {BOB.upper()}", ""),
        (f"Bearer {ALICE.replace('.', 'x')}", ""),  # `.` is not "any character"
        (f"Bearer {ALICE.replace('+', '')}", ""),  # `+` is not "one or more"
        (f"Bearer {TILDE}", "bob"),
        (f"Bearer {TAB}", "bob"),
        (f"Bearer {TILDE.upper()}", ""),
        (f"Bearer {BOB}x", ""),
        (f"Bearer x{BOB}", ""),
        (BOB, ""),
        (f"Basic {BOB}", ""),
        (None, ""),
    ],
)
def test_real_nginx_matches_each_key_exactly(
    nginx_with_maps: str, authorization: str | None, name: str
) -> None:
    got, upstream = _ask(nginx_with_maps, authorization)
    assert got == name
    assert upstream == f"Bearer {UPSTREAM}"
