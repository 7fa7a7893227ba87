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


def test_the_engines_metrics_merge_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The merge is pure CPU (0.3 s at 52 engines); on the loop it would stall every stream."""
    from servekit.proxy import engine_metrics

    threads: list[int] = []
    real = engine_metrics.merge

    def spy(*args: Any) -> bytes:
        threads.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(engine_metrics, "merge", spy)

    async def scenario() -> None:
        async with stack(prefill=1, decode=1) as s:
            status, _ = await s.get("/metrics/engines")
            assert status == 200
            assert threads and threads[0] != threading.get_ident()

    run(scenario())


# -- the relay, bounded (issue 45) ---------------------------------------------------


def _scrapes(s: Any) -> int:
    nodes = [*s.prefill, *s.decode, *s.replica]
    return sum(1 for n in nodes for seen in n.spy.seen if seen.path == "/metrics")


def test_concurrent_relay_gets_share_one_scrape_of_each_engine() -> None:
    """40 concurrent GETs over 4 engines made /health wait 1.1-2.7 s: each GET scraped
    every engine and merged in a thread of its own (before: 160 scrapes). Now GETs that
    arrive while a page is made wait for one made after they arrived, one at a time:
    at most two rounds of scrapes, every answer the same fresh page."""

    async def scenario() -> None:
        async with stack(prefill=2, decode=2) as s:
            answers = await asyncio.gather(*(s.get("/metrics/engines") for _ in range(40)))
            assert {status for status, _ in answers} == {200}
            assert 4 <= _scrapes(s) <= 8, _scrapes(s)
            assert len({raw for _, raw in answers}) <= 2

    run(scenario())


def test_a_relay_page_is_never_older_than_its_request_unless_a_ttl_allows() -> None:
    """The benchmark's last sample after a run must see the run's last counts: a GET is
    answered by a scrape that started after it arrived (a second GET scrapes again), or,
    with --engine-metrics-ttl, by a page younger than that."""

    async def scenario() -> None:
        async with stack(prefill=1, decode=1) as s:
            await s.get("/metrics/engines")
            await s.post("/v1/completions", {"prompt": "hello there", "max_tokens": 3})
            _, raw = await s.get("/metrics/engines")
            assert _scrapes(s) == 4
            gen = "vllm:generation_tokens_total"
            assert tokens_of(raw.decode(), gen, s.decode[0].url) > 0  # the request's tokens
        async with stack(prefill=1, decode=1, engine_metrics_ttl_s=60.0) as s:
            first = await s.get("/metrics/engines")
            assert await s.get("/metrics/engines") == first and _scrapes(s) == 2

    run(scenario())


def test_an_engine_page_over_the_cap_is_refused_not_merged() -> None:
    """2 GETs over one engine's 10 MB page grew the proxy by 317-405 MB (the page read
    whole up to --max-answer-bytes and parsed per GET). A page over
    --max-engine-metrics-bytes is reported (scrape_ok 0), never parsed; the rest are."""

    async def scenario() -> None:
        async with stack(prefill=1, decode=1, max_engine_metrics_bytes=64 << 10) as s:
            s.decode[0].spy.rewrite["/metrics"] = lambda raw: raw + b"# pad\n" * 20_000
            status, raw = await s.get("/metrics/engines")
            assert status == 200
            ok, text = "servekit_proxy_engine_scrape_ok", raw.decode()
            assert value(text, ok, engine_url=s.decode[0].url, engine_role="decode") == 0
            assert value(text, ok, engine_url=s.prefill[0].url, engine_role="prefill") == 1

    run(scenario())


def test_the_merge_is_charged_to_the_memory_budget() -> None:
    """The page's parse (about 16x its text) is charged to --memory-budget while it runs:
    a budget too small for it is a 503 overloaded, never an unbounded parse."""

    async def scenario() -> None:
        async with stack(prefill=1, decode=1, memory_budget=64 << 10) as s:
            status, _ = await s.get("/metrics/engines")
            budget = s.proxy.router.budget
            assert status == 503 and budget.refused == 1
            assert budget.used == 0  # given back
        async with stack(prefill=1, decode=1) as s:
            status, _ = await s.get("/metrics/engines")
            assert status == 200

    run(scenario())
