"""`station gateway keys`: the gateway's start step — API key files into the map nginx includes.

    station gateway keys --output /run/vllm-station-gateway/keys.map \\
        --upstream-out /run/vllm-station-gateway/upstream-authorization.map \\
        --key alice=%d/key-alice --key-dir %d/ --prefix keydir_ --upstream-key-file %d/upstream-key

services.vllm-station.gateway runs it in its own unit before nginx, with the key files loaded as systemd
credentials (`%d`): the keys never enter the Nix store, a unit file or an argument list.

`--output` gets one nginx `map` entry per key, for the gateway's `map $vllm_station_token $vllm_station_entry`
(the token of a `Bearer` header): the key as a plain string — a hash lookup, whatever the number of keys —
and the value `KEY NAME`. nginx compares a map's plain strings case-insensitively, so the gateway then
compares the token with the KEY found exactly, and gives the NAME (what the access log records); two keys
that differ only in case are refused here. Each entry's source starts with an escaped backslash, so no
key is read as a regular expression (`~…`) or a map keyword. `--upstream-out`
gets the `default` entry of `map … $vllm_station_upstream_authorization`: the `Authorization` value the
gateway sends to the stations, `Bearer KEY` of `--upstream-key-file`, or empty (no header).

Key files hold one key a line (several lines: rotation, all valid); empty lines and `#` lines are
skipped. A key is 16-256 characters of `A-Z a-z 0-9 - . _ ~ + / =`; a name 1-64 of `A-Z a-z 0-9 _ -`.
Nothing is written unless every file is valid: a bad file leaves the previous maps in place. Both files
are written whole (a temporary file renamed over the old one), mode 0400.

`--out`, the old name of `--output`, still works (hidden; it says so on stderr) for a release.

Messages name files, names and line numbers, never a key. Exit codes: 0 written, 2 bad arguments or
an invalid, unreadable or duplicate key (nothing written), 1 the output could not be written.
"""

from __future__ import annotations

import argparse
import errno
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from vllm_station import bounded, options, output, redact
from vllm_station.errors import EXIT_OK, StationError, UsageError

PREFIX = "vllm-station gateway:"
KEY = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")
UPSTREAM_KEY = re.compile(rf"[A-Za-z0-9._~+/=-]{{{redact.MIN_SECRET_LEN},4096}}")
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_FILE_BYTES = 64 * 1024


class WriteFailed(StationError):
    """An output file could not be written (exit 1)."""


@dataclass
class KeySet:
    """Keys by name, and where each came from (for messages)."""

    keys: dict[str, list[str]] = field(default_factory=dict)
    sources: dict[str, Path] = field(default_factory=dict)

    def add(self, name: str, path: Path) -> None:
        if not NAME.fullmatch(name):
            raise UsageError(f"{path}: the key name {name!r} is not 1-64 characters of A-Z a-z 0-9 _ -")
        if name in self.keys:
            raise UsageError(f"the key name {name} comes twice: {self.sources[name]} and {path}")
        keys = read_keys(path)
        owner = {k.lower(): n for n, ks in self.keys.items() for k in ks}
        for key in keys:
            if key.lower() in owner:
                other = owner[key.lower()]
                raise UsageError(
                    f"{path} ({name}) holds a key that {self.sources[other]} ({other}) holds too "
                    "(keys are told apart in more than case)"
                )
        self.keys[name] = keys
        self.sources[name] = path

    def count(self) -> int:
        return sum(len(v) for v in self.keys.values())


def _read_text(path: Path, what: str) -> str:
    try:
        data = bounded.read_bytes(path, limit=MAX_FILE_BYTES)  # regular files only: a FIFO cannot hang it
    except bounded.FileRefused as exc:
        if exc.errno == errno.EFBIG:
            raise UsageError(f"{what} {path} is larger than {MAX_FILE_BYTES // 1024} KiB") from exc
        raise UsageError(f"cannot read {what} {path}: {exc.strerror}") from exc
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{what} {path} is not UTF-8 text") from None


def read_keys(path: Path) -> list[str]:
    """The keys in `path`, one a line; errors name the file and line, never the key."""
    keys: list[str] = []
    for number, line in enumerate(_read_text(path, "the key file").splitlines(), 1):
        key = line.strip()
        if not key or key.startswith("#"):
            continue
        redact.register(key)
        if not KEY.fullmatch(key):
            raise UsageError(
                f"{path} line {number}: a key is 16-256 characters of A-Z a-z 0-9 - . _ ~ + / = "
                f"(this one has {len(key)} characters"
                + (", some of them not allowed)" if re.search(r"[^A-Za-z0-9._~+/=-]", key) else ")")
            )
        if key.lower() in (k.lower() for k in keys):
            raise UsageError(
                f"{path} line {number}: the same key comes twice in this file (in any case)"
            )
        keys.append(key)
    if not keys:
        raise UsageError(f"{path} holds no key (one a line; empty and # lines are skipped)")
    return keys


def read_upstream_key(path: Path) -> str:
    text = _read_text(path, "the upstream key file").strip()
    redact.register(text)
    if not UPSTREAM_KEY.fullmatch(text):
        raise UsageError(
            f"{path}: the stations' key must be one line of at least {redact.MIN_SECRET_LEN} characters of "
            "A-Z a-z 0-9 - . _ ~ + / ="
        )
    return text


def key_entry(key: str, name: str) -> str:
    """The map entry of `key`: a plain (hashed) source, `\\` first so that nginx reads no key as a
    regular expression or a keyword, and the value the gateway compares the token with."""
    return f'"\\\\{key}" "{key} {name}";'


def render_keys_map(keys: KeySet) -> str:
    lines = [
        "# Written by `station gateway keys` at the gateway's start; API key -> \"KEY NAME\". Do not edit.",
    ]
    for name in sorted(keys.keys):
        lines.extend(key_entry(k, name) for k in keys.keys[name])
    return "\n".join(lines) + "\n"


def render_upstream_map(key: str | None) -> str:
    value = f"Bearer {key}" if key else ""
    return (
        "# Written by `station gateway keys`: the Authorization the gateway sends to the stations.\n"
        f'default "{value}";\n'
    )


def write_private(path: Path, text: str, option: str = "--output") -> None:
    """Replace `path` with `text` whole (temporary file, then rename), mode 0400, through
    `vllm_station.output`: a device node, FIFO or directory at `path` is refused, never replaced."""
    try:
        output.replace_text(path, text, option=option, mode=0o400)
    except output.OutputError as exc:
        raise WriteFailed(str(exc)) from exc


def collect(specs: list[str], key_dirs: list[Path], prefix: str) -> KeySet:
    keys = KeySet()
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep or not file:
            raise UsageError(f"--key wants NAME=FILE, got {spec!r}")
        keys.add(name, Path(file))
    for directory in key_dirs:
        try:
            entries = sorted(directory.iterdir())
        except OSError as exc:
            raise UsageError(f"cannot list the key directory {directory}: {exc.strerror or exc}") from exc
        for entry in entries:
            if not entry.name.startswith(prefix) or entry.name.startswith("."):
                continue
            if not entry.is_file():
                continue
            keys.add(entry.name[len(prefix) :], entry)
    if not keys.keys:
        where = ", ".join(str(d) for d in key_dirs) or "no --key and no --key-dir"
        raise UsageError(f"no API keys found ({where}): the gateway would refuse every request")
    return keys


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "exit: 0 written, 1 an output could not be written, 2 bad arguments or key files"
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    sp = verbs.add_parser(
        "keys",
        help="API key files -> the nginx map of key -> name (run before nginx starts)",
        description="API key files -> the nginx map of key -> name (run before nginx starts)",
    )
    sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    options.add_output(
        sp, what="the key map (nginx map entries)", required=True, replaced=True, old_name="--out"
    )
    sp.add_argument(
        "--upstream-out",
        type=output.out_file(replaced=True),
        required=True,
        help="the upstream Authorization map to write",
    )
    sp.add_argument(
        "--key", action="append", default=[], metavar="NAME=FILE", help="the keys of NAME (repeatable)"
    )
    sp.add_argument(
        "--key-dir",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="every regular file PREFIXNAME in DIR holds the keys of NAME (repeatable)",
    )
    sp.add_argument("--prefix", default="", help="--key-dir: only files named PREFIX… (default: all)")
    sp.add_argument(
        "--upstream-key-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="the key the stations expect (default: no Authorization to the stations)",
    )
    options.add_json(sp, what="what was written (names, not keys)")


def run(args: argparse.Namespace) -> int:
    keys = collect(args.key, args.key_dir, args.prefix)
    upstream = read_upstream_key(args.upstream_key_file) if args.upstream_key_file else None
    write_private(args.output, render_keys_map(keys))
    write_private(args.upstream_out, render_upstream_map(upstream), "--upstream-out")
    names = {name: len(v) for name, v in sorted(keys.keys.items())}
    if args.json:
        written = str(args.output)  # the JSON key stays "out": what reads it keeps working
        report = {"out": written, "keys": keys.count(), "names": names, "upstream_key": bool(upstream)}
        print(json.dumps(report, indent=2))
    print(
        f"{PREFIX} {keys.count()} keys for {len(names)} names ({', '.join(names)}) -> {args.output}; "
        + ("the stations get the upstream key" if upstream else "no Authorization goes to the stations"),
        file=sys.stderr,
    )
    return EXIT_OK
