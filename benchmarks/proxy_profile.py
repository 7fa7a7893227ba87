"""Where servekit's proxy spends its CPU: pyinstrument over a closed-loop PD load.

    .venv/bin/pip install pyinstrument
    .venv/bin/python benchmarks/proxy_profile.py [--concurrency 32] [--duration 10]
        [--backend lean] [--out profile.txt]

Starts proxy_compare.py's zero-latency PD backends (one prefill, one decode),
runs ``python -m pyinstrument -m servekit.proxy`` in front of them, sends
``--concurrency`` streamed requests back to back for ``--duration`` seconds,
stops the proxy with SIGINT (it shuts down cleanly, so pyinstrument writes its
report) and prints the report's top of the call tree.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import proxy_compare as pc


async def load(url: str, concurrency: int, duration: float, tokens: int) -> tuple[float, int]:
    t = pc.Target("servekit", pc.via_proxy(url))
    rate, errors, _ = await pc.measure_rate(t, concurrency, duration, tokens)
    return rate, errors


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--backend", choices=("sim", "lean"), default="lean")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="proxy-profile-"))
    pp, dp, sp = (pc.free_port() for _ in range(3))
    backend = [sys.executable, pc.__file__, "--backend", args.backend, "--tokens",
               str(args.tokens), "--serve-backend", str(pp), str(dp)]  # fmt: skip
    report = args.out or logs / "profile.txt"
    proxy = [sys.executable, "-m", "pyinstrument", "-r", "text", "--show-all", "-o", str(report),
             "-m", "servekit.proxy", "--prefill", f"http://127.0.0.1:{pp}", "--decode",
             f"http://127.0.0.1:{dp}", "--port", str(sp), "--log-level", "warning",
             "--prefill-policy", "round-robin", "--decode-policy", "round-robin"]  # fmt: skip
    with pc.child(backend, logs / "backend.log"):
        with (logs / "proxy.log").open("wb") as out:
            proc = subprocess.Popen(proxy, stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{sp}"
            asyncio.run(pc.wait_ok(f"http://127.0.0.1:{dp}/health"))
            asyncio.run(pc.wait_ok(url + "/health"))
            rate, errors = asyncio.run(load(url, args.concurrency, args.duration, args.tokens))
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
    print(f"# {rate:.0f} req/s, {errors} errors at concurrency {args.concurrency}; {report}")
    print("\n".join(report.read_text().splitlines()[:80]))


if __name__ == "__main__":
    main()
