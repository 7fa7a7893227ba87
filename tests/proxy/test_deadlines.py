"""Deadlines on both directions of a client connection (issue 36, high items 3 and 4).

- ``/v1/metaserver`` reads its body under ``--body-timeout`` like every other
  handler: 20 callers trickling a byte every 0.2 s held all 20 connections of a
  20-connection cap (a running handler is never evicted) and ``/health`` got 503.
- A write the client takes none of for ``--send-timeout`` closes its connection,
  and the engine's request with it: clients that never read an unstreamed answer
  (held in the proxy's memory) or a stream (the relay waited on the client, so
  ``--stream-idle-timeout`` never fired) held their connection for ever.

Raw sockets on 127.0.0.1 with a small receive buffer play the clients; timeouts
are fractions of a second and every wait is a generous bound on a condition.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import pytest
from aiohttp import web

from servekit.proxy.config import ProxyConfig
from servekit.proxy.server import RunningProxy, start_proxy

from .harness import FAST_HEALTH, run, stack, wait_until
from .test_layerwise_flow import layerwise_stack
from .test_slow_clients import Pair, close_all, connect

BIG_ANSWER = json.dumps({"choices": [{"text": "x" * (16 << 20)}]}).encode()  # 16 MiB


def completion_head(body: bytes, path: str = "/v1/completions") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()


async def deaf_client(url: str, request: bytes) -> Pair:
    """A client that sends ``request`` and never reads (a 4 KiB receive buffer)."""
    parts = urlsplit(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (parts.hostname, parts.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(request)
    await writer.drain()
    return reader, writer


async def health_answers(url: str, bound_s: float = 10.0) -> None:
    """``/health`` answers 200 on a fresh connection within ``bound_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while True:
        reader, writer = await connect(url)
        writer.write(b"GET /health HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n")
        try:
            answer = await asyncio.wait_for(reader.read(), 2)
        except (TimeoutError, ConnectionError):
            answer = b""
        writer.close()
        if answer.startswith(b"HTTP/1.1 200"):
            return
        if loop.time() > deadline:
            raise AssertionError(f"/health never answered 200: {answer[:80]!r}")
        await asyncio.sleep(0.05)


@pytest.mark.slow
def test_metaserver_callers_trickling_their_body_get_408_and_health_answers() -> None:
    async def scenario() -> None:
        cfg = {"max_connections": 20, "body_timeout_s": 0.5, "header_timeout_s": 60.0}
        async with layerwise_stack(**cfg) as s:
            body = json.dumps({"request_id": "cmpl-x-0", "remote_block_ids": [1] * 50}).encode()
            pairs = [await connect(s.url) for _ in range(20)]
            for _, writer in pairs:
                writer.write(completion_head(body, "/v1/metaserver"))

            async def trickle(pair: Pair) -> bytes:
                reader, writer = pair
                answer = asyncio.create_task(reader.read())
                for i in range(len(body)):  # a byte every 0.2 s: 30 s for the whole body
                    done, _ = await asyncio.wait({answer}, timeout=0.2)
                    if done:
                        return answer.result()
                    writer.write(body[i : i + 1])
                answer.cancel()
                raise AssertionError("the proxy read the whole trickled body")

            tricklers = [asyncio.create_task(trickle(p)) for p in pairs]
            await health_answers(s.url)  # while they trickle
            answers = await asyncio.wait_for(asyncio.gather(*tricklers), 20)
            assert all(a.startswith(b"HTTP/1.1 408") for a in answers), [a[:12] for a in answers]
            assert all(b"Connection: close" in a for a in answers)
            close_all(pairs)

    run(scenario())


@pytest.mark.slow
def test_a_client_that_never_reads_an_unstreamed_answer_is_closed_by_the_send_deadline() -> None:
    async def scenario() -> None:
        async with stack(prefill=0, decode=0, replica=1, send_timeout_s=0.5) as s:
            s.replica[0].spy.rewrite["/v1/completions"] = lambda _: BIG_ANSWER
            conns = s.proxy.connections
            body = b'{"prompt": "x", "max_tokens": 2}'
            pairs = [await deaf_client(s.url, completion_head(body) + body) for _ in range(4)]
            await wait_until(lambda: conns.closed["send_timeout"] == 4, "4 send timeouts", 20)
            await wait_until(lambda: not conns.open, "connections closed")
            assert s.loads_are_zero()
            await health_answers(s.url)
            close_all(pairs)

    run(scenario())


@asynccontextmanager
async def endless_engine() -> AsyncIterator[tuple[str, list[str]]]:
    """An engine that streams for ever; the list says how each stream ended."""
    ends: list[str] = []

    async def health(_: web.Request) -> web.Response:
        return web.json_response({})

    async def completions(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        chunk = b"data: " + json.dumps({"choices": [{"text": "y" * 1000}]}).encode() + b"\n\n"
        try:
            while True:
                await out.write(chunk)
                await asyncio.sleep(0)
        except (asyncio.CancelledError, ConnectionError):
            ends.append("closed by the proxy")
            raise

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", ends
    finally:
        await runner.cleanup()


@asynccontextmanager
async def proxy_for(url: str, **config: object) -> AsyncIterator[RunningProxy]:
    settings = {**FAST_HEALTH, **config}
    proxy = await start_proxy(ProxyConfig(replica=(url,), mode="replica", port=0, **settings))  # type: ignore[arg-type]
    try:
        await wait_until(lambda: all(i.routable for i in proxy.router.instances()), "healthy")
        yield proxy
    finally:
        await proxy.stop()


def test_streaming_clients_that_never_read_are_closed_with_their_engine_requests() -> None:
    async def scenario() -> None:
        async with (
            endless_engine() as (engine, ends),
            proxy_for(
                engine, send_timeout_s=0.5, max_connections=4, stream_idle_timeout_s=2.0
            ) as proxy,
        ):
            conns = proxy.connections
            body = b'{"prompt": "x", "max_tokens": 100000, "stream": true}'
            pairs = [await deaf_client(proxy.url, completion_head(body) + body) for _ in range(4)]
            await wait_until(lambda: conns.closed["send_timeout"] == 4, "4 send timeouts", 20)
            await wait_until(lambda: len(ends) == 4, "the engine's 4 streams closed", 20)
            await wait_until(
                lambda: all(i.requests == 0 for i in proxy.router.instances()), "leases released"
            )
            await health_answers(proxy.url)
            close_all(pairs)

    run(scenario())
