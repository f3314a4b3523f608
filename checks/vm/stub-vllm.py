# A stand-in for `vllm serve` in the VM test: the OpenAI-compatible endpoints `station wait-ready`
# probes (/health, /v1/models, /v1/completions, /v1/chat/completions), on the host and port given
# the way vLLM takes them. Unknown flags are ignored. Prints one line per start for the journal.
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def flag(name, default):
    args = sys.argv
    return args[args.index(name) + 1] if name in args else default


MODEL = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "serve" else "stub"
SERVED = flag("--served-model-name", MODEL)
HOST = flag("--host", "127.0.0.1")
PORT = int(flag("--port", "8000"))
USAGE = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}


class Handler(BaseHTTPRequestHandler):
    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": SERVED, "object": "model", "owned_by": "stub"}]})
        else:
            self.reply(404, {"error": {"message": "not found", "code": 404}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        if self.path == "/v1/completions":
            choice = {"index": 0, "text": "x", "finish_reason": "length"}
            self.reply(200, {"id": "cmpl-stub", "object": "text_completion", "model": SERVED,
                             "choices": [choice], "usage": USAGE})
        elif self.path == "/v1/chat/completions":
            choice = {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "length"}
            self.reply(200, {"id": "chatcmpl-stub", "object": "chat.completion", "model": SERVED,
                             "choices": [choice], "usage": USAGE})
        else:
            self.reply(404, {"error": {"message": "not found", "code": 404}})

    def log_message(self, fmt, *args):
        pass


print(f"stub-vllm: serving {SERVED} on {HOST}:{PORT} pid={os.getpid()}", flush=True)
ThreadingHTTPServer((HOST, PORT), Handler).serve_forever()
