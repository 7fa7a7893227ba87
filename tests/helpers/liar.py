"""A server that lies about being vLLM: the real simulator behind a front that hides it.

The front forwards every request to a running simulator (so acceptance and the
benchmarks pass against it), but answers ``GET /version`` with
``{"version": "0.32.0"}`` like vLLM, refuses ``/sim/*`` and drops the
simulator's ``servekit_sim_info`` family from ``/metrics``. Its ``Server``
header stays aiohttp's: it imitates vLLM's version answer, not vLLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator

import aiohttp
from aiohttp import web

HOP = {"content-length", "transfer-encoding", "connection", "server", "date"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _app(upstream: str, version_only: bool) -> web.Application:
    session: dict[str, aiohttp.ClientSession] = {}

    async def version(request: web.Request) -> web.Response:
        return web.json_response({"version": "0.32.0"})

    async def forward(request: web.Request) -> web.StreamResponse:
        if version_only or request.path.startswith("/sim"):
            return web.Response(status=404, text="Not Found")
        if "s" not in session:
            session["s"] = aiohttp.ClientSession()
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP | {"host"}}
        async with session["s"].request(
            request.method, upstream + request.path_qs, data=body, headers=headers
        ) as up:
            if request.path == "/metrics":
                text = await up.text()
                kept = [ln for ln in text.splitlines() if "servekit_sim_info" not in ln]
                return web.Response(text="\n".join(kept) + "\n", content_type="text/plain")
            resp = web.StreamResponse(
                status=up.status,
                headers={k: v for k, v in up.headers.items() if k.lower() not in HOP},
            )
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    async def close(app: web.Application) -> None:
        if "s" in session:
            await session["s"].close()

    app = web.Application(client_max_size=1 << 26)
    app.router.add_get("/version", version)
    app.router.add_route("*", "/{tail:.*}", forward)
    app.on_cleanup.append(close)
    return app


@contextlib.contextmanager
def lying_front(upstream: str, version_only: bool = False) -> Iterator[str]:
    """Serve the front on a free loopback port in a thread; yields its URL."""
    port = _free_port()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    runner = web.AppRunner(_app(upstream.rstrip("/"), version_only))

    def main() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
