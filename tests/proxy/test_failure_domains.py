"""Failure domains: the DP ranks of one engine, and the processes of one node, fail together.

Simulated engines in this test's loop: prefill engine P (ranks p0, p1, node n0) and Q
(q0, q1, node n1); decode engines A (a0, a1, node n2) and B (b0, b1, node n3). The
proxy is told each backend's engine and node (``--failure-domains``, as the Plan
writes it). After one failure the siblings take no new work until a probe shows them
alive, and the probes that follow say what failed: the request, the instance, the
engine or the node. The control runs without ``--failure-domains``: the dead engine's
other rank is tried and fails too.
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

from servekit.errors import UsageError
from servekit.proxy.config import ProxyConfig
from servekit.proxy.server import RunningProxy, start_proxy
from servekit.sim.server import SimServer, serve
from servekit.sim.spec import spec_from_mapping

from .harness import FAST_HEALTH, run, wait_until

ENGINES = {"p": ("prefill", "P", "n0"), "q": ("prefill", "Q", "n1"),
           "a": ("decode", "A", "n2"), "b": ("decode", "B", "n3")}  # fmt: skip
CREATED = re.compile(rb'"(created|cached_tokens)":\d+')


@dataclass
class Cluster:
    sim: SimServer
    proxy: RunningProxy
    client: aiohttp.ClientSession

    def ep(self, name: str) -> Any:
        return self.sim.endpoints[name]

    def served(self, name: str) -> int:
        return int(self.ep(name).engine.steps)

    async def ask(self, body: dict[str, Any], rid: str = "r") -> tuple[int, bytes]:
        route = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        async with self.client.post(
            self.proxy.url + route, json=body, headers={"X-Request-Id": rid}
        ) as r:
            return r.status, CREATED.sub(rb'"\1":0', await r.read())

    def counted(self, scope: str) -> float:
        for metric in self.proxy.router.metrics.registry.collect():
            if metric.name == "servekit_proxy_backend_failures":
                for sample in metric.samples:
                    if sample.name.endswith("_total") and sample.labels["scope"] == scope:
                        return sample.value
        return 0.0


@asynccontextmanager
async def cluster(
    domains: bool = True, profile: Any = "zero", **cfg: Any
) -> AsyncIterator[Cluster]:
    eps = [
        {"name": f"{k}{i}", "port": 0, "role": role, "engine_id": engine, "dp_rank": i,
         "dp_size": 2, "node": node, "profile": profile}
        for k, (role, engine, node) in ENGINES.items() for i in range(2)
    ]  # fmt: skip
    sim = await serve(spec_from_mapping({"endpoints": eps}))
    urls = sim.urls
    named = [f"{urls[n]}={ENGINES[n[0]][1]}@{ENGINES[n[0]][2]}" for n in urls]
    config = ProxyConfig(
        prefill=tuple(u for n, u in urls.items() if n[0] in "pq"),
        decode=tuple(u for n, u in urls.items() if n[0] in "ab"),
        failure_domains=tuple(named) if domains else (),
        port=0, **{**FAST_HEALTH, "health_interval_s": 30.0, "outlier_after": 1000, **cfg},
    )  # fmt: skip
    proxy = await start_proxy(config)
    client = aiohttp.ClientSession()
    try:
        await wait_until(lambda: all(i.routable for i in proxy.router.instances()), "healthy")
        yield Cluster(sim, proxy, client)
    finally:
        await client.close()
        await proxy.stop()
        await sim.stop()


def body(n: int, **extra: Any) -> dict[str, Any]:
    return {"model": "sim-model", "prompt": f"domain {n}: hello", "max_tokens": 8,
            "temperature": 0, **extra}  # fmt: skip


def test_the_flag_names_each_backend_its_engine_and_node() -> None:
    base = {"prefill": ("http://h:1",), "decode": ("http://h:2", "http://h:3")}
    cfg = ProxyConfig(**base, failure_domains=("http://h:2/=A@n2", "http://h:3=A@n2"))
    assert cfg.domains() == {"http://h:2": ("A", "n2"), "http://h:3": ("A", "n2")}
    for bad, says in (("http://h:2=A", "URL=ENGINE@NODE"), ("http://h:9=A@n", "none of"),
                      ("http://h:2=@n", "URL=ENGINE@NODE"), ("h:2=A@n", "--failure-domains")):  # fmt: skip
        with pytest.raises(UsageError, match="--failure-domains") as err:
            ProxyConfig(**base, failure_domains=(bad,))
        assert says in str(err.value)


async def _kill_engine_and_ask(c: Cluster, engine: str) -> list[int]:
    for i in range(2):
        c.ep(f"{engine}{i}").kill("the engine's DP group died")
    statuses = []
    for n in range(20):
        status, _ = await c.ask(body(n))
        statuses.append(status)
    return statuses


@pytest.mark.parametrize("domains", [True, False])
def test_after_one_rank_of_a_dead_engine_fails_its_sibling_takes_no_work(domains: bool) -> None:
    async def go() -> None:
        async with cluster(domains) as c:
            tried = []
            real = c.proxy.router.attempt

            async def spy(stage: str, key: bytes, exchange: Any, **kw: Any) -> Any:
                async def watched(inst: Any) -> Any:
                    tried.append(inst.url)
                    return await exchange(inst)

                return await real(stage, key, watched, **kw)

            c.proxy.router.attempt = spy  # type: ignore[method-assign]
            statuses = await _kill_engine_and_ask(c, "a")
            dead = {c.ep("a0").url, c.ep("a1").url}
            hits = sum(url in dead for url in tried)
            assert statuses == [200] * 20
            if domains:  # the first failure takes the engine out; its probes say why
                assert hits == 1
                await wait_until(lambda: c.counted("node") == 1, "the node reported gone")
            else:  # the control: each rank is tried until it fails on its own
                assert hits == 2

    run(go())


def test_a_rank_down_alone_is_told_from_its_engine_and_its_sibling_serves_on() -> None:
    async def go() -> None:
        async with cluster() as c:
            c.ep("a0").kill("this rank alone")
            # until a request met the dead rank (one of four decoders: twelve requests
            # missed it about one run in thirty), every one answered all the same
            for n in range(200):
                status, _ = await c.ask(body(n))
                assert status == 200
                if n >= 11 and c.counted("instance") >= 1:
                    break
            await wait_until(lambda: c.counted("instance") >= 1, "the rank reported down")
            assert c.counted("node") == c.counted("engine") == 0
            await wait_until(lambda: all(i.suspect_since is None for i in c.proxy.router.instances()
                                         if i.url != c.ep("a0").url), "siblings cleared")  # fmt: skip
            before = c.served("a1")
            for n in range(200, 228):
                await c.ask(body(n))
            assert c.served("a1") > before  # back in service once its probe answered

    run(go())


def test_a_failed_request_on_a_live_rank_is_only_the_requests() -> None:
    async def go() -> None:
        async with cluster() as c:
            for name in ("a0", "a1", "b0", "b1"):
                c.ep(name).set_faults({"error_rate": 1.0, "error_status": 503})
            status, _ = await c.ask(body(1))
            assert status == 502  # the engines' 503s, after the retries
            await wait_until(lambda: c.counted("request") >= 1, "a request-scoped failure")
            assert c.counted("instance") == c.counted("engine") == c.counted("node") == 0

    run(go())


@pytest.mark.slow
@pytest.mark.parametrize("cuts", [True, False])
def test_a_stream_on_a_node_that_goes_silent_is_carried_on_soon(
    cuts: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node is lost (no reset, no error: silence). Its probes time out, the whole
    node is found down, its streams are cut and carried on, long before
    --stream-idle-timeout (300 s here) would have ended them. The control cuts nothing:
    the stream is still silent seconds later."""
    slow = {"name": "slow", "decode_step_s": [[1, 0.03]]}
    if not cuts:
        monkeypatch.setattr("servekit.proxy.instances.Instance.cut", lambda self: 0)

    async def go() -> None:
        cfg = {"health_interval_s": 0.2, "health_timeout_s": 0.3, "migration_limit": 3}
        async with cluster(profile=slow, **cfg) as c:
            req = body(7, max_tokens=24, ignore_eos=True, stream=True)
            status, whole = await c.ask(req, "silent")
            assert status == 200
            async with c.client.post(c.proxy.url + "/v1/completions", json=req,
                                     headers={"X-Request-Id": "silent"}) as r:  # fmt: skip
                first = await r.content.readuntil(b"\n\n")
                busy = [n for n in ("a0", "a1", "b0", "b1") if c.ep(n).engine.running]
                assert len(busy) == 1
                for i in range(2):
                    c.ep(f"{busy[0][0]}{i}").set_faults({"unreachable": True})
                if not cuts:
                    with pytest.raises(TimeoutError):
                        await asyncio.wait_for(r.read(), 3)
                    return
                rest = await asyncio.wait_for(r.read(), 60)
            assert CREATED.sub(rb'"\1":0', first + rest) == whole
            assert c.counted("node") >= 1

    run(go())


@pytest.mark.parametrize("suspects", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_a_prefill_node_lost_while_its_kv_is_pulled_is_retried_on_another(
    suspects: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decoder pulls the KV (a 0.4 s transfer here) when the prefill's node is lost:
    the load fails, the prefill is suspect with the decoder, and the retry's prefill runs
    on the other prefill engine; the answer is the one without the fault. The control
    suspects no prefill: the retry goes back to the lost node and hangs there."""
    slow_pull = {"name": "pull", "kv_transfer_overhead_s": 0.4}
    if not suspects:
        monkeypatch.setattr("servekit.proxy.stages.Stages.suspect_prefill", lambda self, why: None)

    async def go() -> None:
        async with cluster(profile=slow_pull) as c:
            status, whole = await c.ask(body(3), "pull")
            assert status == 200
            task = asyncio.ensure_future(c.ask(body(3), "pull"))
            decoders = [c.ep(n) for n in ("a0", "a1", "b0", "b1")]
            await wait_until(lambda: any(d.kvreg.pulling for d in decoders), "a pull under way")
            (source,) = {p for d in decoders for p in d.kvreg.pulling.values()}
            engine = "p" if source.engine_id == "P" else "q"
            for i in range(2):
                c.ep(f"{engine}{i}").set_faults({"unreachable": True})
            if not suspects:
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(task, 2)
                return
            status, got = await asyncio.wait_for(task, 30)
            assert (status, got) == (200, whole)
            other = "q" if engine == "p" else "p"
            assert any(c.served(f"{other}{i}") for i in range(2))

    run(go())


def test_the_instances_say_their_domain() -> None:
    async def go() -> None:
        async with cluster() as c:
            snap = {i.url: i.snapshot() for i in c.proxy.router.instances()}
            assert snap[c.ep("b1").url]["engine"] == "B" and snap[c.ep("b1").url]["node"] == "n3"
            assert json.dumps(snap)  # the admin listing stays JSON

    run(go())
