"""A recording pass-through in front of the simulator: the bench harness's wire, seen.

The simulator plays the engine (see conftest.py). The spy records what the
engine cannot tell a test: every request's path, the completion prompts, how
many completions were in flight at once. It can hide routes (a PD proxy offers
no /tokenize or /metrics), strip metric families (an engine without the
decode-time histogram) and run a hook on the N-th completion (answer it
itself, or put another client's request on the engine beside it).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

Hook = Callable[["Spy", int], Awaitable[web.StreamResponse | None]]


@dataclass
class Spy:
    upstream: str
    hide: tuple[str, ...] = ()
    strip: tuple[str, ...] = ()
    hook: Hook | None = None
    calls: Counter[str] = field(default_factory=Counter)
    prompts: list[str] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    url: str = ""
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    session: aiohttp.ClientSession | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.calls[request.path] += 1
        if request.path in self.hide:
            return web.Response(status=404)
        raw = await request.read()
        if request.path != "/v1/completions":
            return await self.forward(request, raw)
        self.prompts.append((await request.json())["prompt"])
        answer = await self.hook(self, self.calls[request.path]) if self.hook else None
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return answer or await self.forward(request, raw)
        finally:
            self.in_flight -= 1

    async def forward(self, request: web.Request, raw: bytes) -> web.StreamResponse:
        assert self.session is not None
        headers = {"Content-Type": "application/json"}
        async with self.session.request(
            request.method, self.upstream + request.path, data=raw or None, headers=headers
        ) as up:
            if request.path == "/metrics":
                lines = (await up.text()).splitlines(keepends=True)
                kept = "".join(x for x in lines if not any(s in x for s in self.strip))
                return web.Response(text=kept, status=up.status, content_type="text/plain")
            out = web.StreamResponse(status=up.status, headers={"Content-Type": up.content_type})
            await out.prepare(request)
            async for chunk in up.content.iter_any():
                await out.write(chunk)
            return out

    async def engine_request(self, body: dict[str, Any]) -> None:
        """Another client's completion, sent to the engine directly."""
        assert self.session is not None
        async with self.session.post(f"{self.upstream}/v1/completions", json=body) as resp:
            await resp.read()

    def __enter__(self) -> Spy:
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)

    async def _start(self) -> None:
        self.session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def _stop(self) -> None:
        await self._runner.cleanup()
        if self.session is not None:
            await self.session.close()
