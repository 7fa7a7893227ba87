"""A stand-in engine for supervisor tests: /health and /v1/models on loopback.

Run as ``python fake_engine.py PORT MODEL [--delay S] [--child] [--ignore-term]``:
``--delay`` answers 503 on /health for S seconds, ``--child`` starts a sleeping
child in the same process group (as vLLM starts its engine core), and
``--ignore-term`` makes SIGTERM do nothing so teardown must escalate to SIGKILL.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, MODEL = int(sys.argv[1]), sys.argv[2]
FLAGS = sys.argv[3:]
DELAY = float(FLAGS[FLAGS.index("--delay") + 1]) if "--delay" in FLAGS else 0.0
START = time.monotonic()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200 if time.monotonic() - START >= DELAY else 503, b"")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": MODEL}]}).encode())
        else:
            self._send(404, b"")

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args: object) -> None:
        print(fmt % args, flush=True)


if "--ignore-term" in FLAGS:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if "--child" in FLAGS:
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(f"fake engine {MODEL} on {PORT}", flush=True)
ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
