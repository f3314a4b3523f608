"""`station exec --secret-env NAME=FILE -- CMD`: the serving unit's way to hand the API key to vLLM.

Run as real processes: the secret must reach CMD's environment and never an argument list or a message.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SECRET = "sk-test-0123456789abcdef"


def station(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_station", "exec", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )


def key_file(tmp_path: Path, content: str = SECRET + "\n") -> Path:
    path = tmp_path / "api-key"
    path.write_text(content)
    return path


def test_the_value_reaches_the_command_environment(tmp_path: Path) -> None:
    path = key_file(tmp_path)
    probe = "import os, sys; print(os.environ['VLLM_API_KEY']); print(sys.argv[1:])"
    r = station("--secret-env", f"VLLM_API_KEY={path}", "--", sys.executable, "-c", probe, "arg")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [SECRET, "['arg']"]  # one trailing newline dropped, args passed


def test_the_command_exit_code_is_kept(tmp_path: Path) -> None:
    r = station("--secret-env", f"K={key_file(tmp_path)}", "--", sys.executable, "-c", "raise SystemExit(7)")
    assert r.returncode == 7


def test_several_secrets(tmp_path: Path) -> None:
    a = key_file(tmp_path)
    b = tmp_path / "b"
    b.write_text("second")
    probe = "import os; print(os.environ['A'], os.environ['B'])"
    r = station("--secret-env", f"A={a}", "--secret-env", f"B={b}", "--", sys.executable, "-c", probe)
    assert r.stdout.strip() == f"{SECRET} second"


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    r = station("--secret-env", f"VLLM_API_KEY={tmp_path}/nope", "--", "true")
    assert r.returncode == 2
    assert f"cannot read VLLM_API_KEY from {tmp_path}/nope" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_contents_are_refused_without_printing_them(tmp_path: Path) -> None:
    cases = {
        "": "is empty",
        "  \n": "is empty",
        f"{SECRET}\nsecond line\n": "holds more than one line",
        "x" * (64 * 1024 + 1): "larger than 64 KiB",
    }
    for content, message in cases.items():
        r = station("--secret-env", f"VLLM_API_KEY={key_file(tmp_path, content)}", "--", "true")
        assert r.returncode == 2, (content[:20], r.stderr)
        assert message in r.stderr
        assert SECRET not in r.stderr and SECRET not in r.stdout


def test_bad_specs_and_commands(tmp_path: Path) -> None:
    path = key_file(tmp_path)
    assert station("--secret-env", "VLLM_API_KEY", "--", "true").returncode == 2
    bad_name = station("--secret-env", f"1BAD={path}", "--", "true")
    assert bad_name.returncode == 2 and "not an environment variable name" in bad_name.stderr
    no_cmd = station("--secret-env", f"K={path}")
    assert no_cmd.returncode == 2 and "no command given" in no_cmd.stderr
    nothing = station("--", "true")
    assert nothing.returncode == 2 and "at least one --secret-env" in nothing.stderr
    missing = station("--secret-env", f"K={path}", "--", "/nonexistent/vllm")
    assert missing.returncode == 127 and "command not found" in missing.stderr
    assert SECRET not in missing.stderr
