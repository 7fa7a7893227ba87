"""``--pool-wait``: a request that finds a stage's pool empty waits for an engine (issue 41).

A role's pool empties for a moment in normal operation (its only pod replaced, a new
one not probed yet). With ``--pool-wait`` the request waits for an engine to join or
come back, and the refusal is what happens only after it; at 0 (the default) it is
refused at once, which is the control: the same empty moment costs a 503.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from servekit.proxy.instances import State
from servekit.sim.testing import running_sim

from .harness import stack, wait_until
from .test_discovery import cluster
from .test_migration import CREATED, ask, completion, metric, proxy_for, spec

WAITS = "servekit_proxy_pool_waits_total"


def test_a_request_waits_for_the_pool_to_refill_and_no_prefill_runs_meanwhile(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path, ["p0", "d0"], pool_wait_s=30.0) as c:
            await wait_until(lambda: len(c.healthy("decode")) == 1, "the decoder admitted")
            assert (await c.ask())[0] == 200
            c.kube.update("sk-decode-0", ready=False)  # its only pod unready: drained, kept
            await wait_until(lambda: [i.state for i in c.pool("decode")] == [State.DRAINING],
                             "the only decoder drained")  # fmt: skip
            prefilled = c.sim.endpoints["p0"].stats.prompt_tokens
            waiting = asyncio.ensure_future(c.ask())
            await asyncio.sleep(0.5)
            assert not waiting.done()  # neither refused nor served: waiting
            # no prefill ran for a decoder that is not there (its KV pinned for nobody)
            assert c.sim.endpoints["p0"].stats.prompt_tokens == prefilled
            c.kube.update("sk-decode-0", ready=True)
            status, body = await waiting
            assert status == 200 and body.rstrip().endswith(b"data: [DONE]"), body[-200:]
            url = c.proxy.url
            found = await metric(c.client, url, WAITS + '{outcome="found",stage="decode"}')
            timeout = await metric(c.client, url, WAITS + '{outcome="timeout",stage="decode"}')
            assert (found, timeout) == (1, 0)

    asyncio.run(scenario())


@pytest.mark.parametrize("wait_s", [0.0, 0.3])
def test_an_empty_pool_is_refused_after_the_wait_and_at_once_without_one(
    tmp_path: Path, wait_s: float
) -> None:
    """The control: without a wait the empty moment is a 503 at once; with one that
    passes, the 503 comes after it and counts as a timed-out wait."""

    async def scenario() -> None:
        async with cluster(tmp_path, ["p0", "d0"], pool_wait_s=wait_s) as c:
            await wait_until(lambda: len(c.healthy("decode")) == 1, "the decoder admitted")
            c.kube.update("sk-decode-0", ready=False)
            await wait_until(lambda: c.healthy("decode") == [], "the only decoder drained")
            status, body = await c.ask()
            assert status == 503 and b"no_healthy_instance" in body
            url = c.proxy.url
            timeout = await metric(c.client, url, WAITS + '{outcome="timeout",stage="decode"}')
            assert timeout == (1 if wait_s else 0)

    asyncio.run(scenario())


@pytest.mark.slow
def test_a_stream_cut_while_no_other_decoder_is_routable_waits_and_carries_on() -> None:
    """A decoder dies mid-answer while the other is out (drained): the migration waits
    for it to come back and the client reads the undisturbed answer; without the wait
    the same cut ends the stream with an error event (the control)."""
    slow = {"name": "slow", "decode_step_s": [[1, 0.05]]}  # a token every 50 ms
    eps = spec()["endpoints"]
    for ep in eps:
        ep["profile"] = slow
    req = completion(7)

    async def cut(wait_s: float) -> tuple[bytes, bytes, float]:
        with running_sim({"endpoints": eps}) as sim:
            async with proxy_for(sim, migration_limit=3, pool_wait_s=wait_s) as proxy, \
                    aiohttp.ClientSession() as c:  # fmt: skip
                whole = await ask(c, proxy.url, req, "cut")
                router = proxy.router
                d1 = router.pools["decode"].find(sim.urls["d1"])
                assert d1 is not None
                drain = router.members.drain(d1, "test")  # d1 out: d0 takes the stream
                await drain.done.wait()
                async with c.post(
                    proxy.url + req[0], json=req[1], headers={"X-Request-Id": "cut"}
                ) as r:
                    first = await r.content.readuntil(b"\n\n")
                    assert sim.call(lambda e: e.engine.running, "d0")
                    sim.call(lambda e: e.kill("killed mid-answer"), "d0")
                    await asyncio.sleep(0.3)
                    router.members.undrain(d1)  # back: probed, then routable
                    raw = CREATED.sub(rb'"\1":0', first + await r.read())
                moved = await metric(c, proxy.url, 'servekit_proxy_migrations_total{outcome="ok"}')
                return whole, raw, moved

    async def scenario() -> None:
        whole, raw, moved = await cut(30.0)
        assert raw == whole and moved == 1
        whole, raw, moved = await cut(0.0)  # the control
        assert raw != whole and b'"error"' in raw and moved == 0

    asyncio.run(scenario())


@pytest.mark.parametrize("wait_s", [30.0, 0.0])
def test_the_only_decoder_leaving_during_the_prefill_is_waited_out(wait_s: float) -> None:
    """The decoder was routable when the request came and left while its prefill ran
    (the race the elastic ramp met when its only decoder's pod was deleted): with a
    wait the request is served by the decoder once back; without one (the control) it
    is refused the moment the prefill ends."""
    slow_prefill = {"name": "slow-prefill", "prefill_overhead_s": 0.5}

    async def scenario() -> None:
        async with stack(1, 1, sim={"profile": slow_prefill}, pool_wait_s=wait_s) as s:
            router = s.proxy.router
            d0 = router.pools["decode"].members[0]
            body = {**completion(3)[1], "max_tokens": 4}
            asked = asyncio.ensure_future(s.post("/v1/completions", body))
            await wait_until(s.prefill[0].busy, "the prefill running")
            await router.members.drain(d0, "test").done.wait()  # gone mid-prefill
            await asyncio.sleep(0.8)  # past the prefill's end
            router.members.undrain(d0)
            status, raw = await asked
            if wait_s:
                assert status == 200 and raw.rstrip().endswith(b"data: [DONE]"), raw[-200:]
            else:
                assert status == 503 and b"no_healthy_instance" in raw

    asyncio.run(scenario())


def test_a_request_its_only_decoder_failed_does_not_wait_out_the_pool() -> None:
    """The decoder answered this request with 500s and stays routable (alive, the pool's
    last): no engine is coming to change that, so the request ends once probes had time
    to eject it, not at --pool-wait's end."""

    async def scenario() -> None:
        async with stack(1, 1, pool_wait_s=30.0) as s:
            s.decode[0].fault(error_rate=1.0, error_status=500)
            status, raw = await s.post("/v1/completions", {**completion(4)[1], "max_tokens": 4})
            assert status == 502, raw[:200]
            tried = await metric(s.client, s.url, WAITS + '{outcome="tried",stage="decode"}')
            timeout = await metric(s.client, s.url, WAITS + '{outcome="timeout",stage="decode"}')
            assert (tried, timeout) == (1, 0)

    asyncio.run(scenario())
