"""`station download` against a fake Hugging Face Hub on 127.0.0.1 (tests/hubserver.py), run as a real
subprocess with HF_ENDPOINT pointing at it: full download, resume, interruption, wrong revision, 401,
disk full (a real small tmpfs), offline mode — and nothing is ever marked verified on failure."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubserver import COMMIT, FakeHub, HubState, RepoFile, make_checkpoint, repo_from_dir, tiny_safetensors

from vllm_station.checkpoint import HASHES_NAME, STAMP_NAME
from vllm_station.host import numa

pytestmark = pytest.mark.skipif(
    not numa.available(),
    reason="libnuma missing: apt-get install libnuma1 (station download binds to NUMA node 0 by default)",
)

REPO = "org/glm-tiny"
SHARD2 = "model-00002-of-00003.safetensors"
ARCH = "GlmMoeDsaForCausalLM"


def hub_env(hub: FakeHub, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and k != "STATION_LIBNUMA"}
    env.update(
        HF_ENDPOINT=hub.url,
        HF_HOME=str(home),  # no stored token, no shared cache from the machine
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_ETAG_TIMEOUT="10",
        HF_HUB_DOWNLOAD_TIMEOUT="10",
    )
    env.update(extra)
    return env


def download_cmd(target: Path, *extra: str, revision: str = COMMIT) -> list[str]:
    return [sys.executable, "-m", "vllm_station", "download", REPO, "--revision", revision,
            "--dir", str(target),
            *extra]  # fmt: skip


def run_download(
    hub: FakeHub,
    home: Path,
    target: Path,
    *extra: str,
    revision: str = COMMIT,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        download_cmd(target, *extra, revision=revision),
        capture_output=True, text=True, timeout=300, env={**hub_env(hub, home), **(env or {})},
    )  # fmt: skip


@pytest.fixture
def repo_files(tmp_path: Path) -> dict[str, RepoFile]:
    src = tmp_path / "src"
    make_checkpoint(src, shards=3, tensors_per_shard=4)
    return repo_from_dir(REPO, src)


@pytest.fixture
def hub(repo_files: dict[str, RepoFile]) -> Iterator[FakeHub]:
    with FakeHub(HubState(repo=REPO, files=repo_files)) as h:
        yield h


def assert_not_verified(target: Path) -> None:
    assert not (target / STAMP_NAME).exists()


def test_full_download_bound_to_node0_then_verified(hub: FakeHub, tmp_path: Path) -> None:
    target = tmp_path / "model"
    seen: dict[str, str] = {}
    proc = subprocess.Popen(
        download_cmd(target, "--sha256", "--expect-arch", ARCH, "--expect-quant-algo", "MIXED_PRECISION",
                     "--expect-shards", "3", "--json"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=hub_env(hub, tmp_path / "hf"),
    )  # fmt: skip
    # at its very first request to the hub the downloader is already bound: ask the kernel, by pid
    hub.state.on_first_request = lambda: seen.setdefault("policy", numa.policy_of_pid(proc.pid))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert seen["policy"] == "bind:0"
    report = json.loads(out)
    assert report["membind"] == "bind:0" and report["revision"] == COMMIT
    assert report["downloaded_files"] == 5 and report["verify"]["ok"] is True
    for name, f in hub.state.files.items():
        assert (target / name).read_bytes() == f.data
    stamp = json.loads((target / STAMP_NAME).read_text())
    assert stamp["revision"] == COMMIT and stamp["repo"] == REPO and stamp["sha256_checked"] is True
    assert {f["path"]: f["sha256"] for f in stamp["files"]} == {
        n: f.sha256 for n, f in hub.state.files.items()
    }
    record = json.loads((target / HASHES_NAME).read_text())
    assert record["files"][SHARD2]["sha256"] == hub.state.files[SHARD2].sha256
    assert record["files"]["config.json"]["git_blob_sha1"] == hub.state.files["config.json"].blob_id
    # a rerun fetches nothing again
    before = len([r for r in hub.state.requests if r.method == "GET" and "/resolve/" in r.path])
    again = run_download(hub, tmp_path / "hf", target)
    assert again.returncode == 0, again.stderr
    after = len([r for r in hub.state.requests if r.method == "GET" and "/resolve/" in r.path])
    assert after == before
    assert "already complete" in again.stderr


def test_no_membind_leaves_default_policy(hub: FakeHub, tmp_path: Path) -> None:
    target = tmp_path / "model"
    seen: dict[str, str] = {}
    proc = subprocess.Popen(
        download_cmd(target, "--no-membind", "--json"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=hub_env(hub, tmp_path / "hf"),
    )  # fmt: skip
    hub.state.on_first_request = lambda: seen.setdefault("policy", numa.policy_of_pid(proc.pid))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert json.loads(out)["membind"] is None
    assert seen["policy"] == "default"


def test_dropped_connection_resumes_with_range(tmp_path: Path) -> None:
    # huggingface_hub writes in 10 MiB chunks: drop after 11 MiB so a Range resume is observable
    big = tiny_safetensors(12 * 2**20)
    files = {
        "config.json": RepoFile("config.json", json.dumps({"architectures": [ARCH]}).encode(), lfs=False),
        "model.safetensors": RepoFile("model.safetensors", big, lfs=True),
    }
    state = HubState(repo=REPO, files=files, drops_left={"model.safetensors": 1},
                     drop_after={"model.safetensors": 11 * 2**20})  # fmt: skip
    with FakeHub(state) as hub:
        target = tmp_path / "model"
        r = run_download(hub, tmp_path / "hf", target, "--sha256")
    assert r.returncode == 0, r.stderr
    gets = state.gets("model.safetensors")
    assert len(gets) == 2 and gets[0].range is None
    assert gets[1].range is not None and gets[1].range.startswith("bytes=") and gets[1].range != "bytes=0-"
    assert (
        hashlib.sha256((target / "model.safetensors").read_bytes()).hexdigest()
        == files["model.safetensors"].sha256
    )
    assert json.loads((target / STAMP_NAME).read_text())["sha256_checked"] is True


def test_interrupted_download_fails_clearly_then_resumes(hub: FakeHub, tmp_path: Path) -> None:
    target = tmp_path / "model"
    hub.state.drops_left = {SHARD2: 100}  # the connection always breaks: huggingface_hub gives up
    hub.state.drop_after = {SHARD2: 0}
    r = run_download(hub, tmp_path / "hf", target)
    assert r.returncode == 1
    assert f"download of {SHARD2} interrupted" in r.stderr
    assert "rerun the same command to resume" in r.stderr
    assert "Traceback" not in r.stderr
    assert_not_verified(target)
    assert (target / "model-00001-of-00003.safetensors").exists()
    assert not (target / SHARD2).exists()
    first_gets = len(hub.state.gets("model-00001-of-00003.safetensors"))
    # the network is back: the rerun completes and does not fetch the complete files again
    hub.state.drops_left = {}
    r2 = run_download(hub, tmp_path / "hf", target, "--sha256")
    assert r2.returncode == 0, r2.stderr
    assert len(hub.state.gets("model-00001-of-00003.safetensors")) == first_gets
    assert (target / STAMP_NAME).exists()


def test_sigterm_mid_file_cleans_up(tmp_path: Path) -> None:
    """systemd stops the unit mid-file: exit 130, no partial file left behind, no stamp."""
    big = tiny_safetensors(12 * 2**20)
    files = {
        "config.json": RepoFile("config.json", json.dumps({"architectures": [ARCH]}).encode(), lfs=False),
        "model.safetensors": RepoFile("model.safetensors", big, lfs=True),
    }
    state = HubState(repo=REPO, files=files, stall_after={"model.safetensors": 11 * 2**20})
    target = tmp_path / "model"
    with FakeHub(state) as hub:
        proc = subprocess.Popen(
            download_cmd(target), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=hub_env(hub, tmp_path / "hf"),
        )  # fmt: skip
        assert state.stalled.wait(timeout=60), "the download never reached the stalling file"
        # the client writes what it received at its own pace (a loaded machine): wait for the partial file
        deadline = time.monotonic() + 60
        while not any(f.stat().st_size > 0 for f in (target / ".cache").rglob("*.incomplete")):
            assert time.monotonic() < deadline, "no partial file with bytes in it mid-download"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert not list((target / ".cache").rglob("*.incomplete"))
    assert_not_verified(target)


def test_partial_files_of_a_killed_run_are_removed(hub: FakeHub, tmp_path: Path) -> None:
    target = tmp_path / "model"
    junk = target / ".cache" / "huggingface" / "download" / "abc.1234.incomplete"
    junk.parent.mkdir(parents=True)
    junk.write_bytes(b"x" * 5000)
    r = run_download(hub, tmp_path / "hf", target)
    assert r.returncode == 0, r.stderr
    assert "removed 5.0 kB of partial files" in r.stderr
    assert not junk.exists()


def test_branch_refused_without_allow_branch(hub: FakeHub, tmp_path: Path) -> None:
    target = tmp_path / "model"
    r = run_download(hub, tmp_path / "hf", target, revision="main")
    assert r.returncode == 2
    assert "not a 40-hex commit" in r.stderr and "--allow-branch" in r.stderr
    assert hub.state.requests == []
    assert_not_verified(target)


def test_allow_branch_records_the_commit(hub: FakeHub, tmp_path: Path) -> None:
    target = tmp_path / "model"
    r = run_download(hub, tmp_path / "hf", target, "--allow-branch", revision="main")
    assert r.returncode == 0, r.stderr
    assert f"main is commit {COMMIT}" in r.stderr
    assert json.loads((target / STAMP_NAME).read_text())["revision"] == COMMIT
    record = json.loads((target / HASHES_NAME).read_text())
    assert record["revision"] == COMMIT and record["requested_revision"] == "main"
    # every file was fetched at the commit, never at the moving branch
    assert all(f"/resolve/{COMMIT}/" in q.path for q in hub.state.requests if "/resolve/" in q.path)


def test_wrong_revision(hub: FakeHub, tmp_path: Path) -> None:
    target = tmp_path / "model"
    wrong = "f" * 40
    r = run_download(hub, tmp_path / "hf", target, revision=wrong)
    assert r.returncode == 1
    assert f"revision {wrong} not found in {REPO} (HTTP 404" in r.stderr
    assert "Traceback" not in r.stderr
    assert_not_verified(target)
    assert not any(target.glob("*.safetensors"))


def test_hub_unreachable(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HOME=str(tmp_path / "hf"))
    target = tmp_path / "model"
    r = subprocess.run(download_cmd(target), capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 3, r.stderr
    assert f"cannot reach the hub at http://127.0.0.1:{port}" in r.stderr
    assert "Traceback" not in r.stderr
    assert_not_verified(target)


def test_unauthorized_401(hub: FakeHub, tmp_path: Path) -> None:
    hub.state.token = "hf_right_token"
    target = tmp_path / "model"
    r = run_download(hub, tmp_path / "hf", target)
    assert r.returncode == 1
    assert "HTTP 401" in r.stderr and "token (none given" in r.stderr
    assert_not_verified(target)
    # a wrong token from a file: named by its file, its value never printed
    tf = tmp_path / "token"
    tf.write_text("hf_wrong_secret_value\n")
    r = run_download(hub, tmp_path / "hf", target, "--token-file", str(tf))
    assert r.returncode == 1
    assert "HTTP 401" in r.stderr and f"--token-file {tf}" in r.stderr
    assert "hf_wrong_secret_value" not in r.stderr + r.stdout
    assert_not_verified(target)
    assert not any(target.glob("*.safetensors"))
    # the right token from the environment works
    r = run_download(hub, tmp_path / "hf", target, env={"HF_TOKEN": "hf_right_token"})
    assert r.returncode == 0, r.stderr
    assert "hf_right_token" not in r.stderr + r.stdout
    assert all(q.authorization for q in hub.state.requests[-3:])


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    if shutil.which("mount") is None:  # the Nix build's PATH has no util-linux
        pytest.skip("mount(8) missing: the disk-full test mounts a 24 MiB tmpfs (install util-linux)")
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.skip(
            f"cannot mount a 24 MiB tmpfs for the disk-full test ({r.stderr.strip()}); "
            "needs root/CAP_SYS_ADMIN"
        )
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def big_repo() -> dict[str, RepoFile]:
    files = {
        "config.json": RepoFile("config.json", json.dumps({"architectures": [ARCH]}).encode(), lfs=False)
    }
    weight_map = {}
    for i in range(3):
        name = f"model-{i + 1:05d}-of-00003.safetensors"
        files[name] = RepoFile(name, tiny_safetensors(10 * 10**6), lfs=True)
        weight_map[f"w{i}"] = name
    return files


@pytest.mark.host  # a Nix build lacks mount(8)
def test_disk_space_refused_up_front(small_tmpfs: Path, tmp_path: Path) -> None:
    with FakeHub(HubState(repo=REPO, files=big_repo())) as hub:
        target = small_tmpfs / "model"
        r = run_download(hub, tmp_path / "hf", target)
        assert r.returncode == 1
        assert "not enough disk space" in r.stderr
        assert "need 30.0 MB more" in r.stderr and "only 25.2 MB free" in r.stderr
        assert not [q for q in hub.state.requests if "/resolve/" in q.path]  # nothing fetched
    assert_not_verified(target)


@pytest.mark.host  # a Nix build lacks mount(8)
def test_disk_full_during_download(small_tmpfs: Path, tmp_path: Path) -> None:
    # a hub whose listing under-reports sizes gets past the up-front check; the write then hits ENOSPC
    with FakeHub(HubState(repo=REPO, files=big_repo(), size_scale=0.1)) as hub:
        target = small_tmpfs / "model"
        r = run_download(hub, tmp_path / "hf", target)
    assert r.returncode == 1
    assert "disk full while writing model-0000" in r.stderr
    assert "free space and rerun" in r.stderr
    assert "Traceback" not in r.stderr
    assert_not_verified(target)


def test_offline_mode(hub: FakeHub, tmp_path: Path) -> None:
    target = tmp_path / "model"
    # nothing downloaded yet: offline is a clear error, and the hub is not contacted
    r = run_download(hub, tmp_path / "hf", target, env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 1
    assert "HF_HUB_OFFLINE is set" in r.stderr and "holds no download" in r.stderr
    assert hub.state.requests == []
    assert run_download(hub, tmp_path / "hf", target).returncode == 0
    n = len(hub.state.requests)
    (target / STAMP_NAME).unlink()
    r = run_download(hub, tmp_path / "hf", target, "--sha256", env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    assert len(hub.state.requests) == n  # verified from disk, no request made
    assert json.loads((target / STAMP_NAME).read_text())["sha256_checked"] is True


def test_verify_failure_after_download_leaves_no_stamp(hub: FakeHub, tmp_path: Path) -> None:
    target = tmp_path / "model"
    r = run_download(hub, tmp_path / "hf", target, "--expect-arch", "LlamaForCausalLM")
    assert r.returncode == 1
    assert "download finished but" in r.stderr and "config.json" in r.stderr
    assert_not_verified(target)


def test_include_globs_keep_the_files_verify_needs(hub: FakeHub, tmp_path: Path) -> None:
    target = tmp_path / "model"
    r = run_download(hub, tmp_path / "hf", target, "--include", "*.safetensors")
    assert r.returncode == 0, r.stderr
    assert (target / "config.json").exists() and (target / "model.safetensors.index.json").exists()
    r = run_download(hub, tmp_path / "hf", tmp_path / "other", "--include", "*.bin")
    assert r.returncode == 2 and "matches no file" in r.stderr


def test_stale_stamp_removed_when_a_new_download_starts(hub: FakeHub, tmp_path: Path) -> None:
    target = tmp_path / "model"
    target.mkdir()
    (target / STAMP_NAME).write_text('{"version": 1}')
    hub.state.drops_left = {SHARD2: 100}
    hub.state.drop_after = {SHARD2: 0}
    t0 = time.monotonic()
    r = run_download(hub, tmp_path / "hf", target)
    assert r.returncode == 1, r.stderr
    assert time.monotonic() - t0 < 120
    assert_not_verified(target)


def test_a_stamp_that_cannot_be_removed_stops_the_download(hub: FakeHub, tmp_path: Path) -> None:
    """A directory in the stamp's place cannot be unlinked (even by root): download must not go on
    writing files under a stamp that would still say "verified"."""
    target = tmp_path / "model"
    (target / STAMP_NAME).mkdir(parents=True)
    (target / STAMP_NAME / "keep").touch()
    r = run_download(hub, tmp_path / "hf", target)
    assert r.returncode == 1, r.stderr
    assert f"cannot remove {target / STAMP_NAME} before downloading over it" in r.stderr
    assert "Traceback" not in r.stderr
    assert not any(p.suffix == ".safetensors" for p in target.iterdir())


@pytest.mark.parametrize("name", ["../escaped.json", "/etc/escaped.json", "a/./b.json", "a//b.json"])
def test_a_listing_naming_a_path_outside_dir_fetches_nothing(
    repo_files: dict[str, RepoFile], tmp_path: Path, name: str
) -> None:
    """hf_hub_download writes under --dir by the listed name: a hostile hub must not name `../`."""
    files = {**repo_files, name: RepoFile(name, b"{}", lfs=False)}
    target = tmp_path / "deep" / "model"
    with FakeHub(HubState(repo=REPO, files=files)) as hub:
        r = run_download(hub, tmp_path / "hf", target)
        fetched = [q.path for q in hub.state.requests if "/resolve/" in q.path]
    assert r.returncode == 1, r.stderr
    assert f"the hub listed {name!r}: not a plain relative path; nothing was fetched" in r.stderr
    assert fetched == [] and not (tmp_path / "deep" / "escaped.json").exists()
    assert "Traceback" not in r.stderr


def test_endpoint_option_names_the_hub(hub: FakeHub, tmp_path: Path) -> None:
    """--endpoint names the hub (HF_ENDPOINT unset), a bad one exits 2; the token is never printed (a hub
    echoing it: test_hostile_all_commands.py's echo server)."""
    hub.state.token = "hf_right_token_value"
    token = tmp_path / "token"
    token.write_text("hf_wrong_token_value\n")
    env = {k: v for k, v in hub_env(hub, tmp_path / "hf").items() if k != "HF_ENDPOINT"}
    r = subprocess.run(
        download_cmd(tmp_path / "model", "--endpoint", hub.url, "--token-file", str(token)),
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert r.returncode == 1 and f"HTTP 401 from {hub.url}" in r.stderr, r.stderr
    assert "hf_wrong_token_value" not in r.stdout + r.stderr
    bad = subprocess.run(
        download_cmd(tmp_path / "model", "--endpoint", "ftp://hub.example"),
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert bad.returncode == 2 and "--endpoint" in bad.stderr and "http(s) URL" in bad.stderr
