"""Slow clients and big bodies against one proxy process: the campaign of issue 23 (3, 10).

    .venv/bin/python benchmarks/proxy_slow_clients.py --sockets 3000 --hold 90
    .venv/bin/python benchmarks/proxy_slow_clients.py --proxy-src /tmp/main/src   # before

Starts a minimal engine (a subprocess of this script: ``/health``, and
``/v1/completions`` answering a small JSON, or a ``--body-mb`` one for the
prompt ``"big"``) and the proxy (``python -m servekit.proxy --replica ...``,
imported from ``--proxy-src``, extra flags through ``--proxy-arg``), then, on
127.0.0.1 only:

1. opens ``--sockets`` connections that send ``GET /hea`` and nothing more, and
   for ``--hold`` seconds samples the fds the proxy holds (``/proc/PID/fd``),
   how many of the sockets the proxy has closed, and ``/health`` latency from a
   fresh connection each time (5 s timeout: a slower one counts as failed);
2. closes its sockets and reads the fds again;
3. asks for the ``--body-mb`` answer ``--body-concurrency`` times at once
   (unstreamed) and samples the proxy's RSS (``VmRSS``) meanwhile;
4. sends ``Content-Length: 999999999999`` and no body, and times the answer.

``--proxy-fd-limit N`` runs the proxy under ``RLIMIT_NOFILE`` N, to reach the fd
limit with fewer sockets than this process may open.

Bounded: at most 20,000 sockets and 300 s of hold, every wait has a timeout,
and both processes are stopped at the end whatever happens. Prints one block of
figures; nothing is asserted (tests/proxy/test_slow_clients.py does that).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from aiohttp import web

MAX_SOCKETS = 20_000
MAX_HOLD_S = 300.0
SAMPLE_S = 0.5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the engine double --------------------------------------------------------------


def serve_engine(port: int, body_mb: float) -> None:
    small = json.dumps({"id": "c", "object": "text_completion", "choices": [
        {"index": 0, "text": " ok", "finish_reason": "length"}]}).encode()  # fmt: skip
    big = b'{"id": "c", "choices": [{"index": 0, "text": "' + b"x" * int(body_mb * 1e6) + b'"}]}'

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    async def completions(request: web.Request) -> web.StreamResponse:
        doc = await request.json()
        if doc.get("prompt") != "big-chunked":
            body = big if doc.get("prompt") == "big" else small
            return web.Response(body=body, content_type="application/json")
        out = web.StreamResponse(headers={"Content-Type": "application/json"})
        out.enable_chunked_encoding()  # no Content-Length: the size shows only while reading
        await out.prepare(request)
        for i in range(0, len(big), 1 << 20):
            await out.write(big[i : i + (1 << 20)])
        await out.write_eof()
        return out

    app = web.Application(client_max_size=1 << 30)
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", completions)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# -- measuring the proxy process -----------------------------------------------------


def fds_of(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return -1.0


async def health_ms(port: int) -> float | None:
    """One GET /health on a new connection; None when it took over 5 s or failed."""
    t0 = time.perf_counter()
    try:
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n")
            answer = await reader.read()
            writer.close()
    except (TimeoutError, OSError):
        return None
    if not answer.startswith(b"HTTP/1.1 200"):
        return None
    return (time.perf_counter() - t0) * 1000


def wait_up(port: int, bound_s: float = 60.0) -> None:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n")
            if s.recv(64).startswith(b"HTTP/1.1 200"):
                return
        time.sleep(0.1)
    raise SystemExit(f"nothing answered 200 on port {port} within {bound_s} s")


# -- the campaign --------------------------------------------------------------------


class Slow:
    """One slow socket and when the proxy closed it (None: still open)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.closed_at: float | None = None

    async def watch(self, t0: float) -> None:
        with contextlib.suppress(OSError):
            while await self.reader.read(65536):
                pass
        self.closed_at = time.monotonic() - t0


async def attack(pid: int, port: int, n: int, hold_s: float) -> dict[str, object]:
    t0 = time.monotonic()
    slow: list[Slow] = []
    for _ in range(n):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            break
        writer.write(b"GET /hea")
        slow.append(Slow(reader, writer))
    opened = time.monotonic() - t0
    watchers = [asyncio.ensure_future(s.watch(t0)) for s in slow]
    samples: list[tuple[float, int, int]] = []
    latencies: list[float | None] = []
    while time.monotonic() - t0 < hold_s:
        closed = sum(s.closed_at is not None for s in slow)
        samples.append((time.monotonic() - t0, fds_of(pid), closed))
        latencies.append(await health_ms(port))
        if closed == len(slow):
            break
        await asyncio.sleep(SAMPLE_S)
    still_open = sum(s.closed_at is None for s in slow)
    for s in slow:
        s.writer.close()
    for w in watchers:
        w.cancel()
    await asyncio.gather(*watchers, return_exceptions=True)
    good = [x for x in latencies if x is not None]
    closes = sorted(s.closed_at for s in slow if s.closed_at is not None)
    return {
        "sockets opened": f"{len(slow)} in {opened:.1f} s",
        "proxy fds peak": max(f for _, f, _ in samples),
        "closed by the proxy": f"{len(closes)} of {len(slow)}"
        + (f", the last {closes[-1]:.1f} s after the first connect" if closes else ""),
        "still open at the end of the hold": f"{still_open} (hold {hold_s:g} s)",
        "/health during the attack": (
            f"{len(good)}/{len(latencies)} answered; p50 {statistics.median(good):.1f} ms, "
            f"max {max(good):.1f} ms"
            if good
            else f"0/{len(latencies)} answered"
        ),
    }


async def big_answers(pid: int, port: int, count: int, prompt: str) -> dict[str, object]:
    before = rss_mb(pid)
    peak = before
    statuses: list[int] = []

    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        body = json.dumps({"prompt": prompt, "max_tokens": 1}).encode()
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        line = await reader.readline()
        statuses.append(int(line.split()[1]) if line else 0)
        while await reader.read(1 << 20):
            pass
        writer.close()

    tasks = [asyncio.ensure_future(one()) for _ in range(count)]
    deadline = time.monotonic() + 120
    while not all(t.done() for t in tasks) and time.monotonic() < deadline:
        peak = max(peak, rss_mb(pid))
        await asyncio.sleep(0.02)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"RSS before": f"{before:.0f} MB", "RSS peak": f"{peak:.0f} MB",
            "statuses": ",".join(map(str, sorted(statuses))) or "none"}  # fmt: skip


async def huge_length(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\n"
        b"Content-Length: 999999999999\r\n\r\n"
    )
    t0 = time.perf_counter()
    try:
        line = await asyncio.wait_for(reader.readline(), 10)
    except TimeoutError:
        line = b""
    writer.close()
    if not line:
        return "no answer within 10 s"
    return f"{line.decode().strip()} after {(time.perf_counter() - t0) * 1000:.1f} ms"


@contextlib.contextmanager
def process(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sockets", type=int, default=3000)
    p.add_argument("--hold", type=float, default=90.0, help="seconds to watch the sockets")
    p.add_argument("--body-mb", type=float, default=100.0)
    p.add_argument("--body-concurrency", type=int, default=1)
    p.add_argument("--proxy-src", default=str(Path(__file__).resolve().parents[1] / "src"))
    p.add_argument("--proxy-arg", action="append", default=[], help="e.g. --proxy-arg=--x=1")
    p.add_argument("--proxy-fd-limit", type=int, help="RLIMIT_NOFILE (soft and hard) of the proxy")
    p.add_argument("--serve-engine", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve_engine:
        serve_engine(args.serve_engine, args.body_mb)
        return
    if not 1 <= args.sockets <= MAX_SOCKETS or not 0 < args.hold <= MAX_HOLD_S:
        raise SystemExit(f"--sockets 1..{MAX_SOCKETS}, --hold up to {MAX_HOLD_S:g} s")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, args.sockets + 1024)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    env = {**os.environ, "PYTHONPATH": args.proxy_src}
    engine_port, proxy_port = free_port(), free_port()
    tmp = Path(tempfile.mkdtemp(prefix="slow-clients-"))
    engine = [sys.executable, __file__, "--serve-engine", str(engine_port),
              "--body-mb", str(args.body_mb)]  # fmt: skip
    entry = ["-m", "servekit.proxy"]
    if args.proxy_fd_limit:
        n = args.proxy_fd_limit
        entry = ["-c", f"import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({n}, {n}));"
                 " from servekit.proxy.server import main; sys.exit(main(sys.argv[1:]))"]  # fmt: skip
    proxy = [sys.executable, *entry, "--replica",
             f"http://127.0.0.1:{engine_port}", "--port", str(proxy_port), *args.proxy_arg]  # fmt: skip
    with process(engine, env, tmp / "engine.log"), process(proxy, env, tmp / "proxy.log") as px:
        wait_up(engine_port)
        wait_up(proxy_port)
        time.sleep(0.5)
        base_fds = fds_of(px.pid)
        log_before = (tmp / "proxy.log").stat().st_size
        limit = f" (fd limit {args.proxy_fd_limit})" if args.proxy_fd_limit else ""
        figures: dict[str, object] = {
            "proxy": f"{args.proxy_src} {' '.join(args.proxy_arg)}{limit}"
        }
        figures["proxy fds before"] = base_fds
        figures.update(asyncio.run(attack(px.pid, proxy_port, args.sockets, args.hold)))
        time.sleep(1.0)
        figures["proxy fds after the sockets closed"] = fds_of(px.pid)
        text = (tmp / "proxy.log").read_bytes()[log_before:]
        lines = text.count(b"\n")
        figures["proxy log during the attack"] = f"{len(text)} bytes, {lines} lines"
        for prompt, how in (("big", "Content-Length"), ("big-chunked", "chunked")):
            big = asyncio.run(big_answers(px.pid, proxy_port, args.body_concurrency, prompt))
            for key, value in big.items():
                figures[f"{args.body_concurrency} x {args.body_mb:g} MB answer ({how}): {key}"] = (
                    value
                )
        figures["Content-Length: 999999999999"] = asyncio.run(huge_length(proxy_port))
    width = max(map(len, figures))
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    print(f"(logs in {tmp})")


if __name__ == "__main__":
    main()
