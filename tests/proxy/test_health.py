"""Health: /health semantics, probe ejection and re-admission, slow probes."""

from __future__ import annotations

import socket

import aiohttp

from servekit.proxy.config import ProxyConfig
from servekit.proxy.server import start_proxy
from servekit.sim.testing import running_sim

from .backends import black_hole
from .harness import FAST_HEALTH, run, stack, wait_until


def dead_url() -> str:
    """A loopback URL nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_health_counts_healthy_instances_and_old_path_answers_too() -> None:
    async def scenario() -> None:
        async with stack(prefill=2, decode=3) as s:
            for path in ("/health", "/healthcheck"):
                status, doc = await s.get(path)
                assert status == 200
                assert doc["status"] == "ok"
                assert (doc["prefill_instances"], doc["decode_instances"]) == (2, 3)

    run(scenario())


def test_health_is_503_while_a_stage_has_no_healthy_instance() -> None:
    with running_sim({"endpoints": [{"name": "p0", "port": 0, "role": "prefill"}]}) as sim:

        async def scenario() -> None:
            cfg = ProxyConfig(prefill=(sim.url,), decode=(dead_url(),), port=0, **FAST_HEALTH)
            proxy = await start_proxy(cfg)
            try:
                pools = proxy.router.pools
                await wait_until(lambda: pools["prefill"].healthy_count() == 1, "prefill admitted")
                async with aiohttp.ClientSession() as c:
                    async with c.get(proxy.url + "/health") as resp:
                        doc = await resp.json()
                        assert resp.status == 503 and doc["decode_instances"] == 0
                        assert doc["prefill_instances"] == 1
                    async with c.post(proxy.url + "/v1/completions", json={"prompt": "x"}) as resp:
                        err = (await resp.json())["error"]
                        assert resp.status == 503 and err["code"] == "no_healthy_instance"
                assert sim.call(lambda ep: ep.stats.prompt_tokens) == 0  # no KV pinned for nobody
            finally:
                await proxy.stop()

        run(scenario())


def test_failed_probes_eject_and_recovery_readmits() -> None:
    async def scenario() -> None:
        async with stack(decode=2, eject_after=3, readmit_after=2) as s:
            s.decode[0].fault(dead=True)  # /health 500
            await wait_until(lambda: s.state("decode-0") == "ejected", "decode-0 ejected")
            status, doc = await s.get("/health")
            assert status == 200 and doc["decode_instances"] == 1
            for _ in range(4):
                status, _ = await s.post("/v1/completions", {"prompt": "x"})
                assert status == 200
            assert len(s.decode[0].gen()) == 0  # ejected: no new work
            s.decode[1].fault(slow_start_s=3600.0)  # /health 503
            await wait_until(lambda: s.state("decode-1") == "ejected", "decode-1 ejected")
            status, doc = await s.get("/health")
            assert status == 503 and doc["status"] == "unavailable"
            s.decode[0].fault(dead=False)
            await wait_until(lambda: s.state("decode-0") == "healthy", "decode-0 readmitted")
            status, _ = await s.get("/health")
            assert status == 200

    run(scenario())


def test_slow_health_counts_as_failure() -> None:
    async def scenario() -> None:
        hole, server = await black_hole()
        try:
            async with stack(health_timeout_s=0.1, eject_after=2) as s:
                pool = s.proxy.router.pools["prefill"]
                slow = pool.add(hole)
                s.proxy.router.health.record(slow, True)  # admitted, then its probes hang
                await wait_until(lambda: s.state(slow.name) == "ejected", "slow prefill ejected")
                status, doc = await s.get("/health")
                assert status == 200 and doc["prefill_instances"] == 1
        finally:
            server.close()

    run(scenario())
