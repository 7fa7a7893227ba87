"""What the proxy-hardening probes share: loopback ports and servers, /proc memory
readings, a proxy process from a given tree, a timed /health (one module, so the
feed probes and the main script import it and not each other)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from aiohttp import web

PULL_PARAMS = {"do_remote_prefill": True, "remote_engine_id": "e", "remote_request_id": "r",
               "remote_host": "127.0.0.1", "remote_port": 5600, "remote_block_ids": [1]}  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def serve_on_loopback(app: web.Application) -> tuple[str, web.AppRunner]:
    """``app`` served on a free loopback port: its URL, and the runner that stops it."""
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return f"http://127.0.0.1:{runner.addresses[0][1]}", runner


async def health(port: int) -> str:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 3)
        writer.close()
        return answer.split(b"\r\n", 1)[0].decode() or "closed"
    except (OSError, TimeoutError) as exc:
        return type(exc).__name__


def head(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def timed_health(port: int) -> float:
    t0 = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /health HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 60)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
    return time.monotonic() - t0


async def start_proxy_process(flags: list[str], src: str, port: int) -> subprocess.Popen[bytes]:
    """``python -m servekit.proxy FLAGS`` from ``src``, once its /health answers 200 (or 10 s)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "servekit.proxy", *flags], env={**os.environ, "PYTHONPATH": src},
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    for _ in range(100):
        if (await health(port)).endswith("200 OK"):
            break
        await asyncio.sleep(0.1)
    return proc
