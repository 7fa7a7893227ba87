"""Engines out of reach: bench reads their metrics through the proxy's /metrics/engines.

The same PD stack (the simulator behind the real proxy) measured twice: with
its engines' own /metrics, and with ``engine_access: relay`` (every metric
from the proxy's relay page, split by engine). Both give every figure, and
the relay's per-engine snapshots equal the engines' own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.accept.stacks import sim_pd

from servekit.bench.config import KVCapacity, RunSettings, SingleStream
from servekit.bench.runner import run_workloads
from servekit.bench.sampler import MetricsSource, RelaySource
from servekit.client import OpenAIClient
from servekit.deployment import RELAY_PATH, Deployment

WORKLOADS = (SingleStream(prompt_tokens=64, output_tokens=16, sample_interval_s=0.05), KVCapacity())
SETTINGS = RunSettings(runs=1, warmup=1)
TIMED = {"profile": "a3-dsv4-flash"}  # engines that take time per step (and speculate)


def relayed(dep: Deployment) -> Deployment:
    return dep.model_copy(
        update={"engine_access": "relay", "metrics_relay": dep.entry_url + RELAY_PATH}
    )


def test_every_figure_is_measured_through_the_relay(tmp_path: Path) -> None:
    with sim_pd(tmp_path, prefill=TIMED, decode=TIMED) as stack:
        direct = run_workloads(stack.deployment, WORKLOADS, SETTINGS)
        relay = run_workloads(relayed(stack.deployment), WORKLOADS, SETTINGS)
    assert [p.key for p in relay.points] == [p.key for p in direct.points]
    for mine, theirs in zip(relay.points, direct.points, strict=True):
        assert set(mine.figures) == set(theirs.figures)
        assert all(f.median is not None for f in mine.figures.values()), mine
    kv = {p.label: p for p in relay.points if p.workload == "kv_capacity"}
    assert {p.evidence["metrics_url"] for p in kv.values()} == {
        stack.deployment.entry_url + RELAY_PATH
    }
    stream = relay.point("single_stream", "ISL=64")
    assert stream is not None
    assert stream.evidence["runs"][0]["steps_source"] == "spec_decode drafts delta"


def test_relay_snapshots_equal_the_engines_own(tmp_path: Path) -> None:
    async def both(dep: Deployment) -> tuple[list[float], list[float]]:
        engines = [e for e in dep.endpoints if e.role in ("prefill", "decode")]
        async with OpenAIClient(dep.entry_url) as client:
            await client.completion({"model": dep.model, "prompt": "hello there", "max_tokens": 8})
            own = MetricsSource([client.derive(e.url) for e in engines], [e.role for e in engines])
            relay = RelaySource(client, RELAY_PATH, [(e.url, e.role) for e in engines])
            a = await own.by_role()
            b = await relay.by_role()
        names = ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:prefix_cache_queries")
        return [s.counter(n) or 0.0 for _, s in a for n in names], [
            s.counter(n) or 0.0 for _, s in b for n in names
        ]

    with sim_pd(tmp_path) as stack:
        own, relay = asyncio.run(both(stack.deployment))
    assert own == relay and sum(own) > 0


def test_metrics_are_parsed_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sample of many engines is ~0.25 s of parsing; on the loop it would delay frame stamps."""
    import servekit.client._client as client_module
    from servekit.bench import sampler

    threads: dict[str, set[int]] = {"relay": set(), "direct": set()}

    def spying(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def spy(*args: Any) -> Any:
            threads[name].add(threading.get_ident())
            return real(*args)

        return spy

    monkeypatch.setattr(sampler, "relay_snapshots", spying("relay", sampler.relay_snapshots))
    monkeypatch.setattr(
        client_module, "parse_metrics", spying("direct", client_module.parse_metrics)
    )

    async def sample(dep: Deployment) -> int:
        engines = [e for e in dep.endpoints if e.role in ("prefill", "decode")]
        async with OpenAIClient(dep.entry_url) as client:
            own = MetricsSource([client.derive(e.url) for e in engines], [e.role for e in engines])
            relay = RelaySource(client, RELAY_PATH, [(e.url, e.role) for e in engines])
            got = len(await own.by_role()) + len(await relay.by_role())
        return got

    with sim_pd(tmp_path) as stack:
        assert asyncio.run(sample(stack.deployment)) == 4
    loop_thread = threading.get_ident()  # asyncio.run ran its loop on this thread
    assert threads["relay"] and threads["direct"]
    assert loop_thread not in threads["relay"] | threads["direct"]
