# A stand-in for `vllm serve` in the two-node pair VM test. It behaves like vLLM's multi-node
# multiprocessing executor where the test can see it:
#   head (no --headless):  listens on --master-addr:--master-port (the torch.distributed TCP store
#                          rank 0 hosts) and serves the OpenAI endpoints `station wait-ready` probes;
#   worker (--headless):   no API; dials the head's master port now and then, like a joining rank.
# It prints its arguments and the pair's environment once per start (for the journal), and the NCCL
# INFO lines of a two-node communicator in NCCL's log format: GPUDirect RDMA over RoCE, or a socket
# fallback when STUB_NCCL=socket (for the head's `station nccl-check` start gate).
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = sys.argv[1:]
PAIR_KEYS = sorted(
    k
    for k in os.environ
    if k.startswith(("NCCL_", "GLOO_", "VLLM_HOST_IP", "RANK", "HEAD_IP", "WORKER_IP", "RAIL_"))
)


def flag(name: str, default: str) -> str:
    return ARGS[ARGS.index(name) + 1] if name in ARGS else default


SERVED = flag("--served-model-name", ARGS[1] if len(ARGS) > 1 else "stub")
MASTER = (flag("--master-addr", "127.0.0.1"), int(flag("--master-port", "29500")))
HEADLESS = "--headless" in ARGS

print("pair-stub: argv " + json.dumps(ARGS), flush=True)
print("pair-stub: env " + json.dumps({k: os.environ[k] for k in PAIR_KEYS}), flush=True)


def nccl_lines(rank: str) -> list[str]:
    prefix = f"{socket.gethostname()}:{os.getpid()}:{os.getpid()} [0] NCCL INFO"
    peer = "1" if rank == "0" else "0"
    if os.environ.get("STUB_NCCL") == "socket":
        network, via = "Socket", "NET/Socket/0"
    else:
        network, via = "IB", "NET/IB/0/GDRDMA"
    return [
        f"{prefix} NCCL version 2.27.7+cuda13.0",
        f"{prefix} Using network {network}",
        f"{prefix} comm 0x1 rank {rank} nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
        f"{prefix} Channel 00/0 : {peer}[0] -> {rank}[0] [receive] via {via}",
        f"{prefix} Channel 00/0 : {rank}[0] -> {peer}[0] [send] via {via}",
        f"{prefix} Connected all rings",
    ]


for line in nccl_lines(flag("--node-rank", "0")):
    print(line, flush=True)


class Api(BaseHTTPRequestHandler):
    def reply(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self.reply(200, {})
        elif self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": SERVED, "object": "model"}]})
        else:
            self.reply(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if self.path == "/v1/completions":
            choice = {"index": 0, "text": "x", "finish_reason": "length"}
            self.reply(
                200, {"object": "text_completion", "model": SERVED, "choices": [choice], "usage": usage}
            )
        elif self.path == "/v1/chat/completions":
            choice = {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "length"}
            self.reply(
                200, {"object": "chat.completion", "model": SERVED, "choices": [choice], "usage": usage}
            )
        else:
            self.reply(404, {"error": {"message": "not found"}})

    def log_message(self, fmt: str, *args: object) -> None:
        pass


def rendezvous() -> None:
    """The head's TCP store: accept and close, forever."""
    srv = socket.create_server(MASTER)
    while True:
        conn, _ = srv.accept()
        conn.close()


if HEADLESS:
    print(
        f"pair-stub: headless worker, rank {flag('--node-rank', '?')}, head {MASTER[0]}:{MASTER[1]}",
        flush=True,
    )
    while True:
        try:
            socket.create_connection(MASTER, timeout=2).close()
            joined = "reached"
        except OSError as err:
            joined = f"not reachable ({err.strerror or err})"
        print(f"pair-stub: head rendezvous {MASTER[0]}:{MASTER[1]} {joined}", flush=True)
        time.sleep(10)
else:
    threading.Thread(target=rendezvous, daemon=True).start()
    host, port = flag("--host", "127.0.0.1"), int(flag("--port", "8000"))
    print(
        f"pair-stub: head serving {SERVED} on {host}:{port}, rendezvous on {MASTER[0]}:{MASTER[1]}",
        flush=True,
    )
    ThreadingHTTPServer((host, port), Api).serve_forever()
