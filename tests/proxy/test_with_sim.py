"""The proxy in front of servekit's simulator (PD roles, guard, faults)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from servekit.proxy.config import ProxyConfig
from servekit.proxy.server import RunningProxy, start_proxy
from servekit.sim.testing import RunningSim, running_sim

from .harness import FAST_HEALTH, wait_until


def pd_spec(decoders: int = 1, kv_mode: str = "params", guard: bool = True) -> dict[str, Any]:
    eps = [{"name": "p0", "port": 0, "role": "prefill", "kv_mode": kv_mode}]
    eps += [
        {
            "name": f"d{i}",
            "port": 0,
            "role": "decode",
            "kv_mode": kv_mode,
            "guard": guard,
            "guard_mode": "prompt-keyed" if kv_mode == "prompt" else "strict",
        }
        for i in range(decoders)
    ]
    return {"endpoints": eps}


@asynccontextmanager
async def proxy_for(sim: RunningSim, **cfg: Any) -> AsyncIterator[RunningProxy]:
    urls = sim.urls
    decode = tuple(u for n, u in urls.items() if n.startswith("d"))
    config = ProxyConfig(prefill=(urls["p0"],), decode=decode, port=0, **FAST_HEALTH, **cfg)
    proxy = await start_proxy(config)
    try:
        await wait_until(lambda: all(i.routable for i in proxy.router.instances()), "admitted")
        yield proxy
    finally:
        await proxy.stop()


def frames(raw: bytes) -> list[bytes]:
    return [f.removeprefix(b"data: ") for f in raw.split(b"\n\n") if f]


STREAM = {
    "model": "sim-model",
    "prompt": "tell me about proxies",
    "max_tokens": 6,
    "stream": True,
    "stream_options": {"include_usage": True},
}


def test_pd_through_the_simulator_streams_and_the_guard_refuses_direct_requests() -> None:
    with running_sim(pd_spec(decoders=2)) as sim:

        async def scenario() -> None:
            async with proxy_for(sim) as proxy, aiohttp.ClientSession() as c:
                for _ in range(4):
                    async with c.post(proxy.url + "/v1/completions", json=STREAM) as r:
                        assert r.status == 200
                        got = frames(await r.read())
                    assert got[-1] == b"[DONE]"
                    docs = [json.loads(f) for f in got[:-1]]
                    assert docs[-1]["usage"]["completion_tokens"] == 6
                    assert any(d["choices"] and d["choices"][0]["finish_reason"] for d in docs)
                async with c.post(sim.urls["d0"] + "/v1/completions", json=STREAM) as r:
                    refused = await r.json()
                    assert r.status == 400
                    assert refused["error"]["code"] == "decode_role_requires_kv_transfer_params"
                async with c.get(sim.urls["d0"] + "/health") as r:
                    assert r.status == 200  # the guard kept the decoder alive
                assert all(i.tokens == 0 and i.requests == 0 for i in proxy.router.instances())

        asyncio.run(scenario())


def test_prompt_keyed_mode_passes_the_guard_of_a_prompt_keyed_simulator() -> None:
    with running_sim(pd_spec(kv_mode="prompt", guard=True)) as sim:

        async def scenario() -> None:
            async with proxy_for(sim, mode="prompt-keyed") as proxy, aiohttp.ClientSession() as c:
                body = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 5}  # fmt: skip
                async with c.post(proxy.url + "/v1/chat/completions", json=body) as r:
                    doc = await r.json()
                    assert r.status == 200 and doc["usage"]["completion_tokens"] == 5
                async with c.post(sim.urls["d0"] + "/v1/chat/completions", json=body) as r:
                    assert r.status == 400  # a plain request straight to decode is still refused

        asyncio.run(scenario())


def test_simulated_reset_mid_stream_surfaces_as_an_error_event() -> None:
    with running_sim(pd_spec()) as sim:
        sim.set_faults("d0", reset_rate=1.0, reset_after_tokens=2)

        async def scenario() -> None:
            async with proxy_for(sim) as proxy, aiohttp.ClientSession() as c:
                async with c.post(proxy.url + "/v1/completions", json=STREAM) as r:
                    assert r.status == 200
                    got = frames(await r.read())
                assert got[-1] == b"[DONE]"
                err = json.loads(got[-2])["error"]
                assert err["stage"] == "decode" and err["code"] == "stream_interrupted"

        asyncio.run(scenario())


def test_simulated_dead_decoder_is_ejected_and_health_goes_503() -> None:
    with running_sim(pd_spec()) as sim:

        async def scenario() -> None:
            async with proxy_for(sim, eject_after=2) as proxy, aiohttp.ClientSession() as c:
                sim.set_faults("d0", dead=True)
                pool = proxy.router.pools["decode"]
                await wait_until(lambda: pool.healthy_count() == 0, "dead decoder ejected")
                async with c.get(proxy.url + "/health") as r:
                    assert r.status == 503
                async with c.post(proxy.url + "/v1/completions", json=STREAM) as r:
                    assert r.status == 503
                    assert (await r.json())["error"]["stage"] == "decode"

        asyncio.run(scenario())
