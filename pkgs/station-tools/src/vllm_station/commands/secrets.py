"""`station secrets check`: are the secret files a unit loads in place, before systemd loads them?

    station secrets check --unit vllm-station            # the check unit a consumer starts after
    station secrets check                                # every unit's secrets (an operator, any time)
    station secrets check --json

A unit that loads a file with `LoadCredential=` cannot start without it, and systemd says only
`243/CREDENTIALS`, before any command of the unit ran. services.vllm-station writes which unit loads
which file for which option into one manifest (`DEFAULT_MANIFEST`, modules/lib/contract.nix
`secretsManifest`), and every such unit requires and starts after `vllm-station-secrets@<unit>.service`,
which runs this check for it: a missing, empty or unreadable file fails that unit with a message naming
the option and the file. The files are opened, never read: no secret is in this process's memory.

The manifest: `{"units": {"<unit>": [{"option": "...", "path": "/...", "kind": "file" | "directory"}]}}`.

Exit codes: 0 every file in place (warnings — a file others may read — do not fail), 1 a file missing,
empty or unreadable, 2 a bad manifest or an unknown unit.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import stat
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vllm_station import bounded, options
from vllm_station.errors import EXIT_FAIL, EXIT_OK, UsageError

PREFIX = "vllm-station secrets:"
# modules/lib/contract.nix `secretsManifest`; checks/test_nix_secrets.py pins the two equal.
DEFAULT_MANIFEST = Path("/etc/vllm-station/secrets.json")
# modules/lib/contract.nix `secretsDir`: root-only, on the persistent disk.
SECRETS_DIR = "/var/lib/vllm-station-secrets"
KINDS = ("file", "directory")


@dataclass(frozen=True)
class Secret:
    unit: str
    option: str
    path: str
    kind: str


@dataclass
class Finding:
    unit: str
    option: str
    path: str
    ok: bool
    message: str
    warnings: list[str] = field(default_factory=list)


def read_manifest(path: Path) -> dict[str, list[Secret]]:
    """The manifest's secrets by unit; a malformed manifest is a UsageError naming the file."""
    try:
        text = bounded.read_text(path, limit=bounded.CONFIG_LIMIT)
    except OSError as exc:
        raise UsageError(f"cannot read the secrets manifest {path}: {exc.strerror or exc}") from exc
    try:
        data: Any = bounded.loads_json(text)
    except ValueError as exc:
        raise UsageError(f"the secrets manifest {path} is not JSON: {exc}") from None
    units = data.get("units") if isinstance(data, dict) else None
    if not isinstance(units, dict):
        raise UsageError(f'the secrets manifest {path} has no "units" object')
    out: dict[str, list[Secret]] = {}
    for unit, entries in units.items():
        if not isinstance(entries, list):
            raise UsageError(f"the secrets manifest {path}: units.{unit} is not a list")
        out[unit] = []
        for entry in entries:
            fields = entry if isinstance(entry, dict) else {}
            option, where, kind = fields.get("option"), fields.get("path"), fields.get("kind", "file")
            if not (isinstance(option, str) and isinstance(where, str) and kind in KINDS):
                raise UsageError(
                    f"the secrets manifest {path}: units.{unit} holds {entry!r}, not "
                    '{"option": "...", "path": "/...", "kind": "file" | "directory"}'
                )
            out[unit].append(Secret(unit, option, where, kind))
    return out


def _hint(secret: Secret) -> str:
    where = (
        f" /run is emptied at every boot: a file put there by hand is gone after a reboot; keep it in "
        f"{SECRETS_DIR} (root-only, persistent) or let a secret manager (sops-nix, agenix) write it at boot."
        if secret.path.startswith("/run/")
        else ""
    )
    put = (
        f"`install -d -m 0700 {secret.path}`, then its files"
        if secret.kind == "directory"
        else f"`install -m 0600 /dev/stdin {secret.path}`"
    )
    return (
        f" {secret.unit} loads it at each start and cannot start without it: put the secret there "
        f"(root-only, e.g. {put}) or point {secret.option} at the file your secret manager writes.{where}"
    )


def check_one(secret: Secret) -> Finding:
    """Is `secret` in place? Opens the file (never reads it) or lists the directory."""
    finding = Finding(secret.unit, secret.option, secret.path, ok=False, message="")
    path = Path(secret.path)
    if not path.is_absolute():
        finding.message = f"{secret.option}: {secret.path} is not an absolute path."
        return finding
    try:
        if secret.kind == "directory":
            st = os.stat(path)
            if not stat.S_ISDIR(st.st_mode):
                raise bounded.FileRefused(errno.ENOTDIR, "it is not a directory", str(path))
            os.listdir(path)
        else:
            with bounded.open_regular(path) as f:
                st = os.fstat(f.fileno())
            if st.st_size == 0:
                finding.message = f"{secret.option}: {secret.path} is empty." + _hint(secret)
                return finding
    except FileNotFoundError:
        finding.message = f"{secret.option}: {secret.path} does not exist." + _hint(secret)
        return finding
    except OSError as exc:
        what = exc.strerror or str(exc)
        finding.message = f"{secret.option}: {secret.path} cannot be used ({what})." + _hint(secret)
        return finding
    if st.st_mode & 0o007:
        finding.warnings.append(
            f"{secret.option}: {secret.path} is readable by every user "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); a secret should be readable by root only"
        )
    finding.ok = True
    finding.message = f"{secret.option}: {secret.path} in place"
    return finding


def check(manifest: dict[str, list[Secret]], units: list[str]) -> list[Finding]:
    unknown = [u for u in units if u not in manifest]
    if unknown:
        known = ", ".join(sorted(manifest)) or "none"
        raise UsageError(f"no secrets are declared for {', '.join(unknown)} (the manifest lists: {known})")
    return [check_one(s) for u in (units or sorted(manifest)) for s in manifest[u]]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "exit: 0 every file in place, 1 a file missing, empty or unreadable, 2 a bad manifest"
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    sp = verbs.add_parser(
        "check",
        help="the secret files each unit loads: in place? (what names the option and the file)",
        description="the secret files each unit loads: in place? (what names the option and the file)",
    )
    sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sp.add_argument(
        "--manifest",
        type=Path,
        default=DEFAULT_MANIFEST,
        help=f"which unit loads which file (default {DEFAULT_MANIFEST}, written by services.vllm-station)",
    )
    sp.add_argument(
        "--unit",
        action="append",
        default=[],
        metavar="UNIT",
        help="only the secrets of UNIT (repeatable; default every unit in the manifest)",
    )
    options.add_json(sp, what="the findings (paths, never contents)")


def run(args: argparse.Namespace) -> int:
    findings = check(read_manifest(args.manifest), args.unit)
    failed = [f for f in findings if not f.ok]
    for f in findings:
        for warning in f.warnings:
            print(f"{PREFIX} warning: {warning}", file=sys.stderr)
        if not f.ok:
            print(f"{PREFIX} {f.message}", file=sys.stderr)
    if args.json:
        print(json.dumps({"ok": not failed, "secrets": [asdict(f) for f in findings]}, indent=2))
    units = ", ".join(args.unit) or "every unit"
    print(
        f"{PREFIX} {len(findings) - len(failed)} of {len(findings)} secret files of {units} in place",
        file=sys.stderr,
    )
    return EXIT_FAIL if failed else EXIT_OK
