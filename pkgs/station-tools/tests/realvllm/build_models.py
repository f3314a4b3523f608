"""Build the test models when missing or when the code that builds them changed (vLLM venv, stdlib only).

Called by scripts/build-test-models. Each model is built in a temporary directory next to its final place,
stamped with the hash of its build code (manifest.py) and moved into place, so a half-built model is never
mistaken for a good one.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import manifest

BUILDERS = {"smol": "build_smol.py", "tools": "train_tiny.py", "tools-glm": "train_tiny_glm.py"}
# A model fine-tuned from another: that one is brought up to date first and passed as --init-from.
BASES = {"tools-glm": "tools"}


def build(models: Path, key: str, force: bool) -> None:
    base = BASES.get(key)
    extra: list[str] = []
    if base is not None:
        build(models, base, False)
        extra = ["--init-from", str(manifest.model_dir(models, base))]
    final = manifest.model_dir(models, key)
    if not force and manifest.is_current(models, key):
        stamp = manifest.read_stamp(models, key) or {}
        print(
            f"build-test-models: {final} is current (built {stamp.get('built_at')}, "
            f"{stamp.get('build_seconds')} s)",
            flush=True,
        )
        return
    why = "forced" if force else ("code changed" if final.exists() else "missing")
    print(f"build-test-models: building {final} ({why}) with tests/realvllm/{BUILDERS[key]}", flush=True)
    code_sha256 = manifest.code_hash(key)  # before building: an edit during the build must not count
    tmp = models / f".tmp-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.monotonic()
    subprocess.run(
        [sys.executable, str(manifest.HERE / BUILDERS[key]), "--out", str(tmp), *extra],
        check=True,
        cwd=manifest.HERE,
    )
    seconds = round(time.monotonic() - t0, 1)
    stamp = {
        "model": key,
        "code_sha256": code_sha256,
        "build_seconds": seconds,
        "built_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    (tmp / manifest.STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    for path in [tmp, *tmp.rglob("*")]:  # readable by everyone who runs the tests on this machine
        path.chmod(0o755 if path.is_dir() else 0o644)
    old = models / f".old-{final.name}"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    print(f"build-test-models: built {final} in {seconds} s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("which", nargs="*", help=f"models to build: {', '.join(BUILDERS)} (default: all)")
    args = parser.parse_args()
    unknown = [w for w in args.which if w not in BUILDERS]
    if unknown:
        parser.error(f"unknown model {', '.join(unknown)}; choose from {', '.join(BUILDERS)}")
    args.models.mkdir(parents=True, exist_ok=True)
    for key in args.which or list(BUILDERS):
        build(args.models, key, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
