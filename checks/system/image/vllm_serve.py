"""The test image's entrypoint: `vllm serve`'s command line, served by `station simulate`.

The system tier runs the unit exactly as NixOS renders it, so this entrypoint receives the real vLLM
arguments (model first, then the flags). It prints them (the tests compare them with the rendered
unit), serves the OpenAI API with `station simulate` on the same host/port/served name, requires
VLLM_API_KEY when the unit hands one over, and prints the file /var/lib/vllm-station/engine.log when
a test put one there (e.g. an NCCL transport excerpt for `station nccl-check`). Rank 0 of a pair listens on the master
port; rank 1 dials it and holds the connection (its session). SIGTERM: exit 0.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from vllm_station.entry import simulate

EXTRA_LOG = Path("/var/lib/vllm-station/engine.log")


def flag(args: list[str], name: str, default: str) -> str:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return default


def rendezvous(host: str, port: int) -> None:
    """Rank 0 listens on --master-addr:--master-port, like torch.distributed's store (the worker's
    stop waits for it to close), and keeps each connection for the life of its session."""
    server = socket.create_server((host, port))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            held.append(conn)  # closed by the kernel when this process ends: the session is over

    threading.Thread(target=accept, daemon=True).start()


def join(host: str, port: int) -> None:
    """Rank 1 dials the head's store until it answers and keeps the connection without reading it, as a
    headless vLLM worker does: when the head's process ends, the worker holds a dead session (CLOSE_WAIT)
    and never joins another head."""

    def dial() -> None:
        while True:
            try:
                conn = socket.create_connection((host, port), timeout=5)
            except OSError:
                time.sleep(1)
                continue
            print(f"joined the head's session at {host}:{port}", flush=True)
            while True:  # held, never read: a session with one head only
                time.sleep(3600)
                conn.fileno()

    threading.Thread(target=dial, daemon=True).start()


def load_weights(argv: list[str]) -> None:
    """The model-loading line vLLM 0.32's GPU runner writes per rank (gpu_model_runner.py:5150,
    `format_gib` rounds to 2 decimals), with this rank's share of the checkpoint's safetensors."""
    model = Path(argv[0]) if argv and not argv[0].startswith("-") else None
    if model is None or not model.is_dir():
        return
    tp = int(flag(argv, "--tensor-parallel-size", "1"))
    rank = flag(argv, "--node-rank", "0")
    size = sum(f.stat().st_size for f in model.glob("*.safetensors"))
    gib = round(size / tp / 2**30, 2)
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(
        f"(Worker_TP{rank} pid={os.getpid()}) INFO {stamp} [gpu_model_runner.py:5150] "
        f"Model loading took {gib} GiB memory and 0.500000 seconds",
        flush=True,
    )


def main(argv: list[str]) -> int:
    print("vllm-serve-args " + json.dumps(argv), flush=True)
    if flag(argv, "--node-rank", "") == "0" and flag(argv, "--master-port", ""):
        rendezvous(
            flag(argv, "--master-addr", "127.0.0.1"),
            int(flag(argv, "--master-port", "0")),
        )
    if flag(argv, "--node-rank", "") == "1" and flag(argv, "--master-port", ""):
        join(flag(argv, "--master-addr", "127.0.0.1"), int(flag(argv, "--master-port", "0")))
    load_weights(argv)
    if EXTRA_LOG.is_file():
        print(EXTRA_LOG.read_text(), end="", flush=True)
    if "--headless" in argv:
        print("headless worker: no API", flush=True)
        sim_args = ["--host", "127.0.0.1", "--port", "0"]
    else:
        model = argv[0] if argv and not argv[0].startswith("-") else "model"
        sim_args = [
            "--host",
            flag(argv, "--host", "0.0.0.0"),
            "--port",
            flag(argv, "--port", "8000"),
            "--model",
            flag(argv, "--served-model-name", model),
            "--ttft",
            "0.01",
            "--itl",
            "0.002",
        ]
    key = os.environ.get("VLLM_API_KEY")
    if key:
        fd, name = tempfile.mkstemp()
        os.write(fd, key.encode())
        os.close(fd)
        sim_args += ["--api-key-file", name]
    return simulate(sim_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
