"""`station copy` against a real rsync daemon on 127.0.0.2 (a generated rsyncd.conf, a read-only module
holding a real safetensors checkpoint verified by the real verify core), run as a real subprocess: a full
copy stamped with the revision, refusals (no stamp, another revision, daemon down or refusing), SIGTERM and
SIGINT mid-file then a resume that sends fewer bytes, and DIR never carrying a stamp while incomplete."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubserver import COMMIT, git_blob_sha1, make_checkpoint

from vllm_station.checkpoint import HASHES_NAME, STAMP_NAME
from vllm_station.checkpoint.hashes import HashRecord, RecordedFile, write_hash_record
from vllm_station.checkpoint.verification import Expectations, verify_checkpoint
from vllm_station.host import numa

RSYNC = shutil.which("rsync")
pytestmark = [
    pytest.mark.skipif(RSYNC is None, reason="rsync missing: apt-get install rsync (station copy runs it)"),
    pytest.mark.skipif(
        not numa.available(),
        reason="libnuma missing: apt-get install libnuma1 (station copy binds to NUMA node 0 by default)",
    ),
]

REPO = "org/glm-tiny"
ARCH = "GlmMoeDsaForCausalLM"
ALGO = "MIXED_PRECISION"
HOST = "127.0.0.2"  # the daemon; the client connects from 127.0.0.1
MODULE = "glm53"
PARTIAL = ".rsync-partial"


def build_source(directory: Path, *, rows: int = 16, revision: str = COMMIT) -> None:
    """Station A's checkpoint: real shards, the hub's hash record, verified (a real stamp)."""
    make_checkpoint(directory, shards=3, tensors_per_shard=4, rows=rows)
    files = {}
    for p in sorted(directory.iterdir()):
        if p.is_file() and p.name not in (STAMP_NAME, HASHES_NAME):
            data = p.read_bytes()
            if p.suffix == ".safetensors":
                files[p.name] = RecordedFile(size=len(data), sha256=hashlib.sha256(data).hexdigest())
            else:
                files[p.name] = RecordedFile(size=len(data), git_blob_sha1=git_blob_sha1(data))
    write_hash_record(directory, HashRecord(repo=REPO, revision=revision, files=files))
    report = verify_checkpoint(
        directory, Expectations(arch=[ARCH], quant_algo=ALGO, shards=3), repo=REPO, revision=revision
    )
    assert report.ok, report.problems


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class RsyncDaemon:
    """`rsync --daemon --no-detach` with a generated config, in its own session, killed by group."""

    def __init__(self, root: Path, path: Path, *, allow: str = "127.0.0.1") -> None:
        self.root = root
        self.port = free_port(HOST)
        self.conf = root / "rsyncd.conf"
        self.log = root / "rsyncd.log"
        root.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(
            f"use chroot = no\nuid = {os.getuid()}\ngid = {os.getgid()}\nreverse lookup = no\n"
            f"log file = {self.log}\n\n"
            f"[{MODULE}]\npath = {path}\nread only = yes\nhosts allow = {allow}\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"rsync://{HOST}:{self.port}/{MODULE}"

    def __enter__(self) -> RsyncDaemon:
        assert RSYNC is not None
        self.proc = subprocess.Popen(
            [RSYNC, "--daemon", "--no-detach", "--config", str(self.conf), "--address", HOST,
             "--port", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((HOST, self.port), timeout=1).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(
                        f"rsync daemon did not start: {self.log.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)


@pytest.fixture
def src(tmp_path: Path) -> Path:
    d = tmp_path / "a" / "model"
    build_source(d)
    return d


@pytest.fixture
def daemon(tmp_path: Path, src: Path) -> Iterator[RsyncDaemon]:
    with RsyncDaemon(tmp_path / "daemon", src) as d:
        yield d


def copy_cmd(url: str, target: Path, *extra: str, revision: str = COMMIT) -> list[str]:
    return [sys.executable, "-m", "vllm_station", "copy", url, "--dir", str(target), "--revision", revision,
            "--timeout", "5", *extra]  # fmt: skip


def run_copy(url: str, target: Path, *extra: str, revision: str = COMMIT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(copy_cmd(url, target, *extra, revision=revision), capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def tree(directory: Path) -> dict[str, int]:
    """Every file under directory (rsync's temp and partial files included) but the stamp and the copy's own
    scratch directory (`.station-copy-*`: A's stamp fetched alone, never part of DIR's checkpoint, as
    copy's own listing skips it): path -> size."""
    out: dict[str, int] = {}
    # os.walk, not rglob: rsync renames files and removes its partial directory while this runs
    for root, dirs, files in os.walk(directory, onerror=lambda _err: None):
        dirs[:] = [d for d in dirs if not d.startswith(".station-copy-")]
        for name in files:
            p = Path(root) / name
            try:
                if name != STAMP_NAME and p.is_file():
                    out[p.relative_to(directory).as_posix()] = p.stat().st_size
            except OSError:  # renamed away under us by rsync
                continue
    return out


def same_files(a: Path, b: Path) -> bool:
    names = {n for n in tree(a) if not n.startswith(PARTIAL)}
    return names == set(tree(b)) and all((a / n).read_bytes() == (b / n).read_bytes() for n in names)


def rsync_children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    kids = [int(c) for c in text.split()]
    out = []
    for k in kids:
        try:
            if Path(f"/proc/{k}/comm").read_text().strip() == "rsync":
                out.append(k)
        except OSError:
            continue
    return out


def test_full_copy_verified_and_stamped_then_rerun_sends_nothing(
    daemon: RsyncDaemon, src: Path, tmp_path: Path
) -> None:
    target = tmp_path / "b" / "model"
    r = run_copy(daemon.url, target, "--sha256", "--expect-arch", ARCH, "--expect-quant-algo", ALGO,
                 "--expect-shards", "3", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["source"] == daemon.url and report["revision"] == COMMIT and report["repo"] == REPO
    assert report["membind"] == "bind:0"
    assert report["verify"]["ok"] is True and report["verify"]["sha256_checked"] is True
    total = sum((src / n).stat().st_size for n in tree(src))  # the hash record travels, the stamp does not
    assert report["files"] == len(tree(src)) == 6 and report["bytes"] == total
    assert report["transferred_files"] == 6 and report["transferred_bytes"] == total
    assert report["resumed_bytes"] == 0 and report["up_to_date_bytes"] == 0
    assert report["rate_bytes_per_s"] > 0 and report["copy_seconds"] > 0
    assert "memory bound to bind:0" in r.stderr
    assert same_files(target, src)
    stamp = json.loads((target / STAMP_NAME).read_text())
    source_stamp = json.loads((src / STAMP_NAME).read_text())
    assert stamp["revision"] == COMMIT and stamp["repo"] == REPO and stamp["sha256_checked"] is True
    assert [(f["path"], f["size"]) for f in stamp["files"]] == [
        (f["path"], f["size"]) for f in source_stamp["files"]
    ]
    assert stamp["verified_at"] >= source_stamp["verified_at"]
    # a rerun: every file is already here, nothing is sent; the stamp is written again after verify
    r = run_copy(daemon.url, target, "--json", "--repo", "other/name")
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout)
    assert again["transferred_files"] == 0 and again["transferred_bytes"] == 0
    assert again["up_to_date_bytes"] == total
    assert json.loads((target / STAMP_NAME).read_text())["repo"] == "other/name"  # --repo is recorded
    # human output
    r = run_copy(daemon.url, target)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"copy {daemon.url} → {target}: {REPO}@{COMMIT}, 6 files")
    assert "verify " in r.stdout and "OK" in r.stdout and f"stamp: {target / STAMP_NAME}" in r.stdout


def test_files_a_lacks_are_deleted_and_a_stale_stamp_removed(
    daemon: RsyncDaemon, src: Path, tmp_path: Path
) -> None:
    target = tmp_path / "b" / "model"
    target.mkdir(parents=True)
    (target / "model-00009-of-00009.safetensors").write_bytes(b"old revision's shard")
    (target / STAMP_NAME).write_text('{"version": 1, "stale": true}')
    r = run_copy(daemon.url, target, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["deleted_files"] == 1
    assert not (target / "model-00009-of-00009.safetensors").exists()
    assert same_files(target, src)
    assert json.loads((target / STAMP_NAME).read_text())["revision"] == COMMIT


def test_source_without_stamp_refused(daemon: RsyncDaemon, src: Path, tmp_path: Path) -> None:
    target = tmp_path / "b" / "model"
    (src / STAMP_NAME).unlink()
    r = run_copy(daemon.url, target)
    assert r.returncode == 1, r.stderr
    assert "A's copy is not verified" in r.stderr and "run station verify on A first" in r.stderr
    assert "Traceback" not in r.stderr
    assert not any(target.iterdir())  # nothing copied, not even a temporary directory left
    # an unusable stamp is no better
    (src / STAMP_NAME).write_text("{not json")
    r = run_copy(daemon.url, target)
    assert r.returncode == 1, r.stderr
    assert "A's copy is not verified" in r.stderr and "not valid JSON" in r.stderr
    assert not any(target.iterdir())


def test_wrong_revision_refused_and_dir_untouched(daemon: RsyncDaemon, src: Path, tmp_path: Path) -> None:
    target = tmp_path / "b" / "model"
    assert run_copy(daemon.url, target).returncode == 0
    before = tree(target)
    wrong = "f" * 40
    r = run_copy(daemon.url, target, revision=wrong)
    assert r.returncode == 1, r.stderr
    assert f"records revision {COMMIT}, but --revision {wrong}" in r.stderr
    assert tree(target) == before and (target / STAMP_NAME).exists()  # refused before touching DIR


def test_daemon_not_running(tmp_path: Path) -> None:
    port = free_port(HOST)  # nothing listens there
    target = tmp_path / "b" / "model"
    t0 = time.monotonic()
    r = run_copy(f"rsync://{HOST}:{port}/{MODULE}", target)
    assert r.returncode == 3, r.stderr
    assert f"cannot reach the rsync daemon at {HOST}:{port}" in r.stderr
    assert "Connection refused" in r.stderr
    assert "vllm-station-checkpoint-share running on A" in r.stderr and f"TCP {port}" in r.stderr
    assert "Traceback" not in r.stderr
    assert time.monotonic() - t0 < 30
    assert not (target / STAMP_NAME).exists()


def test_daemon_silent_times_out(tmp_path: Path) -> None:
    with socket.socket() as server:  # accepts, never greets
        server.bind((HOST, 0))
        server.listen()
        port = server.getsockname()[1]
        t0 = time.monotonic()
        r = subprocess.run(copy_cmd(f"rsync://{HOST}:{port}/{MODULE}", tmp_path / "m", "--timeout", "1"),
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 3, r.stderr
    assert f"cannot reach the rsync daemon at {HOST}:{port}" in r.stderr and "timeout" in r.stderr
    assert time.monotonic() - t0 < 20


def test_unknown_module_and_access_denied(src: Path, tmp_path: Path) -> None:
    target = tmp_path / "b" / "model"
    with RsyncDaemon(tmp_path / "d1", src) as d:
        r = run_copy(f"rsync://{HOST}:{d.port}/nomodule", target)
        assert r.returncode == 3, r.stderr
        assert "has no module 'nomodule'" in r.stderr and "Unknown module" in r.stderr
    with RsyncDaemon(tmp_path / "d2", src, allow="127.0.0.9") as d:  # B's rail address is another one
        r = run_copy(d.url, target)
        assert r.returncode == 3, r.stderr
        assert "refuses this station" in r.stderr and "hosts allow" in r.stderr
    assert not (target / STAMP_NAME).exists()


def wait_for(predicate: object, timeout: float, what: str) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def interrupt_mid_file(
    url: str, target: Path, sig: signal.Signals
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Start a slow copy (--bwlimit), signal it once rsync has written 1 MB more into DIR (a shard's temporary
    file, or the partial file it resumes); the policies of the rsync processes seen meanwhile."""
    baseline = sum(tree(target).values()) if target.exists() else 0
    proc = subprocess.Popen(copy_cmd(url, target, "--bwlimit", "3M"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    policies: set[str] = set()

    def mid_file() -> bool:
        for kid in rsync_children(proc.pid):
            with contextlib.suppress(Exception):  # the process may just have exited
                policies.add(numa.policy_of_pid(kid))
        assert proc.poll() is None, proc.communicate()
        return sum(tree(target).values()) > baseline + 2**20

    try:
        wait_for(mid_file, 30, "rsync never wrote 1 MB")
        assert not (target / STAMP_NAME).exists()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), policies


def test_interrupted_copy_resumes_with_fewer_bytes(tmp_path: Path) -> None:
    src = tmp_path / "a" / "model"
    build_source(src, rows=1024)  # ~5 MB shards: seconds at --bwlimit 3M
    target = tmp_path / "b" / "model"
    total = sum(tree(src).values())
    with RsyncDaemon(tmp_path / "daemon", src) as d:
        r, policies = interrupt_mid_file(d.url, target, signal.SIGTERM)
        assert r.returncode == 130, r.stderr
        assert "interrupted (SIGTERM); run again to resume (partial files kept" in r.stderr
        assert "Traceback" not in r.stderr
        assert policies == {"bind:0"}  # rsync inherited the binding
        kept = tree(target / PARTIAL)
        assert kept and all(s > 0 for s in kept.values())
        assert not (target / STAMP_NAME).exists()

        r, _ = interrupt_mid_file(d.url, target, signal.SIGINT)
        assert r.returncode == 130, r.stderr
        assert "interrupted (SIGINT)" in r.stderr
        assert not (target / STAMP_NAME).exists()
        partial = sum(tree(target / PARTIAL).values())
        assert partial > 0

        r = run_copy(d.url, target, "--json", "--sha256")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert "resuming: " in r.stderr
    assert report["bytes"] == total
    assert report["resumed_bytes"] > 0 and report["transferred_bytes"] < total
    assert report["transferred_bytes"] + report["resumed_bytes"] + report["up_to_date_bytes"] == total
    assert report["verify"]["sha256_checked"] is True
    assert same_files(target, src) and not (target / PARTIAL).exists()
    sent, resumed, rate = report["transferred_bytes"], report["resumed_bytes"], report["rate_bytes_per_s"]
    print(f"\nresume: partial {partial} B, resumed {resumed} B, sent {sent} B of {total} B at {rate:.0f} B/s")


def test_stamp_never_present_while_incomplete(tmp_path: Path) -> None:
    """B holds a verified copy; A's files change (same revision re-fetched): from the moment DIR stops being
    either complete state, no stamp exists until the new copy is complete and verified."""
    src = tmp_path / "a" / "model"
    build_source(src)
    target = tmp_path / "b" / "model"
    with RsyncDaemon(tmp_path / "daemon", src) as d:
        assert run_copy(d.url, target).returncode == 0
        old = tree(target)
        shutil.rmtree(src)
        build_source(src, rows=768)
        new = {n: s for n, s in tree(src).items()}
        assert new != old
        proc = subprocess.Popen(copy_cmd(d.url, target, "--bwlimit", "4M"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        samples = {"old": 0, "new": 0, "between": 0}
        violations: list[dict[str, int]] = []
        try:
            while proc.poll() is None:
                before = (target / STAMP_NAME).exists()
                state = tree(target)
                after = (target / STAMP_NAME).exists()
                kind = "old" if state == old else "new" if state == new else "between"
                samples[kind] += 1
                if kind == "between" and before and after:
                    violations.append(state)
                time.sleep(0.01)
            _out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err
    assert "%) at " in err  # bounded progress lines on stderr
    assert samples["between"] > 5, samples  # the copy was observed mid-way
    assert violations == []
    assert same_files(target, src)
    assert json.loads((target / STAMP_NAME).read_text())["files"][0]["size"] == new["config.json"]


def test_verify_failure_leaves_no_stamp(daemon: RsyncDaemon, tmp_path: Path) -> None:
    target = tmp_path / "b" / "model"
    r = run_copy(daemon.url, target, "--expect-arch", "LlamaForCausalLM")
    assert r.returncode == 1, r.stderr
    assert "copy finished but" in r.stderr and "NOT verified" in r.stderr
    assert not (target / STAMP_NAME).exists()


def test_source_changed_after_its_stamp(daemon: RsyncDaemon, src: Path, tmp_path: Path) -> None:
    (src / "extra.bin").write_bytes(b"written after verify")
    target = tmp_path / "b" / "model"
    r = run_copy(daemon.url, target)
    assert r.returncode == 1, r.stderr
    assert "does not match the file list of A's stamp" in r.stderr and "extra.bin" in r.stderr
    assert not (target / STAMP_NAME).exists()


@pytest.mark.parametrize(
    ("source", "extra", "phrase"),
    [
        ("http://127.0.0.2:8730/glm53", (), "is not rsync://HOST:PORT/MODULE"),
        ("rsync://127.0.0.2:99999/glm53", (), "bad port"),
        ("rsync://127.0.0.2:8730/glm53/sub", (), "just the module name"),
        ("rsync://127.0.0.2:8730/", (), "just the module name"),
        ("rsync://127.0.0.2:8730/glm53", ("--expect-shards", "0"), "--expect-shards: must be a whole"),
        ("rsync://127.0.0.2:8730/glm53", ("--membind", "63"), "NUMA node 63 does not exist"),
        ("rsync://127.0.0.2:8730/glm53", ("--bwlimit", "fast"), "--bwlimit 'fast'"),
        ("rsync://127.0.0.2:8730/glm53", ("--timeout", "0"), "--timeout: must be a number of seconds"),
        ("rsync://127.0.0.2:8730/glm53", ("--membind", "1", "--no-membind"), "not allowed with"),
    ],
)
def test_bad_arguments(source: str, extra: tuple[str, ...], phrase: str, tmp_path: Path) -> None:
    r = run_copy(source, tmp_path / "m", *extra)
    assert r.returncode == 2, r.stderr
    assert phrase in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "m").exists()


def test_missing_revision_and_foreign_dir(tmp_path: Path) -> None:
    no_revision = [sys.executable, "-m", "vllm_station", "copy", "rsync://127.0.0.2:8730/glm53",
                   "--dir", str(tmp_path / "m")]  # fmt: skip
    r = subprocess.run(no_revision, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--revision" in r.stderr
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("not a checkpoint")
    r = run_copy(f"rsync://{HOST}:{free_port(HOST)}/{MODULE}", home)
    assert r.returncode == 2, r.stderr
    assert "is not empty and holds no checkpoint" in r.stderr
    assert (home / "notes.txt").exists()


def test_interrupt_handler_keeps_the_process_alive_until_rsync_exits() -> None:
    """The signal handler only forwards SIGTERM to rsync's group while it runs (no exception mid-read)."""
    from vllm_station.commands.copy import _Stop

    stop = _Stop()
    child = subprocess.Popen(["sleep", "30"], process_group=0)
    stop.child = child
    try:
        stop(signal.SIGTERM, None)
        assert child.wait(timeout=10) == -signal.SIGTERM
        assert stop.signum == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):  # rsync gone: the next signal interrupts Python
            stop(signal.SIGINT, None)
        assert stop.signum == signal.SIGTERM  # the first signal names the interruption
    finally:
        if child.poll() is None:
            child.kill()


def test_a_stamp_that_cannot_be_removed_stops_the_copy(daemon: RsyncDaemon, tmp_path: Path) -> None:
    """A directory in the stamp's place cannot be unlinked (even by root): no byte is copied under it."""
    target = tmp_path / "b" / "model"
    (target / STAMP_NAME).mkdir(parents=True)
    (target / STAMP_NAME / "keep").touch()
    r = run_copy(daemon.url, target)
    assert r.returncode == 1, r.stderr
    assert f"cannot remove {target / STAMP_NAME}" in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in target.iterdir()) == [STAMP_NAME]


def _planted(directory: Path) -> list[str]:
    """What a filter copy must never create: devices, FIFOs, sockets, setuid/setgid or world-writable
    files, symlinks that leave the tree."""
    found = []
    top = os.path.realpath(directory)
    for root, dirs, files in os.walk(directory):
        for name in files + dirs:
            p = Path(root) / name
            st = os.lstat(p)
            rel = p.relative_to(directory).as_posix()
            if stat.S_ISLNK(st.st_mode):
                if not os.path.realpath(p).startswith(top + "/"):
                    found.append(f"{rel}: symlink out of the tree")
            elif not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                found.append(f"{rel}: mode {st.st_mode:o}")
            elif st.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_IWOTH):
                found.append(f"{rel}: mode {stat.S_IMODE(st.st_mode):04o}")
    return found


def _plant(src: Path) -> None:
    """A hostile or compromised A: a world-writable /dev/mem, a FIFO, a socket, a setuid-root program, a
    symlink to /etc and one out of the tree, all in the module, and all listed in A's stamp."""
    os.mknod(src / "mem", 0o666 | stat.S_IFCHR, os.makedev(1, 1))
    os.mkfifo(src / "pipe")
    (src / "sub").mkdir()
    cwd = os.getcwd()
    os.chdir(src / "sub")  # a relative name: a deep tmp path (a Nix build's) is past AF_UNIX's 108 bytes
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind("sock")
    finally:
        os.chdir(cwd)
    (src / "run").write_bytes(b"#!/bin/sh\nid\n")
    os.chmod(src / "run", 0o6777)
    os.symlink("/etc/passwd", src / "passwd")
    os.symlink("../../../outside", src / "up")
    stamp = json.loads((src / STAMP_NAME).read_text())
    for name in ("mem", "pipe", "sub/sock", "run", "passwd", "up"):
        stamp["files"].append({"path": name, "size": 0, "sha256": None})
    (src / STAMP_NAME).write_text(json.dumps(stamp))


@pytest.mark.skipif(os.geteuid() != 0, reason="device nodes and a root rsync daemon need root")
def test_copy_is_a_filter_nothing_but_regular_files_arrives(tmp_path: Path) -> None:
    src = tmp_path / "a" / "model"
    build_source(src)
    _plant(src)
    assert len(_planted(src)) == 6  # the check sees each planted thing (else the assertion below is empty)
    target = tmp_path / "b" / "model"
    with RsyncDaemon(tmp_path / "daemon", src) as d:
        r = run_copy(d.url, target)
    # the copy fails (what arrived is not what A's stamp lists) and leaves nothing dangerous behind
    assert r.returncode == 1, r.stderr
    assert "does not match the file list of A's stamp" in r.stderr and "missing: " in r.stderr
    assert "Traceback" not in r.stderr
    assert _planted(target) == []
    assert not (target / STAMP_NAME).exists()
    assert stat.S_IMODE((target / "run").stat().st_mode) == 0o644  # a regular file arrives, without its bits
    assert sorted(p.name for p in target.iterdir() if p.name.endswith(".safetensors"))  # the copy did run


def test_verify_refuses_what_is_not_a_regular_file(src: Path) -> None:
    """A stamp vouches for exactly what is there: a FIFO, a device, a setuid file or a symlink out of the
    tree is a problem, not a stamped file (the gate would otherwise loop on its own advice)."""
    for plant, phrase in (
        (lambda: os.mkfifo(src / "pipe"), "pipe: it is a FIFO"),
        (lambda: os.symlink("/etc/passwd", src / "passwd"), "passwd: a symlink out of"),
        (lambda: ((src / "run").write_bytes(b"x"), os.chmod(src / "run", 0o4755)), "run: mode 4755"),
        (lambda: os.symlink("/etc", src / "etc"), "etc: a symlink to a directory"),
    ):
        plant()
        report = verify_checkpoint(src, Expectations(arch=[ARCH]), repo=REPO, revision=COMMIT)
        assert not report.ok
        assert not (src / STAMP_NAME).exists()
        assert any(phrase in f"{p.path}: {p.problem}" for p in report.problems), report.problems
        for name in ("pipe", "passwd", "run", "etc"):
            with contextlib.suppress(FileNotFoundError):
                (src / name).unlink()
    assert verify_checkpoint(src, Expectations(arch=[ARCH]), repo=REPO, revision=COMMIT).ok  # clean again
