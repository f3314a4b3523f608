"""`station nccl-check` against NCCL log excerpts (tests/data/nccl/*.log, written from the formats in
NCCL's source — docs/nccl-check.md names the file and line of each), garbage and empty input, the
--unit path through a journalctl stand-in, and --wait on growing files and streams."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import fakejournal
import pytest

from vllm_station.cli import main
from vllm_station.commands import nccl
from vllm_station.commands.nccl import Transport, classify
from vllm_station.status import Status

DATA = Path(__file__).parent / "data" / "nccl"
STATION = [sys.executable, "-m", "vllm_station"]

# file → (status, transport, exit code, substrings of the summary)
CASES = {
    "gdrdma.log": (
        Status.PASS,
        Transport.IB_GDRDMA,
        0,
        ["GPUDirect RDMA over RoCE", "mlx5_1:1/RoCE", "4 channel"],
    ),
    "gdrdma_legacy.log": (Status.PASS, Transport.IB_GDRDMA, 0, ["GPUDirect RDMA", "4 channel"]),
    "gdrdma_unconfirmed.log": (Status.PASS, Transport.IB_GDRDMA, 0, ["'Connected all rings' not seen yet"]),
    "ib_no_gdr.log": (
        Status.WARN,
        Transport.IB,
        0,
        ["without GPUDirect RDMA", "4 of 4", "disabled for HCA mlx5_1"],
    ),
    "socket.log": (
        Status.FAIL,
        Transport.SOCKET,
        1,
        ["~10× slower", "4 channel(s) via NET/Socket", "No device"],
    ),
    "socket_ib_disabled.log": (Status.FAIL, Transport.SOCKET, 1, ["~10× slower", "Using network Socket"]),
    "gid_error.log": (
        Status.FAIL,
        Transport.IB_GDRDMA,
        1,
        ["ibv_modify_qp failed with 22", "local GID index 1"],
    ),
    "gid_error_legacy.log": (Status.FAIL, Transport.IB_GDRDMA, 1, ["ibv_modify_qp failed", "unreachable"]),
    "ib_completion_error.log": (
        Status.FAIL,
        Transport.IB_GDRDMA,
        1,
        ["Got completion from peer", "RETRY_EXC"],
    ),
    "pending_ib.log": (Status.PENDING, None, 4, ["picked network IB", "no channel has connected"]),
    "pending_no_nccl.log": (Status.PENDING, None, 4, ["no NCCL lines in 4 line(s)"]),
    # captured from NCCL 2.28.9 (torch 2.11) on two H200s of one host, 2 ranks, one all-reduce:
    # P2P/SHM disabled so the ranks had to use the network, which had no RDMA device ...
    "real_2.28.9_no_ib_device.log": (
        Status.FAIL,
        Transport.SOCKET,
        1,
        ["8 channel(s) via NET/Socket", "No device"],
    ),
    # ... the same with NCCL_IB_DISABLE=1 ...
    "real_2.28.9_ib_disabled.log": (
        Status.FAIL,
        Transport.SOCKET,
        1,
        ["NCCL_IB_DISABLE set by environment to 1"],
    ),
    # ... and with P2P allowed: NCCL still says "Using network Socket", but no channel uses it.
    "real_2.28.9_one_node_p2p.log": (
        Status.WARN,
        Transport.LOCAL,
        0,
        ["no channel crosses the network", "nNodes 1"],
    ),
}


def test_every_log_excerpt_has_a_case() -> None:
    assert sorted(p.name for p in DATA.glob("*.log")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_classify_log_excerpts(name: str) -> None:
    status, transport, code, fragments = CASES[name]
    report = classify((DATA / name).read_text(), source=name)
    assert report.status is status, report.summary
    assert report.transport == transport
    assert report.exit_code == code
    for fragment in fragments:
        assert fragment in report.summary
    assert (report.fix is None) == (status is Status.PASS)


def test_gdrdma_details() -> None:
    report = classify((DATA / "gdrdma.log").read_text())
    assert report.confirmed is True
    assert report.network == "IB"
    assert report.nccl_version == "2.27.7+cuda13.0"
    assert report.ib_devices == ["mlx5_1:1/RoCE"]
    assert report.oob == "cx8r1:10.100.0.1<0>"
    assert report.gdr_hcas == {"mlx5_1": True}
    assert (report.channels.gdrdma, report.channels.ib, report.channels.socket) == (4, 0, 0)
    assert report.errors == [] and report.hints == []
    assert report.final


def test_gid_error_keeps_the_error_line_and_nccl_hints() -> None:
    report = classify((DATA / "gid_error.log").read_text())
    assert any("misc/ibvwrap.cc:376 NCCL WARN Call to ibv_modify_qp failed" in e for e in report.errors)
    assert any("NCCL error: unhandled system error" in e for e in report.errors)
    assert len(report.hints) == 2 and all("NCCL_IB_GID_INDEX" in h for h in report.hints)
    assert report.fix is not None and "gidIndex" in report.fix and "RoCE v2" in report.fix
    assert report.final


def test_socket_fallback_names_the_cause_and_the_fix() -> None:
    report = classify((DATA / "socket.log").read_text())
    assert report.causes == [
        "(EngineCore_DP0 pid=2207) station-a:2207:2311 [0] NCCL INFO NET/IB : No device found."
    ]
    assert report.socket_devices == ["cx8r1:10.100.0.1<0>"]
    assert report.fix is not None and "NCCL_IB_HCA" in report.fix
    disabled = classify((DATA / "socket_ib_disabled.log").read_text())
    assert "NCCL_IB_DISABLE set by environment to 1" in disabled.summary
    assert disabled.socket_devices == ["cx8r1:10.100.0.2<0>", "enP2p1s0:192.168.1.20<0>"]


def test_net_socket_using_line_alone_is_not_a_fallback() -> None:
    # NCCL lists its socket interfaces even when it then uses IB (issue threads show both lines).
    text = (
        "h:1:1 [0] NCCL INFO NET/Socket : Using [0]cx8r1:10.100.0.1<0>\n"
        "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_1:1/RoCE [RO]; OOB cx8r1:10.100.0.1<0>\n"
        "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n"
        "h:1:1 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1\n"
    )
    assert classify(text).status is Status.PASS


def test_mixed_gdr_and_plain_ib_channels_warn() -> None:
    text = (
        "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n"
        "h:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/IB/0\n"
    )
    report = classify(text)
    assert report.status is Status.WARN
    assert "1 of 2 channel(s)" in report.summary


def test_plugin_and_intra_node_channels() -> None:
    text = (
        "h:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin IBext_v10 (v10)\n"
        "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
        "h:1:1 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IBext_v10/0/GDRDMA/Shared\n"
        "h:1:1 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/AWS Libfabric/0\n"
    )
    report = classify(text)
    assert report.channels.gdrdma == 1  # IBext counts as IB; P2P is not the rail
    assert report.channels.other == 1
    assert report.status is Status.WARN and "unrecognised NCCL network AWS" in report.summary


def test_real_logs_details() -> None:
    no_ib = classify((DATA / "real_2.28.9_no_ib_device.log").read_text())
    # with P2P and SHM disabled NCCL counted the two GPUs of one host as 2 nodes
    assert (no_ib.nccl_version, no_ib.nodes, no_ib.network) == ("2.28.9+cuda13.0", 2, "Socket")
    assert no_ib.confirmed and no_ib.ib_devices == [] and no_ib.socket_devices == ["eth0:192.0.2.2<0>"]
    assert any("Failed to initialize NET plugin IB" in c for c in no_ib.causes)
    one_node = classify((DATA / "real_2.28.9_one_node_p2p.log").read_text())
    assert one_node.channels.local == 48 and one_node.channels.total == 0
    assert one_node.confirmed and not one_node.final  # --wait keeps waiting for a two-station communicator


def test_a_one_rank_communicator_does_not_make_the_pair_local() -> None:
    # vLLM also builds 1-rank groups (nNodes 1); the pair's TP group has nNodes 2
    text = (
        "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0\n"
        "h:1:1 [0] NCCL INFO comm 0x2 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n"
        "h:1:1 [0] NCCL INFO Using network Socket\n"
    )
    report = classify(text)
    assert report.nodes == 2
    assert report.status is Status.FAIL and report.transport is Transport.SOCKET


def test_garbage_input_is_pending_not_a_crash() -> None:
    rng = random.Random(7)
    blob = bytes(rng.randrange(256) for _ in range(20000))
    text = blob.decode("utf-8", errors="replace") + "\nNCCL INFO Channel garbage -> via\nvia NET/\x00\x00\n"
    report = classify(text)
    assert report.status is Status.PENDING
    assert report.exit_code == 4
    assert report.channels.total == 0


def test_empty_input_is_pending() -> None:
    report = classify("")
    assert report.status is Status.PENDING and report.lines_read == 0
    assert report.fix is not None and "NCCL_DEBUG=INFO" in report.fix


# --- CLI -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_log_exit_codes(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, code, _ = CASES[name]
    assert main(["nccl-check", "--log", str(DATA / name)]) == code
    out, err = capsys.readouterr()
    assert out.startswith(status.value)
    assert ("WARN:" in err) == (status is Status.WARN)


def test_cli_json_is_stable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nccl-check", "--log", str(DATA / "ib_no_gdr.log"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == [
        "status", "transport", "summary", "fix", "confirmed", "network", "nodes", "nccl_version",
        "ib_devices", "oob", "socket_devices", "gdr_hcas", "channels", "errors", "hints", "warnings",
        "causes", "evidence", "lines_read", "nccl_lines", "source", "exit_code",
    ]  # fmt: skip
    assert data["status"] == "WARN" and data["transport"] == "ib" and data["exit_code"] == 0
    assert data["channels"] == {"gdrdma": 0, "ib": 4, "socket": 0, "other": 0, "local": 0}


def test_cli_require_gdr_turns_the_warning_into_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nccl-check", "--log", str(DATA / "ib_no_gdr.log"), "--require-gdr"]) == 1
    assert capsys.readouterr().out.startswith("FAIL")
    assert main(["nccl-check", "--log", str(DATA / "gdrdma.log"), "--require-gdr"]) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "exactly one source"),
        (["-", "--log", "x.log"], "exactly one source"),
        (["--unit", "u", "--log", "x.log"], "exactly one source"),
        (["stray"], "unexpected argument 'stray'"),
        (["--log", str(DATA / "gdrdma.log"), "--wait", "-1"], "--wait: must be a number of seconds"),
        (
            ["--log", str(DATA / "gdrdma.log"), "--wait", "5", "--interval", "0"],
            "--interval: must be a number of seconds",
        ),
    ],
)
def test_cli_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nccl-check", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--log", "/nonexistent/nccl.log"], "does not exist"),
        (["--log", str(DATA)], "is a directory"),
    ],
)
def test_cli_unreadable_log_is_exit_3(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unreadable source is Unreachable (3), not a usage error (2) nor PENDING (4)."""
    assert main(["nccl-check", *argv]) == 3
    assert message in capsys.readouterr().err


def test_stdin_subprocess() -> None:
    text = (DATA / "socket.log").read_bytes()
    proc = subprocess.run([*STATION, "nccl-check", "-"], input=text, capture_output=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert b"~10\xc3\x97 slower" in proc.stdout
    assert b"Traceback" not in proc.stderr


# --- --unit through a journalctl stand-in ------------------------------------------------------------

@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fakejournal.install(tmp_path, monkeypatch)


def test_unit_reads_the_current_invocation(
    fake_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_JOURNAL", str(DATA / "gdrdma.log"))
    monkeypatch.setenv("FAKE_INVOCATION", "0123456789abcdef0123456789abcdef")
    assert main(["nccl-check", "--unit", "vllm-station.service"]) == 0
    out = capsys.readouterr().out
    assert "unit vllm-station.service (invocation 0123456789abcdef0123456789abcdef)" in out
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls == [
        "systemctl show --property=InvocationID,LoadState -- vllm-station.service",
        "journalctl _SYSTEMD_INVOCATION_ID=0123456789abcdef0123456789abcdef -o cat --no-pager",
    ]


def test_unit_all_invocations_and_no_invocation_read_the_unit(
    fake_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_JOURNAL", str(DATA / "socket.log"))
    assert main(["nccl-check", "--unit", "vllm-station.service", "--all-invocations"]) == 1
    monkeypatch.setenv("FAKE_INVOCATION", "")  # unit not running: no current invocation
    assert main(["nccl-check", "--unit", "vllm-station.service"]) == 1
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls == [
        "journalctl -u vllm-station.service -o cat --no-pager",
        "systemctl show --property=InvocationID,LoadState -- vllm-station.service",
        "journalctl -u vllm-station.service -o cat --no-pager",
    ]


def test_unit_without_journalctl_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert main(["nccl-check", "--unit", "vllm-station.service"]) == 3
    err = capsys.readouterr().err
    assert "journalctl not found on PATH" in err and "--log FILE" in err


def test_a_unit_systemd_does_not_know_is_exit_3_not_pending(
    fake_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its journal is empty: that must not read as "no transport line yet" (PENDING, exit 4)."""
    empty = tmp_path / "empty.log"
    empty.write_text("")
    monkeypatch.setenv("FAKE_JOURNAL", str(empty))
    monkeypatch.setenv("FAKE_LOADSTATE", "not-found")
    assert main(["nccl-check", "--unit", "no-such.service"]) == 3
    err = capsys.readouterr().err
    assert "systemd has no unit no-such.service" in err and "PENDING" not in err


@pytest.mark.parametrize("unit", ["--host=evil", "-x", "", "a b", "vllm;id", ".service"])
def test_a_unit_name_is_never_an_option(unit: str, fake_bin: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """`--unit=--host=…` would reach systemctl/journalctl as an option: refused at parse time (exit 2)."""
    for command in (["nccl-check"], ["weights-check"], ["watchdog", "--base-url", "http://127.0.0.1:9"]):
        assert main([*command, f"--unit={unit}"]) == 2
        err = capsys.readouterr().err
        assert "--unit" in err and "systemd unit name" in err and "Traceback" not in err
    assert (tmp_path / "calls.log").read_text() == ""  # neither systemctl nor journalctl ran


def test_unit_journal_permission_is_a_clear_error(
    fake_bin: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_JOURNAL", str(DATA / "pending_no_nccl.log"))
    monkeypatch.setenv("FAKE_DENIED", "1")
    assert main(["nccl-check", "--unit", "vllm-station.service"]) == 3
    err = capsys.readouterr().err
    assert "cannot show the system journal" in err and "ExecStartPost=+" in err


# --- --wait ------------------------------------------------------------------------------------------


def _append_later(path: Path, lines: list[str], delay: float) -> threading.Thread:
    def work() -> None:
        time.sleep(delay)
        with path.open("a") as f:
            for line in lines:
                f.write(line + "\n")

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


@pytest.mark.timing
def test_wait_on_a_growing_file_returns_when_connected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "vllm.log"
    log.write_text((DATA / "pending_ib.log").read_text())
    lines = (DATA / "gdrdma.log").read_text().splitlines()
    thread = _append_later(log, [ln for ln in lines if "Channel" in ln or "Connected all rings" in ln], 0.4)
    start = time.monotonic()
    assert main(["nccl-check", "--log", str(log), "--wait", "20", "--interval", "0.1"]) == 0
    elapsed = time.monotonic() - start
    thread.join()
    assert 0.4 <= elapsed < 10
    assert "connected: yes" in capsys.readouterr().out


def test_wait_stops_early_on_socket_fallback(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("")
    thread = _append_later(log, (DATA / "socket_ib_disabled.log").read_text().splitlines(), 0.3)
    start = time.monotonic()
    assert main(["nccl-check", "--log", str(log), "--wait", "20", "--interval", "0.1"]) == 1
    assert time.monotonic() - start < 10
    thread.join()


@pytest.mark.timing
def test_wait_times_out_pending(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    start = time.monotonic()
    code = main(["nccl-check", "--log", str(DATA / "pending_ib.log"), "--wait", "0.5", "--interval", "0.1"])
    elapsed = time.monotonic() - start
    assert code == 4
    assert 0.5 <= elapsed < 5
    assert "still pending after 0.5 s" in capsys.readouterr().out


def test_pending_ok_exits_0_with_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nccl-check", "--log", str(DATA / "pending_ib.log"), "--pending-ok", "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["status"] == "PENDING" and data["exit_code"] == 0
    assert "WARN: NCCL picked network IB" in captured.err
    # a socket fallback still fails
    assert main(["nccl-check", "--log", str(DATA / "socket.log"), "--pending-ok"]) == 1


def test_wait_unconfirmed_gdrdma_gives_the_provisional_pass_at_the_deadline() -> None:
    start = time.monotonic()
    code = main(
        ["nccl-check", "--log", str(DATA / "gdrdma_unconfirmed.log"), "--wait", "0.4", "--interval", "0.1"]
    )
    assert code == 0
    assert time.monotonic() - start >= 0.4


def test_poll_uses_the_clock_and_interval() -> None:
    now = [0.0]
    sleeps: list[float] = []
    texts = iter(["", "", (DATA / "gdrdma.log").read_text()])

    def read() -> tuple[str, str]:
        return next(texts), "test"

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    report = nccl.poll(read, wait=60, interval=5, require_gdr=False, clock=lambda: now[0], sleep=sleep)
    assert report.status is Status.PASS and sleeps == [5, 5]


def test_wait_on_stdin_stream_returns_before_eof() -> None:
    """`journalctl -f … | station nccl-check - --wait N`: the verdict comes when the line arrives."""
    proc = subprocess.Popen(
        [*STATION, "nccl-check", "-", "--wait", "30"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for line in (DATA / "gdrdma.log").read_bytes().splitlines(keepends=True):
            proc.stdin.write(line)
            proc.stdin.flush()
        # stdin stays open: the process must finish on "Connected all rings", not on EOF
        code = proc.wait(timeout=30)
        out = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()
    assert code == 0
    assert out.startswith(b"PASS")
    assert b"connected: yes" in out


def test_wait_on_stdin_eof_before_a_verdict_is_pending() -> None:
    proc = subprocess.run(
        [*STATION, "nccl-check", "-", "--wait", "30"],
        input=(DATA / "pending_ib.log").read_bytes(),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 4
    assert b"still pending" not in proc.stdout  # EOF is not a timeout
    assert proc.stdout.startswith(b"PENDING")
