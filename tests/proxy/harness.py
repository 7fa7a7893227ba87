"""A proxy in front of fake engines, all on loopback, inside one event loop.

Tests are plain functions that call :func:`run` on a scenario coroutine, so no
asyncio plugin is needed. Waiting is by polling a condition with a generous
bound; no test asserts how long anything took.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp

from servekit.proxy.config import ProxyConfig
from servekit.proxy.server import RunningProxy, start_proxy

from .backends import FakeEngine

T = TypeVar("T")

FAST_HEALTH = {"health_interval_s": 0.05, "health_timeout_s": 0.5, "retry_backoff_s": 0.0}


def run(scenario: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(scenario)


async def wait_until(cond: Callable[[], bool], what: str, bound_s: float = 10.0) -> None:
    """Poll ``cond`` until true; fail naming ``what`` if it never becomes true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.01)


@dataclass
class Stack:
    """Fake engines, the proxy in front of them and a client session."""

    proxy: RunningProxy
    prefill: list[FakeEngine]
    decode: list[FakeEngine]
    replica: list[FakeEngine]
    client: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return self.proxy.url

    def loads_are_zero(self) -> bool:
        return all(i.tokens == 0 and i.requests == 0 for i in self.proxy.router.instances())

    async def post(self, path: str, body: dict[str, Any], **kw: Any) -> tuple[int, bytes]:
        async with self.client.post(self.url + path, json=body, **kw) as resp:
            return resp.status, await resp.read()

    async def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        async with self.client.get(self.url + path, **kw) as resp:
            raw = await resp.read()
            is_json = resp.content_type == "application/json"
            return resp.status, (await resp.json()) if is_json else raw


async def _engines(prefix: str, n: int) -> list[FakeEngine]:
    return [await FakeEngine(f"{prefix}{i}").start() for i in range(n)]


@asynccontextmanager
async def stack(
    prefill: int = 1,
    decode: int = 1,
    replica: int = 0,
    wait_healthy: bool = True,
    **config: Any,
) -> AsyncIterator[Stack]:
    """Start engines and a proxy (port 0) with fast probes; tear all down after."""
    p, d, r = (
        await _engines("p", prefill),
        await _engines("d", decode),
        await _engines("r", replica),
    )
    settings = {**FAST_HEALTH, **config}
    cfg = ProxyConfig(
        prefill=tuple(e.url for e in p),
        decode=tuple(e.url for e in d),
        replica=tuple(e.url for e in r),
        mode="replica" if replica else settings.pop("mode", "pd"),
        port=0,
        **settings,
    )
    proxy = await start_proxy(cfg)
    client = aiohttp.ClientSession()
    s = Stack(proxy, p, d, r, client)
    try:
        if wait_healthy:
            await wait_until(
                lambda: all(i.routable for i in proxy.router.instances()), "all instances healthy"
            )
        yield s
    finally:
        await client.close()
        await proxy.stop()
        for e in p + d + r:
            await e.stop()


async def gather_n(n: int, make: Callable[[int], Awaitable[T]]) -> list[T]:
    return list(await asyncio.gather(*(make(i) for i in range(n))))
