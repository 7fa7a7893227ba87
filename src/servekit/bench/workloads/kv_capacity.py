"""KV cache capacity in tokens, from the engine log or from /metrics.

The seeds read the engine log's last ``KV cache size: N tokens`` line; servekit
does the same for every endpoint whose log it knows (``servekit up`` records
them), and otherwise reads vLLM's ``vllm:cache_config_info`` (num_gpu_blocks x
block_size, per engine) from the endpoint's /metrics. It is a property of the
deployment, not a timing: one value, no runs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from servekit.bench.config import KVCapacity
from servekit.bench.context import BenchContext
from servekit.bench.sampler import RelaySource
from servekit.bench.schema import Point
from servekit.bench.stats import figure
from servekit.client import MetricsSnapshot, OpenAIClient
from servekit.deployment import Endpoint
from servekit.logscan import log_lines
from servekit.vocabulary import CACHE_CONFIG_INFO

KV_LINE = re.compile(r"KV cache size: ([\d,]+) tokens")


def kv_from_log(path: Path, name: str | None = None) -> int | None:
    """The last ``KV cache size: N tokens`` value in a log file, if any.

    When several endpoints share one log (the simulator writes one for all),
    lines naming the endpoint win over the others.
    """
    last: str | None = None
    last_named: str | None = None
    try:
        for line in log_lines(path):
            if KV_LINE.search(line):
                last = line
                if name and name in line:
                    last_named = line
    except OSError:
        return None
    chosen = last_named or last
    match = KV_LINE.search(chosen) if chosen else None
    return int(match.group(1).replace(",", "")) if match else None


def kv_from_metrics(snap: MetricsSnapshot) -> int | None:
    """Sum over engines of num_gpu_blocks x block_size from the cache info gauge."""
    total = 0
    for labels in snap.info.get(CACHE_CONFIG_INFO, ()):
        try:
            total += int(labels["num_gpu_blocks"]) * int(labels["block_size"])
        except (KeyError, ValueError):
            continue
    return total or None


async def _metrics_of(
    ep: Endpoint, ctx: BenchContext, relayed: MetricsSnapshot | Exception | None
) -> MetricsSnapshot:
    """The endpoint's own /metrics, or its part of the proxy's relay (engines out of reach)."""
    if isinstance(relayed, Exception):
        raise relayed
    if relayed is not None:
        return relayed
    async with OpenAIClient(ep.url, ctx.settings.api_key, timeout_s=30) as client:
        return await client.metrics()


async def _from_endpoint(
    ep: Endpoint, ctx: BenchContext, relayed: MetricsSnapshot | Exception | None = None
) -> tuple[int | None, dict[str, Any]]:
    source, _ = ctx.deployment.metrics_source(ep)
    ev: dict[str, Any] = {"url": ep.url, "log": str(ep.log) if ep.log else None}
    ev["metrics_url"] = source
    log_value = kv_from_log(ep.log, ep.name) if ep.log else None
    ev["log_tokens"] = log_value
    # Any failure here only loses the metrics cross-check, never the figure.
    try:
        ev["metrics_tokens"] = kv_from_metrics(await _metrics_of(ep, ctx, relayed))
    except Exception as exc:
        ev["metrics_tokens"], ev["metrics_error"] = None, str(exc)
    value = log_value if log_value is not None else ev["metrics_tokens"]
    ev["source"] = "engine log" if log_value is not None else "metrics"
    return value, ev


async def measure(spec: KVCapacity, ctx: BenchContext) -> list[Point]:
    """One point per engine endpoint (the entry URL when no endpoints are known)."""
    dep = ctx.deployment
    engines = ctx.engines
    relayed: list[MetricsSnapshot | Exception | None] = [None] * len(engines)
    if isinstance(ctx.metrics, RelaySource) and engines:
        relayed = list(await ctx.metrics.each())  # one read of the relay for every engine
    if not engines:
        engines, relayed = [Endpoint(name="entry", role="mixed", url=dep.entry_url)], [None]
    points = []
    for ep, snap in zip(engines, relayed, strict=True):
        value, ev = await _from_endpoint(ep, ctx, snap)
        fig = figure([value], "tokens", f"{ev['source']}: see docs/bench.md#kv-capacity")
        points.append(
            Point(
                workload="kv_capacity",
                label=ep.name,
                params={"role": ep.role},
                figures={"kv_cache_tokens": fig},
                evidence=ev,
            )
        )
    return points
