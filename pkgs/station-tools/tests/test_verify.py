"""`station verify` on real safetensors checkpoints (safetensors + numpy): it passes good ones and refuses
every broken one with the file named and no stamp — including a stale stamp from an earlier good run."""

from __future__ import annotations

import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hubserver import git_blob_sha1, make_checkpoint
from safetensors.numpy import load_file

from vllm_station.checkpoint.hashes import HashRecord, RecordedFile, write_hash_record
from vllm_station.checkpoint.safetensors import read_shard_header
from vllm_station.checkpoint.stamp import STAMP_NAME
from vllm_station.checkpoint.verification import verify_checkpoint

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
HASHES_NAME = ".station-hashes.json"

ARCH = "GlmMoeDsaForCausalLM"
ALGO = "MIXED_PRECISION"
SHARD2 = "model-00002-of-00003.safetensors"


def station(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_station", *args], capture_output=True, text=True, timeout=300
    )


def record_hashes(directory: Path, repo: str = "org/model", revision: str = "a" * 40) -> None:
    """What `station download` records from the hub: LFS sha256 for shards, git blob ids otherwise."""
    import hashlib

    files = {}
    for p in sorted(directory.iterdir()):
        if p.is_file() and p.name not in (STAMP_NAME, HASHES_NAME):
            data = p.read_bytes()
            if p.suffix == ".safetensors":
                files[p.name] = RecordedFile(size=len(data), sha256=hashlib.sha256(data).hexdigest())
            else:
                files[p.name] = RecordedFile(size=len(data), git_blob_sha1=git_blob_sha1(data))
    write_hash_record(directory, HashRecord(repo=repo, revision=revision, files=files))


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    d = tmp_path / "ckpt"
    make_checkpoint(d, shards=3, tensors_per_shard=4)
    record_hashes(d)
    return d


def verify_cli(d: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return station(
        "verify", str(d), "--expect-arch", ARCH, "--expect-quant-algo", ALGO, "--expect-shards", "3", *extra
    )


def plant_stale_stamp(d: Path) -> None:
    (d / STAMP_NAME).write_text('{"version": 1, "stale": true}\n')


def assert_refused(r: subprocess.CompletedProcess[str], d: Path, name: str, *phrases: str) -> None:
    assert r.returncode == 1, r.stdout + r.stderr
    assert "NOT verified" in r.stderr and name in r.stderr
    assert "Traceback" not in r.stderr
    assert not (d / STAMP_NAME).exists()
    for phrase in phrases:
        assert phrase in r.stdout + r.stderr, (phrase, r.stdout, r.stderr)


def test_generated_checkpoint_is_real_safetensors(ckpt: Path) -> None:
    # the generator writes files the safetensors library itself reads back, and our parser agrees with it
    for shard in sorted(ckpt.glob("*.safetensors")):
        tensors = load_file(str(shard))
        header = read_shard_header(shard)
        assert set(header) == set(tensors)
        for name, arr in tensors.items():
            assert header[name].end - header[name].begin == arr.nbytes


def test_good_checkpoint_passes_and_stamps(ckpt: Path) -> None:
    r = verify_cli(ckpt, "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["ok"] is True and report["shards"] == 3 and report["tensors"] == 12
    assert report["membind"] is None  # header-only: no binding needed
    stamp = json.loads((ckpt / STAMP_NAME).read_text())
    assert set(stamp) == {
        "version", "repo", "revision", "verified_at", "sha256_checked", "architectures", "quant_algo", "files"
    }  # fmt: skip
    assert stamp["version"] == 1 and stamp["sha256_checked"] is False
    assert stamp["architectures"] == [ARCH] and stamp["quant_algo"] == ALGO
    assert stamp["repo"] == "org/model" and stamp["revision"] == "a" * 40
    paths = [f["path"] for f in stamp["files"]]
    assert paths == sorted(p.name for p in ckpt.iterdir() if p.name not in (STAMP_NAME, HASHES_NAME))
    assert all(f["size"] == (ckpt / f["path"]).stat().st_size for f in stamp["files"])
    assert stamp["verified_at"].endswith("Z")


def test_sha256_pass_records_hashes(ckpt: Path) -> None:
    r = verify_cli(ckpt, "--sha256", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["sha256_checked"] is True
    assert report["membind"] == "bind:0"  # streamed bound to node 0 (kernel read-back)
    stamp = json.loads((ckpt / STAMP_NAME).read_text())
    assert stamp["sha256_checked"] is True
    import hashlib

    for f in stamp["files"]:
        assert f["sha256"] == hashlib.sha256((ckpt / f["path"]).read_bytes()).hexdigest()


def test_truncated_shard(ckpt: Path) -> None:
    plant_stale_stamp(ckpt)
    with open(ckpt / SHARD2, "r+b") as f:
        f.truncate((ckpt / SHARD2).stat().st_size - 100)
    assert_refused(verify_cli(ckpt), ckpt, SHARD2, "truncated")


def test_shard_shorter_than_its_header(ckpt: Path) -> None:
    with open(ckpt / SHARD2, "r+b") as f:
        f.truncate(20)
    assert_refused(verify_cli(ckpt), ckpt, SHARD2, "runs past the end of the file")


def test_padded_shard(ckpt: Path) -> None:
    with open(ckpt / SHARD2, "ab") as f:
        f.write(b"\0" * 10)
    assert_refused(verify_cli(ckpt), ckpt, SHARD2, "10 unexpected bytes")


def test_flipped_byte_passes_headers_but_fails_sha256(ckpt: Path) -> None:
    p = ckpt / SHARD2
    data = bytearray(p.read_bytes())
    data[-5] ^= 0xFF  # inside the tensor data: the header is still perfect
    p.write_bytes(bytes(data))
    assert (
        verify_cli(ckpt).returncode == 0
    )  # header-only verify cannot see it (and says so: sha256 not checked)
    assert json.loads((ckpt / STAMP_NAME).read_text())["sha256_checked"] is False
    assert_refused(verify_cli(ckpt, "--sha256"), ckpt, SHARD2, "sha256 mismatch")


def test_flipped_byte_in_config_caught_by_git_blob_id(ckpt: Path) -> None:
    p = ckpt / "config.json"
    p.write_text(p.read_text().replace('"hidden_size": 16', '"hidden_size": 17'))
    assert_refused(verify_cli(ckpt, "--sha256"), ckpt, "config.json", "git blob id mismatch")


def test_sha256_without_recorded_hashes_fails(ckpt: Path) -> None:
    (ckpt / HASHES_NAME).unlink()
    assert_refused(verify_cli(ckpt, "--sha256"), ckpt, HASHES_NAME, "nothing can be compared")


def test_missing_shard(ckpt: Path) -> None:
    plant_stale_stamp(ckpt)
    (ckpt / SHARD2).unlink()
    assert_refused(verify_cli(ckpt), ckpt, SHARD2, "listed in model.safetensors.index.json but missing")


def test_index_naming_a_missing_file(ckpt: Path) -> None:
    idx = json.loads((ckpt / "model.safetensors.index.json").read_text())
    idx["weight_map"]["extra.weight"] = "model-00004-of-00003.safetensors"
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(idx))
    r = station("verify", str(ckpt))
    assert_refused(r, ckpt, "model-00004-of-00003.safetensors", "but missing")


def test_tensor_missing_from_index(ckpt: Path) -> None:
    idx = json.loads((ckpt / "model.safetensors.index.json").read_text())
    del idx["weight_map"]["model.layers.1.mlp.experts.2.weight"]
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(idx))
    assert_refused(
        verify_cli(ckpt), ckpt, SHARD2, "tensors missing from the index: model.layers.1.mlp.experts.2.weight"
    )


def test_index_places_tensor_in_wrong_shard(ckpt: Path) -> None:
    idx = json.loads((ckpt / "model.safetensors.index.json").read_text())
    idx["weight_map"]["model.layers.1.mlp.experts.2.weight"] = "model-00001-of-00003.safetensors"
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(idx))
    assert_refused(
        verify_cli(ckpt), ckpt, "model-00001-of-00003.safetensors", "indexed tensors not in this shard"
    )


def test_wrong_architecture(ckpt: Path) -> None:
    plant_stale_stamp(ckpt)
    r = station("verify", str(ckpt), "--expect-arch", "LlamaForCausalLM")
    assert_refused(r, ckpt, "config.json", f"architectures is ['{ARCH}'], expected ['LlamaForCausalLM']")


def test_wrong_quant_algo(ckpt: Path) -> None:
    r = station("verify", str(ckpt), "--expect-quant-algo", "NVFP4")
    assert_refused(r, ckpt, "config.json", "quant_algo is 'MIXED_PRECISION', expected 'NVFP4'")


def test_quant_algo_from_hf_quant_config(tmp_path: Path) -> None:
    d = tmp_path / "m"
    make_checkpoint(d, quant_algo=None)
    (d / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": ALGO}}))
    assert verify_checkpoint(d).quant_algo == ALGO
    r = station("verify", str(d), "--expect-quant-algo", ALGO)
    assert r.returncode == 0, r.stderr


def test_wrong_shard_count(ckpt: Path) -> None:
    r = station("verify", str(ckpt), "--expect-shards", "50")
    assert_refused(r, ckpt, "model.safetensors.index.json", "lists 3 shards, expected 50")


def test_broken_config_json(ckpt: Path) -> None:
    (ckpt / "config.json").write_text('{"architectures": [')
    assert_refused(verify_cli(ckpt), ckpt, "config.json", "not valid JSON")


def test_corrupt_header_json(ckpt: Path) -> None:
    p = ckpt / SHARD2
    data = bytearray(p.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    data[8 + n // 2] = ord("{")
    p.write_bytes(bytes(data))
    assert_refused(verify_cli(ckpt), ckpt, SHARD2, "header is not valid JSON")


def test_unreadable_shard_is_a_directory(ckpt: Path) -> None:
    (ckpt / SHARD2).unlink()
    (ckpt / SHARD2).mkdir()
    assert_refused(verify_cli(ckpt), ckpt, SHARD2, "not a regular file")


def reachable_by_others(d: Path) -> bool:
    """`d` and every directory above it let other users through."""
    d = d.resolve()
    return d.is_dir() and all(p.stat().st_mode & stat.S_IXOTH for p in (d, *d.parents))


def test_unreadable_shard_for_an_unprivileged_user(ckpt: Path, request: pytest.FixtureRequest) -> None:
    """chmod 000 means nothing to root: run verify as `nobody` so the permission check is real."""
    if os.geteuid() != 0:
        os.chmod(ckpt / SHARD2, 0)
        r = verify_cli(ckpt)
    else:
        import pwd

        try:
            nobody = pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("no 'nobody' user to drop privileges to")
        # a directory nobody can reach (pytest's own tmp root is private to root, and so may $TMPDIR be)
        reachable = [d for d in (tempfile.gettempdir(), "/tmp", "/var/tmp") if reachable_by_others(Path(d))]
        if not reachable:
            pytest.skip("no temporary directory that 'nobody' can reach ($TMPDIR, /tmp, /var/tmp)")
        base = Path(tempfile.mkdtemp(prefix="station-verify-nobody-", dir=reachable[0]))
        os.chmod(base, 0o755)
        request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
        ckpt = Path(shutil.copytree(ckpt, base / "ckpt"))
        plant_stale_stamp(ckpt)
        for p in [ckpt, *ckpt.iterdir()]:
            os.chmod(p, 0o777 if p.is_dir() else 0o644)
        os.chmod(ckpt / SHARD2, 0)
        # import as root (the venv may not be readable by nobody), then drop privileges and run the CLI
        code = (
            "import os, sys\n"
            "from vllm_station import cli, errors, report\n"
            "from vllm_station.commands import verify\n"
            f"os.setgroups([]); os.setgid({nobody.pw_gid}); os.setuid({nobody.pw_uid})\n"
            f"sys.exit(cli.main(['verify', {str(ckpt)!r}]))\n"
        )
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert_refused(r, ckpt, SHARD2, "cannot read: Permission denied")


def test_unreadable_directory_is_a_failure_not_a_traceback(tmp_path: Path) -> None:
    code = (
        "import os, sys\n"
        "from vllm_station import cli, errors, report\n"
        "from vllm_station.commands import verify\n"
        "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
        f"sys.exit(cli.main(['verify', {str(tmp_path)!r}]))\n"
    )
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to uid 65534")
    os.chmod(tmp_path, 0o700)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "Permission denied" in r.stderr


def test_missing_directory(tmp_path: Path) -> None:
    r = station("verify", str(tmp_path / "nope"))
    assert r.returncode == 1
    assert "not a directory" in r.stderr


def test_every_bad_file_is_named(ckpt: Path) -> None:
    (ckpt / "model-00001-of-00003.safetensors").unlink()
    with open(ckpt / "model-00003-of-00003.safetensors", "r+b") as f:
        f.truncate(1000)
    r = verify_cli(ckpt, "--json")
    assert r.returncode == 1
    bad = {p["path"] for p in json.loads(r.stdout)["problems"]}
    assert {"model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors"} <= bad
    assert not (ckpt / STAMP_NAME).exists()


def test_single_file_checkpoint(tmp_path: Path) -> None:
    d = tmp_path / "single"
    make_checkpoint(d, shards=1)
    (d / "model-00001-of-00001.safetensors").rename(d / "model.safetensors")
    (d / "model.safetensors.index.json").unlink()
    report = verify_checkpoint(d)
    assert report.ok and report.shards == 1


def make_sparse_50_shards(d: Path, tensors_per_shard: int, total_bytes: int) -> int:
    """A GLM-5.3-sized checkpoint (50 shards, total_bytes) with real headers and sparse (hole) data."""
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps({"architectures": [ARCH], "quantization_config": {"quant_algo": ALGO}})
    )
    per_tensor = total_bytes // (50 * tensors_per_shard)
    cols = 1024
    rows = per_tensor // cols
    nbytes = rows * cols
    weight_map = {}
    for s in range(50):
        name = f"model-{s + 1:05d}-of-00050.safetensors"
        header: dict[str, object] = {"__metadata__": {"format": "pt"}}
        for t in range(tensors_per_shard):
            key = f"model.layers.{s}.mlp.experts.{t}.down_proj.weight"
            header[key] = {
                "dtype": "U8",
                "shape": [rows, cols],
                "data_offsets": [t * nbytes, (t + 1) * nbytes],
            }
            weight_map[key] = name
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        with open(d / name, "wb") as f:
            f.write(struct.pack("<Q", len(raw)))
            f.write(raw)
            f.truncate(8 + len(raw) + tensors_per_shard * nbytes)  # a hole: no disk space used
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return sum((d / f).stat().st_size for f in set(weight_map.values()))


def test_header_only_verify_of_50_shard_464gb_checkpoint_reads_every_header(tmp_path: Path) -> None:
    # ~5,000 tensors per shard (~250k total) like a 753B MoE: the headers are real, the data are holes.
    # The time is printed, not asserted: a wall-clock bound here failed a check on a loaded machine
    # (16.5 s against 15 s beside two busy processes); a performance target belongs in a benchmark.
    d = tmp_path / "glm"
    size = make_sparse_50_shards(d, tensors_per_shard=5000, total_bytes=464 * 10**9)
    assert size > 460 * 10**9
    t0 = time.monotonic()
    r = station(
        "verify",
        str(d),
        "--expect-arch",
        ARCH,
        "--expect-quant-algo",
        ALGO,
        "--expect-shards",
        "50",
        "--json",
    )
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["tensors"] == 250_000 and report["shards"] == 50
    print(f"\nheader-only verify, 50 shards, {size / 1e9:.0f} GB, 250k tensors: "
          f"{report['seconds']:.2f} s in verify, {wall:.2f} s wall incl. interpreter start")  # fmt: skip


def test_stamp_removed_when_verify_starts(ckpt: Path) -> None:
    assert verify_checkpoint(ckpt).ok
    assert (ckpt / STAMP_NAME).exists()
    shutil.rmtree(ckpt / "model-00003-of-00003.safetensors", ignore_errors=True)
    (ckpt / "model-00003-of-00003.safetensors").unlink()
    report = verify_checkpoint(ckpt)
    assert not report.ok and report.stamp is None
    assert not (ckpt / STAMP_NAME).exists()


def test_stamp_that_cannot_be_removed_fails_loudly(ckpt: Path) -> None:
    """The unlink fails for real: the stamp's path is a non-empty directory. Verify must not claim removal."""
    stamp = ckpt / STAMP_NAME
    stamp.mkdir()
    (stamp / "keep").write_text("x")
    r = verify_cli(ckpt)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert "cannot remove the previous stamp: Is a directory; it still stands" in r.stderr
    assert f"the old stamp {stamp} could NOT be removed and still stands" in r.stderr
    assert "any old one is removed" not in r.stderr
    assert stamp.is_dir()  # nothing was pretended


def test_read_only_directory_keeps_a_stale_stamp_and_says_so(
    ckpt: Path, request: pytest.FixtureRequest
) -> None:
    """A good stamp, then a truncated shard, then verify in a directory it cannot write: exit 1 naming the
    stamp and the error, never "removed". As root, verify runs as uid 65534 (chmod cannot stop root)."""
    assert verify_checkpoint(ckpt).ok
    if os.geteuid() == 0:
        reachable = [d for d in (tempfile.gettempdir(), "/tmp", "/var/tmp") if reachable_by_others(Path(d))]
        if not reachable:
            pytest.skip("no temporary directory that uid 65534 can reach ($TMPDIR, /tmp, /var/tmp)")
        base = Path(tempfile.mkdtemp(prefix="station-verify-ro-", dir=reachable[0]))
        os.chmod(base, 0o755)
        request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
        ckpt = Path(shutil.copytree(ckpt, base / "ckpt"))
    with open(ckpt / SHARD2, "r+b") as f:
        f.truncate(os.path.getsize(ckpt / SHARD2) - 1)
    os.chmod(ckpt, 0o555)
    request.addfinalizer(lambda: os.chmod(ckpt, 0o755))
    if os.geteuid() == 0:
        code = (
            "import os, sys\n"
            "from vllm_station import cli, errors, report\n"
            "from vllm_station.commands import verify\n"
            "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
            f"sys.exit(cli.main(['verify', {str(ckpt)!r}]))\n"
        )
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    else:
        r = station("verify", str(ckpt))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    stamp = ckpt / STAMP_NAME
    assert f"{stamp}: cannot remove the previous stamp: Permission denied" in r.stderr
    assert "could NOT be removed and still stands" in r.stderr
    assert "any old one is removed" not in r.stderr
    assert stamp.is_file()
