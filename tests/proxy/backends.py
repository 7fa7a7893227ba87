"""What the simulator cannot do for the proxy's tests: record the wire, and hold a socket.

Engines are servekit's simulator (see harness.py). :class:`Spy` sits in front of
one simulated endpoint and relays every request and answer unchanged (a reset
upstream becomes a reset downstream), remembering what crossed the wire, so
tests assert on the bytes the proxy really sent and received. ``stub`` answers
a path with a bare status instead (endpoints the simulator does not serve);
``rewrite`` changes the whole answer of a path (a truncated or mis-encoded
body, an oversized one), which the simulator does not produce.
:func:`black_hole` accepts connections and never answers (a probe that hangs).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

FORWARDED = ("content-type", "authorization", "x-request-id")
WRITE_PIECE = 1 << 20


@dataclass
class Seen:
    """One request as it crossed the wire, and the answer bytes relayed for it."""

    path: str
    body: Any
    headers: CIMultiDict[str]
    parts: list[bytes] = field(default_factory=list)

    @property
    def answer(self) -> bytes:
        """Joined when a test reads it, not while the loop it shares is being measured."""
        if len(self.parts) > 1:
            self.parts[:] = [b"".join(self.parts)]
        return self.parts[0] if self.parts else b""

    @answer.setter
    def answer(self, value: bytes) -> None:
        self.parts[:] = [value]


@dataclass
class Spy:
    target: str
    stub: dict[str, int] = field(default_factory=dict)
    rewrite: dict[str, Callable[[bytes], bytes | list[bytes]]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    async def start(self) -> Spy:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self.relay)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def stop(self) -> None:
        await self._runner.cleanup()
        await self._session.close()

    def gen(self) -> list[Seen]:
        """The generation requests seen (not probes, the model card or other endpoints)."""
        return [s for s in self.seen if s.path.startswith("/v1/") and s.path != "/v1/models"]

    async def relay(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        seen = Seen(request.path, json.loads(raw) if raw else None, CIMultiDict(request.headers))
        if request.path != "/health":
            self.seen.append(seen)
        if request.path in self.stub:
            return web.Response(status=self.stub[request.path])
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED}
        if request.path in self.rewrite:
            async with self._session.request(
                request.method, self.target + request.path_qs, data=raw, headers=headers
            ) as up:
                got = self.rewrite[request.path](await up.read())
                # parts are sent as given, never joined (a 48 MiB join stalls the loop
                # this spy shares with the proxy being measured)
                parts = [got] if isinstance(got, bytes) else list(got)
                seen.parts[:] = parts
                out = web.StreamResponse(status=up.status)
                out.content_type = up.content_type
                out.content_length = sum(len(p) for p in parts)
                await out.prepare(request)
                for part in parts:  # in pieces, as an engine's socket would send them
                    view = memoryview(part)
                    for at in range(0, len(view), WRITE_PIECE):
                        await out.write(view[at : at + WRITE_PIECE])
                await out.write_eof()
                return out
        out = web.StreamResponse()
        try:
            async with self._session.request(
                request.method, self.target + request.path_qs, data=raw, headers=headers
            ) as up:
                out.set_status(up.status)
                out.content_type = up.content_type
                await out.prepare(request)
                async for chunk in up.content.iter_any():
                    seen.parts.append(chunk)
                    await out.write(chunk)
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
            if request.transport is not None:
                request.transport.abort()  # the engine reset us: reset the proxy too
            return out
        await out.write_eof()
        return out


async def black_hole() -> tuple[str, asyncio.Server]:
    """A loopback URL whose server accepts connections and never says a word."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", server
