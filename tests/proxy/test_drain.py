"""Drain without loss (issue 41 item 3), on the simulator.

An engine asked to leave gets no new requests; its streams run on until
``--drain-grace`` and then migrate; a prefill whose KV a decoder has not pulled
is kept until the pull; the engine is then killed, as its pod would be after its
preStop call returns. Clients see the answers an undisturbed run gives, byte for
byte (``created`` and cache counts aside), never an error.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from servekit.proxy.config import ProxyConfig
from servekit.proxy.instances import State
from servekit.proxy.server import RunningProxy, start_proxy
from servekit.sim.server import SimServer, serve
from servekit.sim.spec import spec_from_mapping

from .harness import FAST_HEALTH, run, wait_until

CREATED = re.compile(rb'"(created|cached_tokens)":\d+')
SLOW = {"name": "slow", "decode_step_s": [[1, 0.04]]}  # a token every 40 ms


@dataclass
class Deployment:
    sim: SimServer
    proxy: RunningProxy
    client: aiohttp.ClientSession

    def url(self, name: str) -> str:
        return self.sim.endpoints[name].url

    async def ask(self, n: int, rid: str, max_tokens: int = 16) -> bytes:
        status, raw = await self.ask_status(n, rid, max_tokens)
        assert status == 200, raw
        return raw

    async def ask_status(self, n: int, rid: str, max_tokens: int = 16) -> tuple[int, bytes]:
        body = {"model": "sim-model", "prompt": f"request {n}: tell me about drains",
                "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0,
                "stream": True}  # fmt: skip
        async with self.client.post(
            self.proxy.url + "/v1/completions", json=body, headers={"X-Request-Id": rid}
        ) as r:
            return r.status, CREATED.sub(rb'"\1":0', await r.read())

    async def admin(self, action: str, doc: dict[str, Any]) -> dict[str, Any]:
        async with self.client.post(self.proxy.url + f"/admin/instances/{action}", json=doc) as r:
            assert r.status == 200, await r.text()
            out: dict[str, Any] = await r.json()
            return out

    async def metric(self, name: str) -> float:
        async with self.client.get(self.proxy.url + "/metrics") as r:
            text = await r.text()
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


@asynccontextmanager
async def deployment(prefill: int, decode: int, decode_profile: Any = SLOW,
                     prefill_profile: Any = "zero", **cfg: Any) -> AsyncIterator[Deployment]:  # fmt: skip
    eps = [{"name": f"p{i}", "port": 0, "role": "prefill", "profile": prefill_profile}
           for i in range(prefill)]  # fmt: skip
    eps += [{"name": f"d{i}", "port": 0, "role": "decode", "profile": decode_profile}
            for i in range(decode)]  # fmt: skip
    sim = await serve(spec_from_mapping({"endpoints": eps}))
    urls = {n: ep.url for n, ep in sim.endpoints.items()}
    config = ProxyConfig(
        prefill=tuple(u for n, u in urls.items() if n[0] == "p"),
        decode=tuple(u for n, u in urls.items() if n[0] == "d"),
        port=0, admin=True, **{**FAST_HEALTH, "health_timeout_s": 5.0, **cfg},
    )  # fmt: skip
    proxy = await start_proxy(config)
    client = aiohttp.ClientSession()
    try:
        await wait_until(lambda: all(i.routable for i in proxy.router.instances()), "admitted")
        yield Deployment(sim, proxy, client)
    finally:
        await client.close()
        await proxy.stop()
        await sim.stop()


def done_cleanly(raw: bytes) -> bool:
    return raw.endswith(b"data: [DONE]\n\n") and b'"error"' not in raw


@pytest.mark.slow
def test_a_leaving_decoder_streams_migrate_at_the_grace_end_and_it_is_killed_after() -> None:
    async def scenario() -> None:
        async with deployment(1, 2, decode_policy="round-robin", drain_grace_s=0.2) as d:
            baseline = await asyncio.gather(*(d.ask(i, f"r{i}") for i in range(4)))
            running = [asyncio.ensure_future(d.ask(i, f"r{i}")) for i in range(4)]
            d0 = d.sim.endpoints["d0"]
            await wait_until(lambda: len(d0.engine.running) == 2, "two streams on d0")
            out = await d.admin("leave", {"urls": [d.url("d0")], "wait_s": 10})
            assert out["drained"] is True  # the preStop call returns: the pod may die
            assert out["drains"][0]["migrated"] == 2 and out["drains"][0]["reason"] == "leave"
            d0.kill("the pod is gone after its preStop hook")
            answers = await asyncio.gather(*running)
            assert answers == baseline and all(done_cleanly(a) for a in answers)
            assert await d.metric('servekit_proxy_drain_migrated_streams_total{role="decode"}') == 2
            assert [i.name for i in d.proxy.router.pools["decode"].members] == ["decode-1"]
            assert done_cleanly(await d.ask(9, "after"))  # new work goes to the one left

    run(scenario())


def test_streams_finish_on_the_last_decoder_when_no_other_takes_work() -> None:
    """Cutting the streams of the only decoder would end them with an error."""

    async def scenario() -> None:
        async with deployment(1, 1, drain_grace_s=0.05) as d:
            running = asyncio.ensure_future(d.ask(1, "last", max_tokens=12))
            d0 = d.sim.endpoints["d0"]
            await wait_until(lambda: bool(d0.engine.running), "a stream on d0")
            out = await d.admin("drain", {"urls": [d.url("d0")], "wait_s": 10})
            assert out["drained"] is True and out["drains"][0]["migrated"] == 0
            assert done_cleanly(await running)
            assert d.proxy.router.pools["decode"].members[0].state is State.DRAINING

    run(scenario())


def test_a_leaving_prefill_is_kept_until_its_decoder_pulled_the_kv() -> None:
    """The decoder holds the request before it claims the KV (a busy decoder): the
    prefill's leave is not done until the claim; killing the prefill before it (the
    control) makes the same request fail, so the hold is what saves it."""

    async def scenario() -> None:
        async with deployment(2, 1, decode_profile="zero", prefill_policy="round-robin") as d:
            d0 = d.sim.endpoints["d0"]
            for keep in (True, False):
                d0.set_faults({"hang": True})
                pending = asyncio.ensure_future(d.ask_status(3, f"pull-{keep}", max_tokens=6))
                await wait_until(lambda: d0.hung == 1, "the decode request waits, KV unpulled")
                inst = next(i for i in d.proxy.router.pools["prefill"].members if i.holds)
                name = next(n for n, ep in d.sim.endpoints.items() if ep.url == inst.url)
                out = await d.admin("leave", {"urls": [inst.url], "wait_s": 0.3})
                assert out["drained"] is False and out["drains"][0]["pending_pulls"] == 1
                if not keep:  # the control: the pod dies with its KV unpulled
                    d.sim.endpoints[name].kill("killed before the pull")
                d0.set_faults({"hang": False})
                if keep:
                    out = await d.admin("leave", {"urls": [inst.url], "wait_s": 10})
                    assert out["drained"] is True
                    d.sim.endpoints[name].kill("killed after the pull")
                    status, raw = await pending
                    assert status == 200 and done_cleanly(raw)
                else:  # the decoder finds the KV gone with its prefill: the load fails
                    status, raw = await pending  # (vLLM's 500), its only decoder tried
                    assert status == 502 and b"decode-0 answered HTTP 500" in raw

    run(scenario())


def test_undrain_takes_a_leaving_engine_back_and_its_drain_ends() -> None:
    async def scenario() -> None:
        async with deployment(1, 2, drain_grace_s=30.0) as d:
            running = asyncio.ensure_future(d.ask(1, "u", max_tokens=12))
            await wait_until(lambda: any(d.sim.endpoints[n].engine.running for n in ("d0", "d1")),
                             "a stream running")  # fmt: skip
            busy = next(n for n in ("d0", "d1") if d.sim.endpoints[n].engine.running)
            out = await d.admin("drain", {"urls": [d.url(busy)]})
            assert out["drained"] is False
            await d.admin("undrain", {"urls": [d.url(busy)]})
            pool = d.proxy.router.pools["decode"]
            await wait_until(lambda: pool.healthy_count() == 2, "taken back")
            assert all(i.drain is None for i in pool.members)
            assert done_cleanly(await running)

    run(scenario())


def test_leave_of_an_engine_already_gone_is_done_and_other_actions_still_refuse_it() -> None:
    async def scenario() -> None:
        async with deployment(1, 1, decode_profile="zero") as d:
            out = await d.admin("leave", {"urls": ["http://10.9.9.9:1"], "wait_s": 1})
            assert out["drained"] is True and out["drains"] == []
            async with d.client.post(d.proxy.url + "/admin/instances/remove",
                                     json={"urls": ["http://10.9.9.9:1"]}) as r:  # fmt: skip
                assert (
                    r.status == 400 and "not in the pools" in (await r.json())["error"]["message"]
                )
            for bad in ({"urls": [d.url("d0")], "wait_s": -1}, {"urls": [d.url("d0")], "wait_s": "1"},
                        {"pod": ""}, {"pod": 3}):  # fmt: skip
                async with d.client.post(d.proxy.url + "/admin/instances/leave", json=bad) as r:
                    assert r.status == 400, bad
            body = json.dumps({"urls": [d.url("d0")]})
            async with d.client.post(d.proxy.url + "/admin/instances/leave", data=body) as r:
                assert r.status == 200 and (await r.json())["drained"] is True

    run(scenario())


@pytest.mark.slow
def test_the_prestop_hook_asks_every_proxy_and_returns_once_drained(tmp_path: Any) -> None:
    """The hook as a pod runs it: from the zipapp, with only the standard library."""
    import os
    import subprocess
    import sys
    from urllib.parse import urlsplit

    from servekit.proxy.bundle import build_zipapp

    pyz = build_zipapp(tmp_path / "servekit-proxy.pyz")

    async def scenario() -> None:
        async with deployment(1, 2, admin_key="k3y", drain_grace_s=0.1) as d:
            port = str(urlsplit(d.proxy.url).port)
            running = asyncio.ensure_future(d.ask(1, "hook", max_tokens=12))
            await wait_until(lambda: any(d.sim.endpoints[n].engine.running for n in ("d0", "d1")),
                             "a stream running")  # fmt: skip
            busy = next(n for n in ("d0", "d1") if d.sim.endpoints[n].engine.running)
            argv = [sys.executable, "-m", "servekit.proxy.prestop", "--proxies", "127.0.0.1",
                    "--port", port, "--urls", d.url(busy), "--wait", "10", "--key-env", "KEY"]  # fmt: skip
            env = {**os.environ, "PYTHONPATH": str(pyz), "KEY": "k3y"}
            done = await asyncio.to_thread(subprocess.run, argv, env=env, capture_output=True,
                                           text=True, timeout=60)  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert "127.0.0.1:" in done.stderr and "drained" in done.stderr
            assert d.url(busy) not in [i.url for i in d.proxy.router.pools["decode"].members]
            assert done_cleanly(await running)  # migrated at the grace end, not cut
            bad = {**env, "KEY": "wrong"}
            argv[-5] = d.url("d0" if busy == "d1" else "d1")
            refused = await asyncio.to_thread(subprocess.run, argv, env=bad, capture_output=True,
                                              text=True, timeout=60)  # fmt: skip
            assert refused.returncode == 1 and "401" in refused.stderr

    run(scenario())
