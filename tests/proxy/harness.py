"""The proxy in front of simulated engines, each behind a wire-recording spy, in one loop.

Engines are servekit's simulator (``servekit.sim``) in this test's event loop;
each endpoint gets a :class:`~tests.proxy.backends.Spy` so tests see the bytes
that crossed the wire, and faults are the simulator's own (``node.fault(...)``).
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
from servekit.sim.endpoint import SimEndpoint
from servekit.sim.server import SimServer, serve
from servekit.sim.spec import spec_from_mapping

from .backends import Seen, Spy

T = TypeVar("T")

FAST_HEALTH = {"health_interval_s": 0.05, "health_timeout_s": 0.5, "retry_backoff_s": 0.0}
SLOW_DECODE = {"name": "slow", "decode_step_s": [[1, 0.05]]}  # a token every 50 ms
MODEL = "sim-model"


MOONCAKE_BOOTSTRAP_PORT = 8998


def bootstrap_of(spec: Any) -> str:
    """ENGINE_ID=URL a simulated prefill's bootstrap server is named by."""
    return f"{spec.engine}=http://{spec.host}:{spec.side_port}"


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
class Node:
    """One simulated endpoint, reached through its spy."""

    name: str
    ep: SimEndpoint
    spy: Spy

    @property
    def url(self) -> str:
        return self.spy.url

    def fault(self, **patch: Any) -> None:
        self.ep.set_faults(patch)

    def gen(self) -> list[Seen]:
        return self.spy.gen()

    def busy(self) -> bool:
        """The engine holds a request (running, waiting or hung on a fault)."""
        state = self.ep.state()
        return bool(state["running"] or state["waiting"] or state["hung"])


@dataclass
class Stack:
    """Simulated engines, the proxy in front of them and a client session."""

    proxy: RunningProxy
    prefill: list[Node]
    decode: list[Node]
    replica: list[Node]
    client: aiohttp.ClientSession
    sim: SimServer

    @property
    def url(self) -> str:
        return self.proxy.url

    def loads_are_zero(self) -> bool:
        return all(i.tokens == 0 and i.requests == 0 for i in self.proxy.router.instances())

    def prefill_bootstrap(self, i: int) -> str:
        """ENGINE_ID=URL of prefill ``i``'s bootstrap server (bootstrap mode)."""
        return bootstrap_of(self.prefill[i].ep.spec)

    def prefill_engine_id(self, i: int) -> str:
        return self.prefill[i].ep.spec.engine

    def state(self, name: str) -> str:
        return next(i.state.value for i in self.proxy.router.instances() if i.name == name)

    async def post(self, path: str, body: dict[str, Any], **kw: Any) -> tuple[int, bytes]:
        async with self.client.post(self.url + path, json=body, **kw) as resp:
            return resp.status, await resp.read()

    async def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        async with self.client.get(self.url + path, **kw) as resp:
            raw = await resp.read()
            is_json = resp.content_type == "application/json"
            return resp.status, (await resp.json()) if is_json else raw


def sim_spec(prefill: int, decode: int, replica: int, **endpoint: Any) -> dict[str, Any]:
    """Endpoints p0.., d0.. (guarded) and r0.. on free ports, sharing ``endpoint`` settings."""
    decode_only = {"guard": endpoint.pop("guard", True)}
    eps = [{"name": f"p{i}", "role": "prefill", "port": 0, **endpoint} for i in range(prefill)]
    eps += [{"name": f"d{i}", "role": "decode", "port": 0, **endpoint, **decode_only}
            for i in range(decode)]  # fmt: skip
    eps += [{"name": f"r{i}", "port": 0, **endpoint} for i in range(replica)]
    return {"endpoints": eps}


@asynccontextmanager
async def stack(
    prefill: int = 1,
    decode: int = 1,
    replica: int = 0,
    wait_healthy: bool = True,
    sim: dict[str, Any] | None = None,
    **config: Any,
) -> AsyncIterator[Stack]:
    """Start a simulator, spies and a proxy (port 0) with fast probes; tear all down after.

    ``sim`` holds endpoint settings for every endpoint (``kv_mode``, ``profile``,
    ``guard``, ...); ``config`` goes to the proxy's :class:`ProxyConfig`. These
    tests hold the relay to the spied bytes, so migration (which asks decoders for
    token ids and strips them) is off unless given; test_migration.py covers it.
    """
    config.setdefault("migration_limit", 0)
    sim = dict(sim or {})
    if config.get("mode") == "bootstrap":
        # Mooncake's default bootstrap port: the proxy checks the address it is given
        # (port 0 is no URL), and the simulated decoder checks it names the prefill.
        sim.setdefault("kv_port", MOONCAKE_BOOTSTRAP_PORT)
    server = await serve(spec_from_mapping(sim_spec(prefill, decode, replica, **sim)))
    nodes = {n: Node(n, ep, await Spy(ep.url).start()) for n, ep in server.endpoints.items()}
    by_role = {
        r: [v for k, v in nodes.items() if k[0] == r[0]] for r in ("prefill", "decode", "replica")
    }
    settings = {**FAST_HEALTH, **config}
    if settings.get("mode") == "bootstrap" and "prefill_bootstrap" not in settings:
        settings["prefill_bootstrap"] = tuple(bootstrap_of(n.ep.spec) for n in by_role["prefill"])
    cfg = ProxyConfig(
        **{role: tuple(n.url for n in members) for role, members in by_role.items()},
        mode="replica" if replica else settings.pop("mode", "pd"),
        port=0,
        **settings,
    )
    proxy = await start_proxy(cfg)
    client = aiohttp.ClientSession()
    s = Stack(proxy, by_role["prefill"], by_role["decode"], by_role["replica"], client, server)
    try:
        if wait_healthy:
            await wait_until(
                lambda: all(i.routable for i in proxy.router.instances()), "all instances healthy"
            )
        yield s
    finally:
        await client.close()
        await proxy.stop()
        for node in nodes.values():
            await node.spy.stop()
        await server.stop()


async def gather_n(n: int, make: Callable[[int], Awaitable[T]]) -> list[T]:
    return list(await asyncio.gather(*(make(i) for i in range(n))))
