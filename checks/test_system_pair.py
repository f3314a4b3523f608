"""Tier `system`, the pair: station-a (head) and station-b (worker) as NixOS renders them, each in its own
booted machine, joined by a veth "rail" named like the example's (cx8r1, 192.168.100.1/30 ↔ .2/30) in
two network namespaces this test makes — the only addresses the traffic goes to besides loopback.

Test-only differences are named in checks/system/render.nix (no CDI GPU, no /dev/infiniband, the
test image by digest, memlock at this sandbox's limit). Each namespace gets its own docker-registry on
its own 127.0.0.1, serving the same storage. The head's engine prints an NCCL log excerpt written by
the test (/var/lib/vllm-station/engine.log), which the head's `station nccl-check` reads from the journal.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from nixenv import CACHE, REPO, require_nix, require_tree
from system.common import API_KEY, FIGURES, free_port, glm_checkpoint, require_tools
from system.images import Registry, build_sim_image
from system.station import API_KEY_PATH, Station, render, station_venv

pytestmark = pytest.mark.system

NCCL = REPO / "pkgs" / "station-tools" / "tests" / "data" / "nccl"
REVISION = (
    "5f0c6e1d2b3a49788c7d6e5f4a3b2c1d0e9f8a7b"  # checks/examples/station-{a,b}.nix
)
ENTRY_DIR = "/var/lib/vllm-station-models/glm53"  # the download entry's dir
MODEL_DIR = f"{ENTRY_DIR}/revisions/{REVISION}"  # the pinned revision's (contract.revisionDir)
HEAD_IP, WORKER_IP = "192.168.100.1", "192.168.100.2"
SERVE = "vllm-station.service"
BEACON = "vllm-station-pair-beacon.service"
ENGINE_LOG = "/var/lib/vllm-station/engine.log"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class Pair:
    head: Station
    worker: Station
    bin_dir: Path  # the station venv's bin/ (what the units' store path holds)


def _netns(a: str, b: str) -> None:
    for ns in (a, b):
        subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
    _ip(
        "link",
        "add",
        "cx8r1",
        "netns",
        a,
        "mtu",
        "9000",
        "type",
        "veth",
        "peer",
        "name",
        "cx8r1",
        "netns",
        b,
        "mtu",
        "9000",
    )
    for ns, address in ((a, HEAD_IP), (b, WORKER_IP)):
        _ip("-n", ns, "addr", "add", f"{address}/30", "dev", "cx8r1")
        _ip("-n", ns, "link", "set", "cx8r1", "up")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    require_nix()
    tree = require_tree(
        "NIXOS_TREE", "nixos/lib/eval-config.nix", "the system tier (rendered units)"
    )
    require_tools()
    port = free_port()
    host_registry = Registry(CACHE / "system" / "registry", port)
    host_registry.start()
    namespaces = ("station-sys-a", "station-sys-b")
    registries: list[Registry] = []
    stations: list[Station] = []
    try:
        image = build_sim_image(host_registry, tmp_path_factory.mktemp("image"))
        host_registry.stop()
        _netns(*namespaces)
        for ns in namespaces:
            r = Registry(CACHE / "system" / "registry", port, netns=ns)
            r.start()
            registries.append(r)
        bin_dir = station_venv(CACHE)
        for example, ns, name in (
            ("station-a", namespaces[0], "pair-a"),
            ("station-b", namespaces[1], "pair-b"),
        ):
            rendered = render(str(tree), example, image)
            st = Station(
                rendered, Path(tmp_path_factory.mktemp(name)), name, bin_dir, netns=ns
            )
            glm_checkpoint(
                st.work / "var" / MODEL_DIR.removeprefix("/var/"), shards=50, layers=78
            )  # as rsync'd A→B
            stations.append(st)
            st.boot(runtime="docker")
            m = st.machine
            # the verified copy as the download unit leaves it: the real `station verify` recording the
            # repository and the pinned revision, owned by the download user (safetensors writes 0600)
            m.run(
                [
                    str(bin_dir / "station"),
                    "verify",
                    MODEL_DIR,
                    "--repo",
                    "nvidia/GLM-5.3-NVFP4",
                    "--revision",
                    REVISION,
                    "--expect-arch",
                    "GlmMoeDsaForCausalLM",
                    "--expect-quant-algo",
                    "MIXED_PRECISION",
                    "--expect-shards",
                    "50",
                ],
                timeout=120,
            )
            m.run(["chown", "-R", "vllm-station:vllm-station", ENTRY_DIR])
        head, worker = stations
        head.machine.write(API_KEY_PATH, API_KEY + "\n", mode=0o600)
        # the NCCL transport lines only: the model-loading line comes from the engine itself (the
        # shim reports this checkpoint's share per rank, as vLLM does), for the head's weights-check
        nccl_lines = (NCCL / "gdrdma.log").read_text().splitlines(keepends=True)
        head.machine.write(ENGINE_LOG, "".join(line for line in nccl_lines if "Model loading" not in line))
        yield Pair(head, worker, bin_dir)
    finally:
        for st in stations:
            for unit in (SERVE, BEACON):
                print(
                    f"---- {st.name}: {unit} ----\n"
                    + "\n".join(st.machine.journal(unit).splitlines()[-30:]),
                    file=sys.stderr,
                )
            st.stop()
        for r in registries:
            r.stop()
        host_registry.stop()
        for ns in namespaces:
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


def _realtime(st: Station, unit: str, prop: str) -> int:
    value = st.machine.show(unit, prop)[prop]
    return int(value or 0)


SHARE = "vllm-station-checkpoint-share.service"
COPY = "vllm-station-download-glm53.service"  # on the worker: station copy from the head's share
STAMP = f"{MODEL_DIR}/.station-verified.json"


def _listing(st: Station) -> list[str]:
    """name and size of every file of the checkpoint, the stamp left out."""
    out = st.machine.run(
        ["sh", "-c", f"cd {MODEL_DIR} && find . -type f ! -name .station-verified.json -printf '%p %s\\n'"]
    ).stdout
    return sorted(out.splitlines())


def _reverify(st: Station, bin_dir: Path) -> None:
    """`station verify` as the download unit runs it, after the test changed the checkpoint."""
    st.machine.run(
        [str(bin_dir / "station"), "verify", MODEL_DIR, "--repo", "nvidia/GLM-5.3-NVFP4", "--revision",
         REVISION, "--expect-arch", "GlmMoeDsaForCausalLM", "--expect-quant-algo", "MIXED_PRECISION",
         "--expect-shards", "50"],
        timeout=120,
    )  # fmt: skip


def _copy_again(worker: Station) -> subprocess.CompletedProcess[str]:
    """The worker's copy unit from an empty directory (oneshot: stop, reset, start; blocks until done).

    A verified copy starts the worker's serving unit (its last step: what the first switch of a new station
    relies on): checked here by a new invocation of it, which is stopped again, because the scenarios
    below start it themselves, in the order they test."""
    m = worker.machine
    m.systemctl("stop", COPY, check=False)
    m.systemctl("stop", SERVE, check=False, timeout=180)  # an earlier copy may have started it
    m.systemctl("reset-failed", COPY, check=False)
    m.systemctl("reset-failed", SERVE, check=False)
    m.run(["sh", "-c", f"rm -rf {MODEL_DIR}/* {MODEL_DIR}/.[!.]*"])
    before = m.show(SERVE, "InvocationID")["InvocationID"]
    proc = m.run(["systemctl", "start", COPY], check=False, timeout=300)
    if proc.returncode == 0:
        worker.wait_for(
            "the copy unit starting the serving unit",
            lambda: m.show(SERVE, "InvocationID")["InvocationID"] != before,
            60,
        )
        m.systemctl("stop", SERVE, check=False, timeout=180)
        m.systemctl("reset-failed", SERVE, check=False)
    return proc


def test_the_worker_copies_the_heads_checkpoint_by_unit(pair: Pair) -> None:
    """A shares its verified copy (rsync daemon on the rail), B's download unit pulls, verifies, stamps;
    an unverified source is refused."""
    head, worker = pair.head, pair.worker
    head.machine.systemctl("start", SHARE)
    assert head.state(SHARE)["ActiveState"] == "active"
    t0 = time.monotonic()
    proc = _copy_again(worker)
    FIGURES.record("pair: copy unit A→B, 50 shards (s)", round(time.monotonic() - t0, 1))
    journal = worker.machine.journal(COPY)
    assert proc.returncode == 0, journal[-3000:]
    stamp = json.loads(worker.machine.run(["cat", STAMP]).stdout)
    assert stamp["revision"] == REVISION and stamp["repo"] == "nvidia/GLM-5.3-NVFP4", stamp
    assert _listing(worker) == _listing(head), "the copy has every file, with A's sizes"
    assert f"rsync://{HEAD_IP}:8730/glm53" in journal
    # bound to node 0 on both ends: the units say so (the tool binds itself too)
    assert worker.machine.show(COPY, "NUMAPolicy")["NUMAPolicy"] == "bind"
    assert head.machine.show(SHARE, "NUMAPolicy")["NUMAPolicy"] == "bind"

    # A's copy without its stamp: B refuses it and has no stamp of its own
    head.machine.run(["mv", STAMP, STAMP + ".kept"])
    try:
        refused = _copy_again(worker)
        journal = worker.machine.journal(COPY)
        assert refused.returncode != 0
        assert "not verified" in journal, journal[-2000:]
        assert worker.machine.run(["test", "-e", STAMP], check=False).returncode != 0
    finally:
        head.machine.run(["mv", STAMP + ".kept", STAMP])
    assert _copy_again(worker).returncode == 0, "B verified again for the next tests"


def test_an_interrupted_copy_resumes(pair: Pair) -> None:
    """`systemctl stop` mid-copy keeps the partial file and leaves no stamp; the next start resumes."""
    head, worker = pair.head, pair.worker
    big = f"{MODEL_DIR}/extra-weights.bin"  # 24 MiB at the test's 4 MB/s copy limit: ~6 s
    head.machine.run(["sh", "-c", f"head -c {24 << 20} /dev/urandom > {big} && chown vllm-station: {big}"])
    try:
        _reverify(head, pair.bin_dir)
        m = worker.machine
        m.systemctl("stop", COPY, check=False)
        m.systemctl("reset-failed", COPY, check=False)
        m.run(["sh", "-c", f"rm -rf {MODEL_DIR}/* {MODEL_DIR}/.[!.]*"])
        m.run(["systemctl", "start", "--no-block", COPY])
        partial = f"{MODEL_DIR}/.rsync-partial/extra-weights.bin"
        def copied() -> int:
            out = m.run(["sh", "-c", f"stat -c %s {MODEL_DIR}/.extra-weights.bin.* {partial} 2>/dev/null"],
                        check=False).stdout.split()  # fmt: skip
            return max((int(n) for n in out), default=0)

        worker.wait_for("a third of the big file copied", lambda: copied() >= 8 << 20, 60, interval=0.2)
        m.systemctl("stop", COPY, check=False, timeout=120)
        assert m.run(["test", "-e", STAMP], check=False).returncode != 0, "no stamp after an interruption"
        kept = int(m.run(["stat", "-c", "%s", partial]).stdout)
        assert 0 < kept < 24 << 20, kept
        assert "run again to resume" in m.journal(COPY)
        m.systemctl("reset-failed", COPY, check=False)
        t0 = time.monotonic()
        assert m.run(["systemctl", "start", COPY], check=False, timeout=300).returncode == 0, m.journal(COPY)[-3000:]
        FIGURES.record("pair: copy resumed after stop (s)", round(time.monotonic() - t0, 1))
        FIGURES.record("pair: bytes kept by the interrupted copy", kept)
        assert json.loads(m.run(["cat", STAMP]).stdout)["revision"] == REVISION
        resumed = re.findall(r"resumed ([0-9.,]+ [kMG]?B)", m.journal(COPY))[-1]  # this run's report
        assert resumed != "0 B", "the second run reused the partial file"
        FIGURES.record("pair: bytes the resumed copy reused", resumed)
        assert _listing(worker) == _listing(head)
    finally:
        head.machine.run(["rm", "-f", big])
        _reverify(head, pair.bin_dir)
        assert _copy_again(worker).returncode == 0, "B verified again for the next tests"


def test_the_head_waits_for_the_worker_then_starts_after_it(pair: Pair) -> None:
    head, worker = pair.head, pair.worker
    head.machine.run(["systemctl", "start", "--no-block", SERVE])
    head.wait_for(
        "the head's wait for the worker",
        lambda: "waiting up to" in head.machine.journal(SERVE),
        60,
    )
    time.sleep(5)
    assert head.state()["ActiveState"] == "activating", (
        "the head holds its start while the worker is down"
    )
    assert "vllm-serve-args" not in head.machine.journal(SERVE), (
        "no engine before the worker is up"
    )
    t0 = time.monotonic()
    worker.machine.systemctl("start", SERVE, timeout=180)
    assert worker.state()["ActiveState"] == "active"
    worker.wait_state("active", 60, BEACON)
    head.wait_state("active", 240)
    FIGURES.record(
        "pair: worker start to head active (s)", round(time.monotonic() - t0, 1)
    )
    beacon_up = _realtime(worker, BEACON, "ActiveEnterTimestampMonotonic")
    head_engine = _realtime(head, SERVE, "ExecMainStartTimestampMonotonic")
    assert 0 < beacon_up < head_engine, (
        "the head's engine started after the worker's beacon was up"
    )
    journal = head.machine.journal(SERVE)
    assert f"worker {WORKER_IP} is up" in journal
    assert journal.index(f"worker {WORKER_IP} is up") < journal.index(
        "vllm-serve-args"
    ), "engine after the beacon"
    # wait-ready, then nccl-check on the GPUDirect RDMA excerpt: the head is active
    assert "ready after" in journal
    assert "GPUDirect RDMA" in journal or "GDRDMA" in journal, journal[-2000:]


def test_the_heads_weights_check_ran_after_ready(pair: Pair) -> None:
    """Step 7 read the engine's model-loading line for rank 0 and judged it against half the checkpoint."""
    journal = pair.head.machine.journal(SERVE)
    assert "Worker_TP0" in journal and "per rank (TP 2)" in journal, journal[-3000:]
    assert pair.head.state()["ActiveState"] == "active"


def test_the_worker_stops_after_the_head(pair: Pair) -> None:
    head, worker = pair.head, pair.worker
    worker.machine.run(["systemctl", "stop", "--no-block", SERVE])
    worker.wait_for(
        "the worker's wait for the head",
        lambda: "waiting for the head" in worker.machine.journal(BEACON),
        30,
    )
    time.sleep(3)
    assert worker.state()["ActiveState"] in ("active", "deactivating"), (
        "the worker holds while the head runs"
    )
    t0 = time.monotonic()
    head.machine.systemctl("stop", SERVE, timeout=120)
    worker.wait_state("inactive", 60)
    FIGURES.record(
        "pair: head stopped to worker stopped (s)", round(time.monotonic() - t0, 1)
    )
    # one kernel, one CLOCK_MONOTONIC: the machines' timestamps compare directly
    head_down = _realtime(head, SERVE, "InactiveEnterTimestampMonotonic")
    worker_down = _realtime(worker, SERVE, "InactiveEnterTimestampMonotonic")
    assert 0 < head_down < worker_down, (head_down, worker_down)
    assert "is down; stopping the worker" in worker.machine.journal(BEACON)


def test_a_socket_fallback_fails_the_heads_start(pair: Pair) -> None:
    head, worker = pair.head, pair.worker
    head.machine.write(ENGINE_LOG, (NCCL / "socket.log").read_text())
    worker.machine.systemctl("start", SERVE, timeout=180)
    proc = head.machine.run(["systemctl", "start", SERVE], check=False, timeout=240)
    assert proc.returncode != 0, "nccl-check refuses a start over sockets"
    s = head.state()
    assert s["ActiveState"] != "active" and s["Result"] == "exit-code", s
    journal = head.machine.journal(SERVE)
    assert (
        "Socket" in journal.split("station nccl-check")[-1]
        or "socket" in journal.lower()
    )
    head.machine.systemctl("stop", SERVE, check=False, timeout=120)
    worker.machine.systemctl("stop", SERVE, check=False, timeout=120)


REJOIN = "vllm-station-pair-rejoin.service"


def _head_ready_log(head: Station) -> None:
    """The head's engine prints the GPUDirect RDMA excerpt (nccl-check passes), as the fixture set it."""
    nccl_lines = (NCCL / "gdrdma.log").read_text().splitlines(keepends=True)
    head.machine.write(ENGINE_LOG, "".join(line for line in nccl_lines if "Model loading" not in line))


def test_a_worker_left_in_a_dead_session_fails_the_heads_start_fast_then_rejoins(pair: Pair) -> None:
    """The head's engine goes away while the worker's engine holds its session: the worker's beacon says
    `orphaned`; the head's next start is refused at its wait-worker step within seconds, naming the worker
    and the state, instead of hanging until the 1,800 s start timeout. Then the worker's rejoin unit,
    seeing the head down, restarts the worker, and the head's next start serves again."""
    head, worker = pair.head, pair.worker
    _head_ready_log(head)
    for st in (head, worker):
        st.machine.systemctl("stop", SERVE, check=False, timeout=180)
        st.machine.systemctl("reset-failed", SERVE, check=False)  # the start limit's count, anew
    worker.machine.systemctl("stop", REJOIN)  # hold the worker's own restart: the state the gate must see
    worker.machine.systemctl("start", SERVE, timeout=180)
    head.machine.systemctl("start", SERVE, timeout=240)
    assert head.state()["ActiveState"] == "active"
    worker.wait_for("the worker's engine in the head's session",
                    lambda: "engine joined:" in worker.machine.journal(BEACON), 60)  # fmt: skip

    head.machine.systemctl("stop", SERVE, timeout=180)  # the head's engine ends; the worker does not notice
    worker.wait_for("the worker's session over",
                    lambda: "engine orphaned:" in worker.machine.journal(BEACON), 60)  # fmt: skip
    assert worker.state()["ActiveState"] == "active", "the worker's unit stays active: only its beacon tells"
    t0 = time.monotonic()
    proc = head.machine.run(["systemctl", "start", SERVE], check=False, timeout=600)
    refused_s = round(time.monotonic() - t0, 1)
    assert proc.returncode != 0, "the head's start is refused"
    journal = head.machine.journal(SERVE)
    refusal = f"the worker {WORKER_IP} is up, but its engine is not ready for a new head: engine orphaned"
    assert refusal in journal, journal[-3000:]
    assert "Restart the worker first" in journal
    FIGURES.record("pair: head start refused, worker in a dead session (s)", refused_s)
    assert refused_s < 600, "well within the 1,800 s start timeout it hung to before"

    # the worker's rejoin restarts it (the head is down); the head's restart then serves again
    t1 = time.monotonic()
    before = worker.machine.show(SERVE, "InvocationID")["InvocationID"]
    worker.machine.systemctl("start", REJOIN)
    worker.wait_for("the worker restarted by its rejoin unit",
                    lambda: worker.machine.show(SERVE, "InvocationID")["InvocationID"] != before, 180)  # fmt: skip
    FIGURES.record("pair: rejoin, look to worker restarted (s)", round(time.monotonic() - t1, 1))
    assert "so that its engine can join the next head: engine orphaned" in worker.machine.journal(REJOIN)
    worker.wait_state("active", 120)
    worker.wait_state("active", 60, BEACON)
    # the head's own retry (Restart=always, 60 s later) may meet its start limit here: the tier's earlier
    # starts count. Start it as an operator would, after reset-failed.
    head.machine.systemctl("reset-failed", SERVE, check=False)
    t2 = time.monotonic()
    head.machine.systemctl("start", SERVE, timeout=240)
    head.wait_state("active", 60)
    FIGURES.record("pair: head start after the worker's rejoin, to active (s)", round(time.monotonic() - t2, 1))
    journal = head.machine.journal(SERVE)
    assert f"worker {WORKER_IP} is up (rank 1), its engine waits for a head" in journal, journal[-3000:]
    head.machine.systemctl("stop", SERVE, check=False, timeout=180)
    worker.machine.systemctl("stop", SERVE, check=False, timeout=180)
