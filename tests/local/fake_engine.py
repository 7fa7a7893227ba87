"""A process-lifecycle spy for supervisor tests: what the simulator cannot be asked to do.

Run as ``python fake_engine.py PORT MODEL [--child] [--ignore-term]``: it serves
/health and /v1/models on loopback, ``--child`` starts a sleeping child in the
same process group (as vLLM starts its engine core), and ``--ignore-term``
makes SIGTERM do nothing so teardown must escalate to SIGKILL. Engines without
these needs are the simulator itself (``python -m servekit.sim serve``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, MODEL, FLAGS = int(sys.argv[1]), sys.argv[2], sys.argv[3:]


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        routes = {"/health": b"", "/v1/models": json.dumps({"data": [{"id": MODEL}]}).encode()}
        body = routes.get(self.path)
        self.send_response(404 if body is None else 200)
        self.send_header("content-length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, fmt: str, *args: object) -> None:
        print(fmt % args, flush=True)


if "--ignore-term" in FLAGS:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if "--child" in FLAGS:
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(f"fake engine {MODEL} on {PORT}", flush=True)
ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
