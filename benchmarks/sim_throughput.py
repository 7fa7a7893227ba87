"""How fast one simulator process serves short completions, and its memory.

Starts ``servekit sim`` with N zero-latency endpoints (52 = a3/1p3d's 4 + 48
API servers) in its own process pinned to one core, drives it from separate
load-generator processes (aiohttp clients) pinned elsewhere, and reports:

- completed requests/s over the measurement window (after a warm-up),
- the sim's CPU use in that window, so requests/s per fully used core can be
  told apart from a load generator that could not keep up,
- the sim's RSS when idle and its peak RSS.

    .venv/bin/python benchmarks/sim_throughput.py --endpoints 52 --duration 10

Goal (issue 5): >= 3,000 short completions/s from one core, < 200 MB with 52
endpoints.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _spec(endpoints: int) -> dict[str, Any]:
    return {
        "endpoints": [
            {"name": f"e{i}", "port": 0, "profile": "zero", "served_model_name": "sim"}
            for i in range(endpoints)
        ]
    }


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _rss_mb(pid: int, key: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _body(i: int, args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "sim", "prompt": f"short prompt {i}"}
    body["max_tokens"] = args.max_tokens
    if args.stream:
        body["stream"] = True
    return body


async def _drive(urls: list[str], args: argparse.Namespace, until: float, out: list[float]) -> None:
    """aiohttp client: one shared session, ``concurrency`` request loops."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(w: int) -> None:
            i = w
            while time.monotonic() < until:
                url = urls[i % len(urls)]
                i += args.concurrency
                async with session.post(f"{url}/v1/completions", json=_body(i, args)) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise SystemExit(f"sim answered {resp.status}")
                out.append(time.monotonic())

        await asyncio.gather(*(worker(w) for w in range(args.concurrency)))


class _RawConnection(asyncio.Protocol):
    """A lean HTTP/1.1 keep-alive client: one request in flight per connection.

    Far cheaper per request than a client library, so a 2-core machine can load
    the simulator harder than it can with aiohttp on the client side too.
    """

    def __init__(self, requests: list[bytes], until: float, out: list[float], done: Any) -> None:
        self._requests = requests
        self._until = until
        self._out = out
        self._done = done
        self._buf = b""
        self._i = 0
        self._transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self._send()

    def _send(self) -> None:
        if time.monotonic() >= self._until:
            self._transport.close()
            return
        self._transport.write(self._requests[self._i % len(self._requests)])
        self._i += 1

    def data_received(self, data: bytes) -> None:
        self._buf += data
        head_end = self._buf.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = self._buf[:head_end].lower()
        at = head.index(b"content-length:") + len(b"content-length:")
        eol = head.find(b"\r\n", at)
        length = int(head[at : eol if eol >= 0 else len(head)])
        if len(self._buf) < head_end + 4 + length:
            return
        if not head.startswith(b"http/1.1 200"):
            raise SystemExit(f"sim answered {head[:12]!r}")
        self._buf = self._buf[head_end + 4 + length :]
        self._out.append(time.monotonic())
        self._send()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_result(None)


async def _drive_raw(
    urls: list[str], args: argparse.Namespace, until: float, out: list[float]
) -> None:
    loop = asyncio.get_running_loop()
    waits: list[asyncio.Future[None]] = []
    for w in range(args.concurrency):
        host, port = urls[w % len(urls)].removeprefix("http://").rsplit(":", 1)
        requests: list[bytes] = []
        for i in range(16):
            body = json.dumps(_body(w * 16 + i, args)).encode()
            head = f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\n"
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            requests.append(head.encode() + body)
        done: asyncio.Future[None] = loop.create_future()
        conn = functools.partial(_RawConnection, requests, until, out, done)
        await loop.create_connection(conn, host, int(port))
        waits.append(done)
    await asyncio.gather(*waits)


def _loadgen(urls: list[str], args: argparse.Namespace, cpu: int | None, queue: Any) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    stamps: list[float] = []
    until = args.window_start + args.duration
    drive = _drive_raw if args.client == "raw" else _drive
    asyncio.run(drive(urls, args, until, stamps))
    inside = [t for t in stamps if args.window_start <= t < until]
    queue.put(len(inside))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--endpoints", type=int, default=52)
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=64, help="per load generator")
    parser.add_argument("--loadgens", type=int, default=1, help="load-generator processes")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--client", choices=("aiohttp", "raw"), default="aiohttp")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    sim_cpu, gen_cpus = cpus[0], (cpus[1:] or cpus)

    with tempfile.TemporaryDirectory() as tmp:
        spec_path, ready = Path(tmp) / "spec.json", Path(tmp) / "ready.json"
        spec_path.write_text(json.dumps(_spec(args.endpoints)))
        cmd = [
            sys.executable,
            "-m",
            "servekit.sim",
            "--spec",
            str(spec_path),
            "--ready-file",
            str(ready),
        ]
        sim = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
        os.sched_setaffinity(sim.pid, {sim_cpu})
        try:
            while not ready.exists():
                if sim.poll() is not None:
                    raise SystemExit("sim exited before it was ready")
                time.sleep(0.05)
            urls = [e["url"] for e in json.loads(ready.read_text())["endpoints"]]
            idle_rss = _rss_mb(sim.pid)
            args.window_start = time.monotonic() + args.warmup
            queue: Any = mp.get_context("fork").Queue()
            gens = [
                mp.get_context("fork").Process(
                    target=_loadgen, args=(urls, args, gen_cpus[i % len(gen_cpus)], queue)
                )
                for i in range(args.loadgens)
            ]
            for g in gens:
                g.start()
            time.sleep(max(0.0, args.window_start - time.monotonic()))
            cpu0, t0 = _cpu_seconds(sim.pid), time.monotonic()
            gen0 = sum(_cpu_seconds(g.pid) for g in gens if g.pid)
            time.sleep(args.duration)
            cpu1, t1 = _cpu_seconds(sim.pid), time.monotonic()
            gen1 = sum(_cpu_seconds(g.pid) for g in gens if g.pid)
            completed = sum(queue.get(timeout=120) for _ in gens)
            for g in gens:
                g.join(timeout=60)
            peak_rss = _rss_mb(sim.pid, "VmHWM")
            rss_after = _rss_mb(sim.pid)
        finally:
            sim.send_signal(signal.SIGTERM)
            sim.wait(timeout=30)

    rate = completed / args.duration
    sim_cpu_share = (cpu1 - cpu0) / (t1 - t0)
    figures = {
        "endpoints": args.endpoints,
        "profile": "zero (simulated)",
        "max_tokens": args.max_tokens,
        "stream": args.stream,
        "concurrency": args.concurrency * args.loadgens,
        "loadgens": args.loadgens,
        "duration_s": args.duration,
        "completed_per_s": round(rate, 1),
        "client": args.client,
        "sim_cpu_share_of_one_core": round(sim_cpu_share, 3),
        "loadgen_cpu_share": round((gen1 - gen0) / (t1 - t0), 3),
        "per_busy_core_per_s": round(rate / sim_cpu_share, 1) if sim_cpu_share > 0 else None,
        "rss_idle_mb": round(idle_rss, 1),
        "rss_after_mb": round(rss_after, 1),
        "rss_peak_mb": round(peak_rss, 1),
        "load_average": os.getloadavg(),
        "cpus": len(cpus),
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
