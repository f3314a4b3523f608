"""`station secrets check`: a missing secret names its option and file (not systemd's 243/CREDENTIALS).

Real files in a temporary directory; the command run through `station`'s own entry point.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vllm_station import cli

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
SECRETS_DIR = "/var/lib/vllm-station-secrets"

KEY = "sk-secrets-test-0123456789abcdef"


def _manifest(tmp_path: Path, units: dict[str, list[dict[str, str]]]) -> Path:
    path = tmp_path / "secrets.json"
    path.write_text(json.dumps({"units": units}))
    return path


def _key(tmp_path: Path, name: str = "vllm-api-key", text: str = KEY + "\n", mode: int = 0o600) -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return path


def test_every_file_in_place_passes_and_json_never_holds_a_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = tmp_path / "gateway-keys"
    keys.mkdir(mode=0o700)
    manifest = _manifest(
        tmp_path,
        {
            "vllm-station": [{"option": "serve.apiKeyFile", "path": str(_key(tmp_path))}],
            "vllm-station-gateway-keys": [
                {"option": "gateway.keysDirectory", "path": str(keys), "kind": "directory"}
            ],
        },
    )
    assert cli.main(["secrets", "check", "--manifest", str(manifest), "--json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["ok"] is True
    assert [(s["unit"], s["ok"]) for s in report["secrets"]] == [
        ("vllm-station", True),
        ("vllm-station-gateway-keys", True),
    ]
    assert KEY not in out + err
    assert "2 of 2 secret files of every unit in place" in err


def test_a_missing_file_names_the_option_the_file_and_the_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = "/run/secrets/vllm-api-key-that-is-not-there"
    manifest = _manifest(
        tmp_path,
        {
            "vllm-station": [{"option": "services.vllm-station.serve.apiKeyFile", "path": missing}],
            "vllm-station-download-x": [
                {"option": "services.vllm-station.download.models.x.tokenFile", "path": str(_key(tmp_path))}
            ],
        },
    )
    assert cli.main(["secrets", "check", "--manifest", str(manifest), "--unit", "vllm-station"]) == 1
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "does not exist" in x)
    option = "services.vllm-station.serve.apiKeyFile"
    assert line.startswith(f"vllm-station secrets: {option}: {missing} does not exist.")
    assert "vllm-station loads it at each start" in line
    # a path under /run: the reboot is named as the cause, the persistent place as the fix
    assert "/run is emptied at every boot" in line and SECRETS_DIR in line
    assert "0 of 1 secret files of vllm-station in place" in err
    # only the unit asked for: the download's token is not checked
    assert "tokenFile" not in err
    # every unit: the token is there, the key is not
    assert cli.main(["secrets", "check", "--manifest", str(manifest), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(s["option"].rsplit(".", 1)[1], s["ok"]) for s in report["secrets"]] == [
        ("apiKeyFile", False),
        ("tokenFile", True),
    ]


@pytest.mark.host  # "unreadable" skips for root (a builder may run as root)
@pytest.mark.parametrize("case", ["empty", "directory", "fifo", "unreadable", "not-a-directory"])
def test_unusable_files_fail_with_the_reason(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, kind = tmp_path / "secret", "file"
    if case == "empty":
        _key(tmp_path, "secret", "")
        expected = "is empty"
    elif case == "directory":
        path.mkdir()
        expected = "cannot be used (it is a directory"
    elif case == "fifo":
        os.mkfifo(path)
        expected = "cannot be used (it is a FIFO"
    elif case == "unreadable":
        if os.geteuid() == 0:
            pytest.skip("root reads a file of mode 0000")
        _key(tmp_path, "secret", mode=0o000)
        expected = "cannot be used (Permission denied"
    else:
        _key(tmp_path, "secret")
        kind, expected = "directory", "cannot be used (it is not a directory"
    manifest = _manifest(tmp_path, {"u": [{"option": "opt.x", "path": str(path), "kind": kind}]})
    assert cli.main(["secrets", "check", "--manifest", str(manifest)]) == 1
    err = capsys.readouterr().err
    assert f"vllm-station secrets: opt.x: {path} {expected}" in err, err
    assert "/run is emptied" not in err  # not under /run: no reboot hint


def test_a_world_readable_secret_warns_but_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _key(tmp_path, mode=0o644)
    manifest = _manifest(tmp_path, {"u": [{"option": "opt.x", "path": str(path)}]})
    assert cli.main(["secrets", "check", "--manifest", str(manifest)]) == 0
    err = capsys.readouterr().err
    assert f"warning: opt.x: {path} is readable by every user (mode 0644)" in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("not json", "is not JSON"),
        ('{"units": []}', 'has no "units" object'),
        ('{"units": {"u": [{"option": "x"}]}}', "units.u holds"),
        ('{"units": {"u": [{"option": "x", "path": "/p", "kind": "socket"}]}}', "units.u holds"),
    ],
)
def test_a_bad_manifest_is_a_usage_error(
    text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "secrets.json"
    manifest.write_text(text)
    assert cli.main(["secrets", "check", "--manifest", str(manifest)]) == 2
    assert expected in capsys.readouterr().err


def test_an_unknown_unit_or_a_missing_manifest_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = _manifest(tmp_path, {"vllm-station": []})
    assert cli.main(["secrets", "check", "--manifest", str(manifest), "--unit", "nginx"]) == 2
    assert "no secrets are declared for nginx (the manifest lists: vllm-station)" in capsys.readouterr().err
    assert cli.main(["secrets", "check", "--manifest", str(tmp_path / "absent.json")]) == 2
    assert "cannot read the secrets manifest" in capsys.readouterr().err
