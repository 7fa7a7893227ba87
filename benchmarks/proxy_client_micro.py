"""aiohttp vs httpx as the proxy's backend client: streamed requests per second.

    .venv/bin/python benchmarks/proxy_client_micro.py

One zero-latency streaming backend (the lean backend of proxy_compare.py) runs
in a child process; this process drives it with each client in turn, with
``--concurrency`` closed-loop streams for ``--duration`` seconds, repeated
``--rounds`` times alternately. httpx is not a servekit dependency: it comes
with vLLM in the engine environment.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).parent))
from proxy_compare import free_port, wait_ok

BODY = {"model": "m", "prompt": "hello " * 50, "max_tokens": 16, "stream": True,
        "kv_transfer_params": {"remote_engine_id": "p"}}  # fmt: skip

Driver = Callable[[str, int, float], Awaitable[int]]


async def closed_loop(one: Callable[[], Awaitable[None]], concurrency: int, duration: float) -> int:
    done = 0
    stop_at = time.perf_counter() + duration

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            await one()
            done += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done


async def with_aiohttp(url: str, concurrency: int, duration: float) -> int:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one() -> None:
            async with session.post(url, json=BODY) as resp:
                async for _ in resp.content.iter_any():
                    pass

        return await closed_loop(one, concurrency, duration)


async def with_httpx(url: str, concurrency: int, duration: float) -> int:
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=None, limits=limits) as client:

        async def one() -> None:
            async with client.stream("POST", url, json=BODY) as resp:
                async for _ in resp.aiter_bytes():
                    pass

        return await closed_loop(one, concurrency, duration)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--duration", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    pp, dp = free_port(), free_port()
    here = Path(__file__).with_name("proxy_compare.py")
    backend = subprocess.Popen(
        [sys.executable, str(here), "--backend", "lean", "--serve-backend", str(pp), str(dp)]
    )
    try:
        asyncio.run(wait_ok(f"http://127.0.0.1:{dp}/health"))
        url = f"http://127.0.0.1:{dp}/v1/completions"
        drivers: dict[str, Driver] = {"aiohttp": with_aiohttp, "httpx": with_httpx}
        rates: dict[str, list[float]] = {name: [] for name in drivers}
        for _ in range(args.rounds):
            for name, drive in drivers.items():
                n = asyncio.run(drive(url, args.concurrency, args.duration))
                rates[name].append(n / args.duration)
        print(f"# cpus={os.cpu_count()} load={os.getloadavg()[0]:.2f} c={args.concurrency}")
        for name, values in rates.items():
            print(f"{name:8} median {statistics.median(values):7.0f} req/s  rounds {values}")
    finally:
        backend.terminate()
        backend.wait(timeout=10)


if __name__ == "__main__":
    main()
