"""Prometheus metrics: counted per proxy, per-instance gauges at scrape time."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from .harness import run, stack


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
            s.decode[0].fault, s.decode[0].fault_status = "status", 500
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
        async with stack() as s:
            s.decode[0].fault, s.decode[0].tokens = "slow_stream", 20
            body = {"prompt": "y" * 400, "stream": True}
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
