"""The two ends every command shares, handled once in `cli.main`, proven per command on real processes.

* A closed stdout (`station … --json | head -1`): exit 141 (`EXIT_BROKEN_PIPE`), no traceback and no
  "Exception ignored" on stderr. The reading end is closed before the command starts, so its first
  write fails every time (a reader that closes after the first bytes races a short output).
* Ctrl-C (SIGINT to the process group, as a terminal sends it) on the long-running commands: exit 130
  (`EXIT_INTERRUPTED`) within 5 s, no traceback.

Every process runs in its own session and is killed by process group at teardown.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import free_port
from hubserver import make_checkpoint

from vllm_station import cli
from vllm_station.errors import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, EXIT_OK, EXIT_PENDING

DATA = Path(__file__).resolve().parent / "data"
NCCL_LOG = str(DATA / "nccl" / "gdrdma.log")
NCCL_PENDING = str(DATA / "nccl" / "pending_no_nccl.log")
WEIGHTS_LOG = str(DATA / "weights" / "gpu_tp2_head.log")
WEIGHTS_PENDING = str(DATA / "weights" / "gpu_tp2_pending.log")
STOP_WITHIN_S = 5.0

# Per command, a cheap invocation that writes to stdout: a real run where one is quick, else --help.
# "{ckpt}" is a tiny real checkpoint. Every entry of cli.COMMANDS has one (checked below).
CLOSED_STDOUT: dict[str, list[list[str]]] = {
    "smoke": [["smoke", "--help"]],
    "wait-ready": [["wait-ready", "--help"]],
    "prestart": [["prestart", "--help"]],
    "preflight": [["preflight", "--json", "--only", "numa"], ["preflight", "--help"]],
    "numa-exec": [["numa-exec", "--help"]],
    "download": [["download", "--help"]],
    "verify": [["verify", "--json", "{ckpt}"], ["verify", "{ckpt}"]],
    "bench": [["bench", "--help"]],
    "simulate": [["simulate", "--help"]],
    "nccl-check": [["nccl-check", "--json", "--log", NCCL_LOG], ["nccl-check", "--log", NCCL_LOG]],
    "start-gate": [["start-gate", "--help"], ["gate", "--help"]],
    "pair": [["pair", "--help"], ["pair", "beacon", "--help"]],
    "exec": [["exec", "--help"]],
    "weights-check": [
        ["weights-check", "--json", f"--log={WEIGHTS_LOG}", "--checkpoint={ckpt}", "--tensor-parallel-size=2"]
    ],
    "copy": [["copy", "--help"]],
    "probe": [["probe", "--help"]],
    "watchdog": [["watchdog", "--help"]],
    "gateway": [["gateway", "--help"]],
    "gates": [["gates", "list"], ["gates", "--help"]],
    "golive": [["golive", "--help"]],
    "revisions": [["revisions", "--help"], ["revisions", "list", "--help"]],
    "secrets": [["secrets", "--help"], ["secrets", "check", "--help"]],
    "drain": [["drain", "--help"]],
    "undrain": [["undrain", "--help"]],
    "rollout": [
        ["rollout", "--station", "a=h1", "--station", "b=h2", "--dry-run", "--json"],
        ["rollout", "--help"],
    ],
}


def _env(unbuffered: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start `python -m vllm_station ARGS` in a new session; every one is killed by group at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str], *, stdout: int, unbuffered: bool = False) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vllm_station", *args],
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=_env(unbuffered),
            start_new_session=True,
            # Ctrl-C as a terminal delivers it: a test run started in the background (`scripts/check &`,
            # CI) inherits SIGINT ignored, and Python installs no KeyboardInterrupt handler then.
            preexec_fn=_default_sigint,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("signals") / "ckpt"
    make_checkpoint(d, shards=2, tensors_per_shard=2)
    return d


def _clean(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert "Exception ignored" not in stderr, stderr


def test_every_command_has_a_closed_stdout_case() -> None:
    assert set(CLOSED_STDOUT) == set(cli.COMMANDS)


CASES = [
    pytest.param(argv, unbuffered, id=f"{' '.join(argv)}{' unbuffered' if unbuffered else ''}")
    for name in cli.COMMANDS
    for i, argv in enumerate(CLOSED_STDOUT.get(name, []))
    for unbuffered in ((False, True) if i == 0 and name in {"nccl-check", "verify", "smoke"} else (False,))
]


@pytest.mark.parametrize(("argv", "unbuffered"), CASES)
def test_closed_stdout_is_exit_141_without_traceback(
    argv: list[str], unbuffered: bool, ckpt: Path, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    args = [a.replace("{ckpt}", str(ckpt)) for a in argv]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: `| head -1` at its quickest
    try:
        proc = spawn(args, stdout=write_end, unbuffered=unbuffered)
    finally:
        os.close(write_end)
    _, err = proc.communicate(timeout=120)
    stderr = err.decode(errors="replace")
    _clean(stderr)
    assert proc.returncode == EXIT_BROKEN_PIPE, stderr


def test_open_stdout_keeps_the_commands_exit_code(spawn: Callable[..., subprocess.Popen[bytes]]) -> None:
    """The flush `main` adds changes nothing when the reader reads everything (a test that can fail)."""
    proc = spawn(["nccl-check", "--json", "--log", NCCL_LOG], stdout=subprocess.PIPE)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_OK, err
    assert out.startswith(b"{")
    proc = spawn(["nccl-check", "--log", NCCL_PENDING], stdout=subprocess.PIPE)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_PENDING, err


def test_broken_pipe_not_of_stdout_is_not_hidden(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A socket's EPIPE escaping a command is its bug: re-raised, not reported as a closed stdout."""
    import vllm_station

    (tmp_path / "epipe_cmd.py").write_text(
        "def configure(parser):\n    pass\n\n"
        "def run(args):\n    raise BrokenPipeError(32, 'Broken pipe (a socket)')\n"
    )
    monkeypatch.setattr(vllm_station, "__path__", [*vllm_station.__path__, str(tmp_path)])
    monkeypatch.setitem(cli.COMMANDS, "epipe", ("epipe_cmd", "a command whose socket broke"))
    monkeypatch.delitem(sys.modules, "vllm_station.epipe_cmd", raising=False)
    with pytest.raises(BrokenPipeError, match="a socket"):
        cli.main(["epipe"])


def _long_running(case: str, ckpt: Path) -> list[str]:
    dead = free_port()  # nothing listens there
    argv = {
        "wait-ready": f"wait-ready --base-url http://127.0.0.1:{dead} --timeout 600 --interval 1",
        "nccl-check --wait": f"nccl-check --log {NCCL_PENDING} --wait 600 --interval 1",
        "weights-check --wait": (
            f"weights-check --log {WEIGHTS_PENDING} --checkpoint {ckpt} --tensor-parallel-size 2 "
            "--wait 600 --interval 1"
        ),
        "simulate": f"simulate --port {free_port()}",
        "pair beacon": f"pair beacon --bind 127.0.0.1 --port {free_port()} --role head --rank 0",
        "pair wait-worker": (
            f"pair wait-worker --url http://127.0.0.1:{dead}/ready --timeout 600 --interval 1 "
            "--worker-address 127.0.0.1"
        ),
    }[case]
    return argv.split()  # no path here has a space


LONG_RUNNING = ["wait-ready", "nccl-check --wait", "weights-check --wait", "simulate", "pair beacon"]
LONG_RUNNING += ["pair wait-worker"]


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler installed for `signum` (/proc/PID/status SigCgt, bit signum-1)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) & (1 << (signum - 1)))


def catches_sigint(pid: int) -> bool:
    return catches(pid, signal.SIGINT)


def _interrupt(proc: subprocess.Popen[bytes], after_s: float = 1.0) -> tuple[int, float, str]:
    """SIGINT to the process group after `after_s` (Ctrl-C); (exit code, seconds to stop, stderr).

    A terminal's Ctrl-C comes after the program started: on a loaded machine Python may not have reached
    the point where it installs its SIGINT handler within `after_s` (the signal then kills it, -2, the
    flake seen once in 11 loaded runs), so the signal waits for the handler too, and says so when it
    had to."""
    time.sleep(after_s)
    deadline = time.monotonic() + 60
    waited = False
    while not catches_sigint(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
        waited = True
        time.sleep(0.05)
    if waited:
        print(f"environmental wait: python had not installed its SIGINT handler {after_s} s after its start")
    assert proc.poll() is None, (proc.returncode, proc.stderr.read() if proc.stderr else b"")
    os.killpg(proc.pid, signal.SIGINT)
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {STOP_WITHIN_S} s after SIGINT")
    return int(proc.returncode), time.monotonic() - t0, err.decode(errors="replace")


@pytest.mark.parametrize("case", LONG_RUNNING)
def test_ctrl_c_stops_a_long_running_command_with_130(
    case: str, ckpt: Path, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    proc = spawn(_long_running(case, ckpt), stdout=subprocess.DEVNULL)
    code, took, stderr = _interrupt(proc, after_s=1.5)
    _clean(stderr)
    assert code == EXIT_INTERRUPTED, (took, stderr)
    assert took < STOP_WITHIN_S


# the long-running commands that install no SIGTERM handler of their own (simulate and the beacon do)
SIGTERM_AS_CTRL_C = ["wait-ready", "nccl-check --wait", "weights-check --wait", "pair wait-worker"]


@pytest.mark.parametrize("case", SIGTERM_AS_CTRL_C)
def test_sigterm_runs_the_ctrl_c_cleanup_then_ends_the_process_by_sigterm(
    case: str, ckpt: Path, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    """`kill PID` (or `systemctl stop`): the command says so on stderr (the Ctrl-C path ran: its cleanup
    with it), then dies by SIGTERM — not exit 130, which systemd would count as a failure of a stopped
    unit."""
    proc = spawn(_long_running(case, ckpt), stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not catches(proc.pid, signal.SIGTERM) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, (proc.returncode, proc.stderr.read() if proc.stderr else b"")
    time.sleep(0.5)  # into the command's run, past the parser
    os.kill(proc.pid, signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {STOP_WITHIN_S} s after SIGTERM")
    stderr = err.decode(errors="replace")
    _clean(stderr)
    assert proc.returncode == -signal.SIGTERM, stderr
    assert "terminated (SIGTERM)" in stderr


def test_main_in_process_leaves_sigterm_as_it_found_it(capsys: pytest.CaptureFixture[str]) -> None:
    """The handler is the command's while it runs; a program embedding `cli.main` gets its own back."""
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert cli.main(["--version"]) == 0
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    def mine(signum: int, frame: object) -> None:  # pragma: no cover - never delivered
        raise AssertionError("not delivered here")

    signal.signal(signal.SIGTERM, mine)
    try:
        assert cli.main(["--version"]) == 0
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_ctrl_c_stops_bench_against_a_slow_simulate(spawn: Callable[..., subprocess.Popen[bytes]]) -> None:
    port = free_port()
    spawn(["simulate", "--port", str(port), "--ttft", "60"], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until it listens
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            break
        time.sleep(0.1)
    argv = f"bench sweep --base-url http://127.0.0.1:{port} -c 1 -n 1 --warmup 0 --no-progress".split()
    bench = spawn(argv, stdout=subprocess.PIPE)  # its first request waits 60 s for a token
    code, took, stderr = _interrupt(bench, after_s=2.0)
    _clean(stderr)
    assert code == EXIT_INTERRUPTED, (took, stderr)
    assert took < STOP_WITHIN_S


def test_verify_hash_pool_drops_queued_files_on_ctrl_c() -> None:
    """`verify --sha256`: Ctrl-C while files are queued stops after the ones being hashed, not all."""
    from vllm_station.checkpoint.verification import _HashPool

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), _HashPool(max_workers=2) as pool:
        futures = [pool.submit(time.sleep, 0.5) for _ in range(40)]  # 10 s of queued work
        futures[0].result()
        raise KeyboardInterrupt
    assert time.monotonic() - t0 < 2.0
    assert sum(f.cancelled() for f in futures) >= 36


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_ctrl_c_while_a_command_is_still_importing(command: str) -> None:
    """SIGINT during startup (every command: its module still importing, before any handler of its own):
    130, not a traceback."""
    module = f"vllm_station.{cli.COMMANDS[command][0]}"
    code = (
        "import importlib, os, signal, sys\n"
        "real = importlib.import_module\n"
        "def slow(name, *a, **k):\n"
        f"    if name == {module!r}:  # Ctrl-C arrives while the command's module loads\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(name, *a, **k)\n"
        "importlib.import_module = slow\n"
        "from vllm_station.cli import main\n"
        f"sys.exit(main([{command!r}, '--help']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, preexec_fn=_default_sigint
    )
    assert proc.returncode == EXIT_INTERRUPTED, proc.stderr
    assert "interrupted" in proc.stderr
    _clean(proc.stderr)


def test_catches_sigint_reads_the_handler_mask() -> None:
    """The wait before a Ctrl-C: a process without a handler is not 'ready'; this one (pytest) has one."""
    handled = signal.getsignal(signal.SIGINT) not in (signal.SIG_DFL, signal.SIG_IGN)
    assert catches_sigint(os.getpid()) == handled
    sleeper = subprocess.Popen(["sleep", "30"], preexec_fn=_default_sigint)
    try:
        time.sleep(0.2)
        assert not catches_sigint(sleeper.pid)  # sleep(1) installs no handler: the default action
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not catches_sigint(2**22 + 1)  # no such process
