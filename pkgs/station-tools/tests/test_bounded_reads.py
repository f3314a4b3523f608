"""Every file station reads is bounded and regular (`vllm_station.bounded`): /dev/zero, FIFOs, directories
and oversized files are refused with a message, promptly, with memory bounded — through the real commands.

Each command runs as a subprocess under a 2 GiB address-space limit and a 60 s timeout: before the
bounded reader, `verify` with config.json -> /dev/zero grew until the kernel killed it and a FIFO shard
hung it forever.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from hubserver import make_checkpoint

from vllm_station import bounded
from vllm_station.checkpoint.stamp import STAMP_NAME

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
CONFIG_LIMIT = 64 * 2**20

MEM_LIMIT = 2 * 1024**3


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEM_LIMIT, MEM_LIMIT))


def station(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_station", *args],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limit_memory,
        env=env,
    )


def _no_traceback(r: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in r.stderr, r.stderr


# ---- the reader itself -----------------------------------------------------------------------------


def test_refuses_devices_fifos_and_directories(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nobody writes: a blocking open would hang here
    for path, kind in ((Path("/dev/zero"), "character device"), (fifo, "FIFO"), (tmp_path, "directory")):
        with pytest.raises(bounded.FileRefused, match=kind) as info:
            bounded.read_bytes(path, limit=1024)
        assert isinstance(info.value, OSError) and str(path) in str(info.value)


def test_limit_is_exact(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x" * 100)
    assert bounded.read_bytes(f, limit=100) == b"x" * 100
    with pytest.raises(bounded.FileRefused, match="over the 99-byte limit"):
        bounded.read_bytes(f, limit=99)


def test_a_symlink_to_a_device_is_refused_by_what_it_opens(tmp_path: Path) -> None:
    link = tmp_path / "config.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(bounded.FileRefused, match="character device"):
        bounded.read_text(link, limit=CONFIG_LIMIT)


def test_read_tail_keeps_the_end(tmp_path: Path) -> None:
    f = tmp_path / "log"
    f.write_bytes(b"a" * 50 + b"END")
    assert bounded.read_tail(f, limit=10) == (b"a" * 7 + b"END", True)
    assert bounded.read_tail(f, limit=100) == (b"a" * 50 + b"END", False)


# ---- through the commands --------------------------------------------------------------------------


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    d = tmp_path / "ckpt"
    make_checkpoint(d, shards=2, tensors_per_shard=2)
    return d


def test_verify_config_json_to_dev_zero(ckpt: Path) -> None:
    (ckpt / "config.json").unlink()
    (ckpt / "config.json").symlink_to("/dev/zero")
    r = station("verify", str(ckpt))
    _no_traceback(r)
    assert r.returncode == 1 and "config.json" in r.stderr and "character device" in r.stdout + r.stderr
    assert not (ckpt / STAMP_NAME).exists()


def test_verify_index_too_large(ckpt: Path) -> None:
    index = ckpt / "model.safetensors.index.json"
    with index.open("r+b") as f:  # a sparse file over the limit: no disk or memory needed
        f.truncate(CONFIG_LIMIT + 1)
    r = station("verify", str(ckpt))
    _no_traceback(r)
    assert r.returncode == 1 and "limit" in r.stdout + r.stderr


@pytest.mark.parametrize("sha256", [False, True])
def test_verify_fifo_shard_does_not_hang(ckpt: Path, sha256: bool) -> None:
    shard = sorted(ckpt.glob("*.safetensors"))[0]
    shard.unlink()
    os.mkfifo(shard)
    r = station("verify", str(ckpt), *(["--sha256"] if sha256 else []))
    _no_traceback(r)
    assert r.returncode == 1 and shard.name in r.stdout + r.stderr
    assert "FIFO" in r.stdout + r.stderr


def test_api_key_file_fifo_and_device(tmp_path: Path) -> None:
    fifo = tmp_path / "key"
    os.mkfifo(fifo)
    for key_file in (fifo, Path("/dev/zero")):
        r = station("smoke", "--base-url", "http://127.0.0.1:9", "--api-key-file", str(key_file))
        _no_traceback(r)
        assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr


def test_log_files_that_never_end(tmp_path: Path) -> None:
    fifo = tmp_path / "vllm.log"
    os.mkfifo(fifo)
    for log in ("/dev/zero", str(fifo)):
        r = station("nccl-check", "--log", log)
        _no_traceback(r)
        assert r.returncode == 3 and "not a regular file" in r.stderr, r.stderr
        r = station(
            "weights-check", "--log", log, "--checkpoint", str(tmp_path), "--tensor-parallel-size", "2"
        )
        _no_traceback(r)
        assert r.returncode in (2, 3), r.stderr


def test_preflight_config_is_bounded(tmp_path: Path) -> None:
    r = station("preflight", "--config", "/dev/zero")
    _no_traceback(r)
    assert r.returncode == 2 and "character device" in r.stderr
    big = tmp_path / "preflight.json"
    big.write_text(json.dumps({"pad": "x" * 10}))
    with big.open("r+b") as f:
        f.truncate(CONFIG_LIMIT + 1)
    r = station("preflight", "--config", str(big))
    _no_traceback(r)
    assert r.returncode == 2 and "limit" in r.stderr
