"""Tier `nix_parse` (static, no Nix needed): the seams between the modules stay where the design puts them.

- Only serve.nix writes the serving unit; the other modules feed it through `serve.inputs`.
- No shell program inside a Nix string: every unit runs `station <verb>` (or the container runtime).
- The names every module shares (unit, paths, the stamp) come from modules/lib/contract.nix.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MODULES = REPO / "modules"
pytestmark = pytest.mark.nix_parse


def _modules() -> dict[str, str]:
    files = {p.relative_to(MODULES).as_posix(): p.read_text() for p in sorted(MODULES.rglob("*.nix"))}
    assert {"serve.nix", "pair.nix", "download.nix", "host.nix", "lib/contract.nix", "lib/hardening.nix"} <= set(
        files
    ), sorted(files)
    return files


def _code(text: str) -> str:
    """The module without its comments (a comment may describe what the code must not do)."""
    return "\n".join(line.split("#", 1)[0] if not line.lstrip().startswith("#") else "" for line in text.splitlines())


def test_only_serve_writes_the_serving_unit() -> None:
    writes = re.compile(r"systemd\.services\.(vllm-station|\$\{(name|contract\.unit)\})(?![-\w])")
    offenders = {
        name: writes.findall(_code(text))
        for name, text in _modules().items()
        if name != "serve.nix" and writes.search(_code(text))
    }
    assert offenders == {}, f"modules other than serve.nix edit the serving unit: {offenders}"
    assert writes.search(_code(_modules()["serve.nix"])), "serve.nix no longer declares the unit?"


def test_no_mkbefore_into_another_modules_unit() -> None:
    offenders = [name for name, text in _modules().items() if re.search(r"\bmk(Before|After)\b", _code(text))]
    assert offenders == [], f"ordering by mkBefore/mkAfter hides the start sequence: {offenders}"


@pytest.mark.parametrize(
    "pattern",
    [
        r"writeShellScript",
        r"writeScript",
        r"writeShellApplication",
        r"pkgs\.(bash|curl|jq|python3|coreutils|gnugrep|gnused)\b",
        r"http\.server",
        r"/dev/tcp",
        r"\bscript\s*=",
    ],
)
def test_no_shell_programs_in_nix_strings(pattern: str) -> None:
    offenders = [name for name, text in _modules().items() if re.search(pattern, _code(text))]
    assert offenders == [], f"{pattern!r} in {offenders}: units call `station <verb>`, not shell programs"


def test_shared_names_come_from_the_contract() -> None:
    """Values (not descriptions or messages) of the shared names are written only in contract.nix."""
    literals = {
        r"\.station-verified\.json": "stampName",
        r"/var/lib/vllm-station-models": "modelsRoot",
        r"/etc/vllm-station/": "preflightConfig / pairEnvFile",
        r"vllm-station-download-": "downloadUnit",
        r"/var/lib/vllm-station-secrets": "secretsDir",
        r"vllm-station-secrets@": "secretsCheckUnit",
        r"revisions/": "revisionDir",
        r"vllm-station-golive": "goliveUnit",
    }
    offenders = {
        f"{name}: {literal}": where
        for name, text in _modules().items()
        # presets are plain data (they name the directory they serve from); lib/ is the contract
        if not name.startswith(("lib/", "presets/"))
        for literal, where in literals.items()
        # a value: `= "<literal>…` or a string built around it
        if re.search(r'=\s*"' + literal, _code(text)) or re.search(r'\}/?' + literal, _code(text))
    }
    assert offenders == {}, f"literals that belong to modules/lib/contract.nix: {offenders}"


def test_one_sandbox_definition() -> None:
    """Hardening settings are written in modules/lib/hardening.nix, not hand-copied per unit."""
    settings = ("ProtectKernelTunables", "RestrictNamespaces", "SystemCallArchitectures", "LockPersonality")
    offenders = {
        name: [s for s in settings if s in _code(text)]
        for name, text in _modules().items()
        if name != "lib/hardening.nix" and any(s in _code(text) for s in settings)
    }
    assert offenders == {}, f"sandbox settings outside modules/lib/hardening.nix: {offenders}"


def test_credentials_and_secret_paths_have_one_helper() -> None:
    """systemd's credentials directory (`%d/…`, quoted once for an Exec line), `LoadCredential=` entries
    and the test of a secret's path are written in modules/lib/unit.nix only: a module calls it."""
    helper = "lib/unit.nix"
    checks = {
        "a %d specifier": r"%d",
        "a LoadCredential entry written by hand": r'LoadCredential\s*=\s*(\[|lib\.optional|optional)',
        "an isSecretPath definition": r"\bisSecretPath\s*=",
        "a Nix store test of its own": r"builtins\.storeDir",
    }
    offenders = {
        f"{name}: {what}": re.findall(pattern, _code(text))
        for name, text in _modules().items()
        if name != helper
        for what, pattern in checks.items()
        if re.search(pattern, _code(text))
    }
    assert offenders == {}, f"written by hand outside modules/{helper}: {offenders}"
    code = _code(_modules()[helper])
    assert re.search(r"\bisSecretPath\s*=", code) and "%d/" in code, "modules/lib/unit.nix lost its helpers?"
    users = sorted(name for name, text in _modules().items() if "import ./lib/unit.nix" in _code(text))
    assert {"serve.nix", "golive.nix", "monitoring.nix", "download.nix", "gateway.nix"} <= set(users), users
