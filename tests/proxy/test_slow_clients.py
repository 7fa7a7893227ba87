"""Slow and idle clients (issue 23, item 3): header timeout, keep-alive, the connection cap.

Raw sockets on 127.0.0.1 against the proxy in front of a simulated replica. The
timeouts are small through the config; waits are bounded generously and only
prove "closed", never how fast. The fd-limit test runs the proxy as its own
process (``python -m servekit.proxy``) under a low ``RLIMIT_NOFILE``.
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from .harness import run, stack, wait_until
from .test_config import free_port

Pair = tuple[asyncio.StreamReader, asyncio.StreamWriter]
HEALTH = b"GET /health HTTP/1.1\r\nHost: proxy\r\n\r\n"


def open_fds(pid: int | str = "self") -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def connect(url: str) -> Pair:
    parts = urlsplit(url)
    return await asyncio.open_connection(parts.hostname, parts.port)


async def slow_sockets(url: str, n: int, first: bytes = b"GET /hea") -> list[Pair]:
    """``n`` connections that sent the start of a request line and nothing more."""
    pairs = [await connect(url) for _ in range(n)]
    for _, writer in pairs:
        writer.write(first)
        await writer.drain()
    return pairs


async def read_to_eof(reader: asyncio.StreamReader, bound_s: float = 20.0) -> bytes:
    """Everything until the proxy closes; fails if it holds the connection past ``bound_s``."""
    try:
        return await asyncio.wait_for(reader.read(), bound_s)
    except TimeoutError:
        raise AssertionError(f"the proxy still holds the connection after {bound_s} s") from None


def close_all(pairs: list[Pair]) -> None:
    for _, writer in pairs:
        writer.close()


def test_partial_request_lines_get_408_and_are_closed_while_health_answers() -> None:
    async def scenario() -> None:
        async with stack(prefill=0, decode=0, replica=1, header_timeout_s=1.5) as s:
            before = open_fds()
            pairs = await slow_sockets(s.url, 300)
            await wait_until(lambda: len(s.proxy.connections.open) >= 300, "300 sockets held")
            status, doc = await s.get("/health")  # a real client, while the 300 are open
            assert status == 200 and doc["status"] == "ok"
            assert len(s.proxy.connections.open) >= 300  # answered while they were held
            answers = await asyncio.gather(*(read_to_eof(r) for r, _ in pairs))
            assert all(a.startswith(b"HTTP/1.1 408 Request Timeout\r\n") for a in answers)
            assert all(b"Connection: close" in a for a in answers)
            close_all(pairs)
            assert s.proxy.connections.closed["header_timeout"] >= 300
            await wait_until(lambda: open_fds() <= before + 2, "fds back to the baseline")
            status, _ = await s.get("/health")
            assert status == 200

    run(scenario())


def test_a_silent_connection_is_closed_after_the_header_timeout() -> None:
    async def scenario() -> None:
        async with stack(prefill=0, decode=0, replica=1, header_timeout_s=0.5) as s:
            reader, writer = await connect(s.url)  # sends nothing at all
            assert (await read_to_eof(reader)).startswith(b"HTTP/1.1 408")
            writer.close()

    run(scenario())


async def read_response(reader: asyncio.StreamReader) -> bytes:
    """One HTTP response with a Content-Length body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head + await asyncio.wait_for(reader.readexactly(length), 10)


def test_idle_keepalive_is_closed_and_a_slow_second_head_gets_408() -> None:
    async def scenario() -> None:
        cfg = {"header_timeout_s": 0.5, "keepalive_timeout_s": 0.5}
        async with stack(prefill=0, decode=0, replica=1, **cfg) as s:
            reader, writer = await connect(s.url)
            writer.write(HEALTH)
            assert (await read_response(reader)).startswith(b"HTTP/1.1 200")
            assert await read_to_eof(reader) == b""  # idle after an answer: closed, silently
            writer.close()
        cfg = {"header_timeout_s": 0.5, "keepalive_timeout_s": 30.0}
        async with stack(prefill=0, decode=0, replica=1, **cfg) as s:
            reader, writer = await connect(s.url)
            writer.write(HEALTH)
            assert (await read_response(reader)).startswith(b"HTTP/1.1 200")
            writer.write(b"GET /heal")  # a keep-alive request that never completes its head
            assert (await read_to_eof(reader)).startswith(b"HTTP/1.1 408")
            writer.close()

    run(scenario())


def test_at_the_cap_the_longest_waiting_slow_socket_makes_room_for_a_real_client() -> None:
    async def scenario() -> None:
        cfg = {"max_connections": 20, "header_timeout_s": 60.0}
        async with stack(prefill=0, decode=0, replica=1, **cfg) as s:
            conns = s.proxy.connections
            pairs = await slow_sockets(s.url, 20)
            await wait_until(lambda: len(conns.open) == 20, "20 slow sockets held")
            for _ in range(5):  # a real client gets in: the oldest slow socket makes room
                status, _ = await s.get("/health", headers={"Connection": "close"})
                assert status == 200
                assert len(conns.open) <= 20
            first = await read_to_eof(pairs[0][0])
            assert first.startswith(b"HTTP/1.1 503") and b"too many open connections" in first
            evicted = conns.closed["evicted"]
            assert evicted >= 1 and conns.closed["header_timeout"] == 0
            more = await slow_sockets(s.url, 40)  # 40 more: each one evicts an older one
            await wait_until(lambda: conns.closed["evicted"] >= evicted + 39, "evictions")
            assert len(conns.open) <= 20
            assert all([await read_to_eof(r) for r, _ in pairs[1:]])  # the rest went too
            close_all(pairs + more)
            scraped = (await s.get("/metrics"))[1].decode()
            assert "servekit_proxy_client_connections_cap 20.0" in scraped
            assert 'servekit_proxy_client_connections_closed_total{reason="evicted"}' in scraped

    run(scenario())


def test_at_the_cap_with_every_connection_busy_a_newcomer_gets_503() -> None:
    async def scenario() -> None:
        cfg = {"max_connections": 4, "header_timeout_s": 60.0, "health_interval_s": 30.0}
        async with stack(prefill=0, decode=0, replica=1, **cfg) as s:
            conns = s.proxy.connections
            s.replica[0].fault(hang=True)
            body = b'{"prompt": "x", "max_tokens": 2}'
            head = (
                "POST /v1/completions HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            busy = await slow_sockets(s.url, 4, head + body)
            await wait_until(lambda: len(conns.open) == 4 and not conns.waiting, "4 busy")
            reader, writer = await connect(s.url)
            assert (await read_to_eof(reader)).startswith(b"HTTP/1.1 503")
            assert conns.closed["refused"] == 1 and len(conns.open) == 4
            writer.close()
            close_all(busy)
            s.replica[0].fault(hang=False)

    run(scenario())


@pytest.fixture
def engine_url() -> Iterator[str]:
    """A simulated replica in its own process, for a proxy in its own process."""
    port = free_port()
    argv = [sys.executable, "-m", "servekit.sim", "--endpoints", "1", "--base-port", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def wait_for_health(url: str, proc: subprocess.Popen[bytes], bound_s: float = 60.0) -> None:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the process exited"
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url}/health never answered 200")


FD_LIMIT = 1024


def proxy_entry(loop: str) -> str:
    """``python -c`` code: the proxy's main under a 1,024-fd limit (soft and hard); with
    ``loop="asyncio"`` uvloop is hidden, as in an image without it."""
    hide = "sys.modules['uvloop'] = None; " if loop == "asyncio" else ""
    return (
        f"import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, "
        f"({FD_LIMIT}, {FD_LIMIT})); {hide}"
        "from servekit.proxy.server import main; sys.exit(main(sys.argv[1:]))"
    )


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_at_the_fd_limit_health_answers_and_the_log_stays_short(
    engine_url: str, tmp_path: Path, loop: str
) -> None:
    """1,500 slow sockets against a proxy whose fd limit is 1,024 (soft and hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:  # this test process holds the client ends of 1,500 sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    port = free_port()
    argv = [sys.executable, "-c", proxy_entry(loop), "--replica", engine_url,
            "--port", str(port), "--health-interval", "0.2"]  # fmt: skip
    log = tmp_path / "proxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    async def attack() -> list[int]:
        pairs = await slow_sockets(url, 1500)
        held = []
        try:
            for _ in range(5):
                held.append(open_fds(proc.pid))
                status = await asyncio.to_thread(health_status, url)
                assert status == 200, f"/health answered {status} under 1,500 slow sockets"
        finally:
            close_all(pairs)
        return held

    try:
        wait_for_health(url, proc)
        held = asyncio.run(attack())
        assert max(held) < FD_LIMIT
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text(errors="replace")
    lines = text.splitlines()
    assert "Traceback" not in text and "accept" not in text.lower(), text[:2000]
    shed = [line for line in lines if "connection cap" in line and "reached" in line]
    windows = sum("shed connections: suppressed" in line for line in lines)
    assert windows >= 1  # the rest were counted, not lost
    assert len(shed) <= 10 * (windows + 1), "\n".join(lines[:40])  # --log-burst per window
    assert len(lines) <= len(shed) + windows + 5, "\n".join(lines[:40])  # nothing else repeats
    assert any("at most" in line and "client connections" in line for line in lines)


def health_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return int(resp.status)
    except OSError as exc:
        return getattr(exc, "code", 0)
