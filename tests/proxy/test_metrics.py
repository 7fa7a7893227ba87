"""Prometheus metrics: counted per proxy, per-instance gauges, engines' metrics relayed."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .backends import black_hole
from .harness import MODEL, SLOW_DECODE, run, stack


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, frozenset(labels.items())), 0.0)


def test_metrics_count_requests_errors_latency_and_instance_state() -> None:
    async def scenario() -> None:
        async with stack() as s:
            for _ in range(3):
                await s.post("/v1/completions", {"prompt": "x", "stream": True})
            s.decode[0].fault(error_rate=1.0, error_status=500)
            await s.post("/v1/completions", {"prompt": "x"})
            status, raw = await s.get("/metrics")
            assert status == 200
            text = raw.decode()
            route = "/v1/completions"
            assert value(text, "servekit_proxy_requests_total", route=route, status="200") == 3
            assert value(text, "servekit_proxy_requests_total", route=route, status="502") == 1
            errs = value(text, "servekit_proxy_errors_total", stage="decode", kind="upstream_error")
            assert errs == 1
            assert value(text, "servekit_proxy_request_seconds_count", route=route) == 4
            assert value(text, "servekit_proxy_first_byte_seconds_count", route=route) == 3
            assert value(text, "servekit_proxy_stage_seconds_count", stage="prefill") == 4
            healthy = "servekit_proxy_instance_healthy"
            assert value(text, healthy, role="decode", instance="decode-0") == 1
            inflight = "servekit_proxy_inflight_requests"
            assert value(text, inflight, role="prefill", instance="prefill-0") == 0

    run(scenario())


def test_two_proxies_do_not_share_a_registry() -> None:
    async def scenario() -> None:
        async with stack() as a, stack() as b:
            await a.post("/v1/completions", {"prompt": "x"})
            _, raw_b = await b.get("/metrics")
            name = "servekit_proxy_requests_total"
            assert value(raw_b.decode(), name, route="/v1/completions", status="200") == 0

    run(scenario())


def test_inflight_tokens_grow_while_streaming() -> None:
    async def scenario() -> None:
        async with stack(sim={"profile": SLOW_DECODE}) as s:
            body = {"model": MODEL, "prompt": "y" * 400, "stream": True, "max_tokens": 20}
            pending = asyncio.ensure_future(s.post("/v1/completions", body))
            dec = s.proxy.router.pools["decode"].members[0]
            seen: set[int] = set()
            while not pending.done():
                seen.add(dec.tokens)
                await asyncio.sleep(0.02)
            status, _ = await pending
            assert status == 200
            assert max(seen) > 101  # prompt estimate (400 chars / 4 + 1) plus streamed frames
            assert dec.tokens == 0 and dec.requests == 0

    run(scenario())


def tokens_of(text: str, name: str, url: str) -> float:
    found = samples(text).items()
    return sum(v for (n, labels), v in found if n == name and ("engine_url", url) in labels)


def test_engine_metrics_are_relayed_with_engine_url_and_role_labels() -> None:
    async def scenario() -> None:
        async with stack(prefill=1, decode=2) as s:
            await s.post("/v1/completions", {"prompt": "hello there", "max_tokens": 3})
            status, raw = await s.get("/metrics/engines")
            assert status == 200
            text = raw.decode()
            for node, role in ((s.prefill[0], "prefill"), *((d, "decode") for d in s.decode)):
                labels = {"engine_url": node.url, "engine_role": role}
                assert value(text, "servekit_proxy_engine_scrape_ok", **labels) == 1
                # what the engine served (the simulator's own servekit_sim_info is
                # relayed too, but servekit_* names are left out on both sides here)
                own = {
                    (n, ls)
                    for (n, ls) in samples(node.spy.seen[-1].answer.decode())
                    if not n.startswith("servekit_")
                }
                ours = {("engine_url", node.url), ("engine_role", role)}
                relayed = {(n, frozenset(ls - ours)) for (n, ls) in samples(text)
                           if ("engine_url", node.url) in ls and not n.startswith("servekit_")}  # fmt: skip
                assert relayed == set(own)  # every sample of that engine, nothing else
            gen = "vllm:generation_tokens_total"
            per_decoder = [tokens_of(text, gen, d.url) for d in s.decode]
            assert sorted(per_decoder)[0] == 0 and sorted(per_decoder)[1] > 0

    run(scenario())


def test_an_engine_that_does_not_answer_is_reported_not_waited_for() -> None:
    async def scenario() -> None:
        hole, server = await black_hole()
        try:
            async with stack(engine_metrics_timeout_s=0.3) as s:
                s.proxy.router.pools["decode"].add(hole)
                status, raw = await s.get("/metrics/engines")
                assert status == 200
                text = raw.decode()
                ok = "servekit_proxy_engine_scrape_ok"
                assert value(text, ok, engine_url=hole, engine_role="decode") == 0
                assert value(text, ok, engine_url=s.decode[0].url, engine_role="decode") == 1
        finally:
            server.close()

    run(scenario())


def test_the_relay_merges_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The merge is pure CPU (0.3 s at 52 engines); on the loop it would stall every stream."""
    from servekit.proxy import relay

    threads: list[int] = []
    real = relay.merge

    def spy(*args: Any) -> bytes:
        threads.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(relay, "merge", spy)

    async def scenario() -> None:
        async with stack(prefill=1, decode=1) as s:
            status, _ = await s.get("/metrics/engines")
            assert status == 200
            assert threads and threads[0] != threading.get_ident()

    run(scenario())
