"""Request-rate and concurrency sweeps with vLLM-style serving metrics.

Each point sends ``requests`` prompts of exactly ISL tokens (unique prefixes)
for OSL tokens each; a rate point dispatches them on a constant or Poisson
schedule without waiting, a concurrency point keeps at most C in flight. The
run's TTFT/TPOT/ITL/E2EL percentiles, throughputs and goodput come from
:func:`servekit.bench.stats.serving_metrics`; each figure is the median over
runs of that run's value. The harness's own event-loop lag during each run is
kept in the evidence (``loop_lag_*_ms``): what the harness itself added.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import Any

from servekit.bench.config import ConcurrencySweep, RateSweep
from servekit.bench.context import BenchContext
from servekit.bench.lag import LoopLagProbe
from servekit.bench.load import run_at_rate, run_concurrent
from servekit.bench.records import rows_of
from servekit.bench.schema import Figure, Point
from servekit.bench.stats import counted, error_samples, figure, per_request, serving_metrics
from servekit.client import RequestRecord

Runner = Callable[[list[dict[str, Any]]], Awaitable[tuple[list[RequestRecord], float]]]
HARNESS_LAG = "harness_loop_lag_p99_ms"
UNITS = {
    "request_throughput": "req/s",
    "goodput": "req/s",
    "prefix_cache_hits": "tokens",
    "prefix_cache_queries": "tokens",
    "prefix_cache_hit_rate": "ratio",
}


def unit_of(name: str) -> str:
    """The unit of a serving metric (or a trace replay's cache figure) by its name."""
    return "ms" if name.endswith("_ms") else UNITS.get(name, "tok/s")


def serving_figures(runs: list[dict[str, Any]], method: str) -> dict[str, Figure]:
    """A figure per metric of the runs (counts and duration aside), and the harness's lag."""
    skip = ("completed", "failed", "duration_s")
    names = [k for k in runs[0] if k not in skip and "loop_lag" not in k]
    figures = {n: figure((r[n] for r in runs), unit_of(n), method) for n in names}
    figures[HARNESS_LAG] = figure(
        (r["loop_lag_p99_ms"] for r in runs), "ms", "harness event-loop lag p99 (docs/bench.md)"
    )
    return figures


async def _point(
    ctx: BenchContext,
    *,
    workload: str,
    label: str,
    params: Mapping[str, float | int | str],
    spec: RateSweep | ConcurrencySweep,
    send: Runner,
) -> Point:
    runs: list[dict[str, Any]] = []
    records: list[RequestRecord] = []
    samples: list[dict[str, list[float]]] = []
    for i in range(ctx.settings.runs):
        prompts = await ctx.prompts.build_many(spec.input_tokens, spec.requests)
        await ctx.wait_idle()
        async with LoopLagProbe().running() as probe:
            batch, duration = await send([ctx.body(p, spec.output_tokens) for p in prompts])
        records += batch
        ctx.rows += rows_of(batch, workload=workload, point=label, run=i, duration_s=duration)
        metrics = serving_metrics(batch, duration, spec.input_tokens, ctx.settings.slo_ms)
        runs.append({"duration_s": duration, **metrics, **probe.summary()})
        samples.append(per_request(batch))
        ctx.progress(f"{workload} {label}", i + 1, ctx.settings.runs)
    return Point(
        workload=workload,
        label=label,
        params={**params, "input_tokens": spec.input_tokens, "output_tokens": spec.output_tokens},
        figures=serving_figures(runs, "see docs/bench.md#serving-metrics"),
        **counted(records),
        evidence={
            "runs": runs,
            "per_request": samples,
            "slo_ms": dict(ctx.settings.slo_ms),
            "error_samples": error_samples(records),
        },
    )


async def _sweep(
    ctx: BenchContext,
    spec: RateSweep | ConcurrencySweep,
    workload: str,
    points: Iterable[tuple[str, Mapping[str, float | int | str], Runner]],
) -> list[Point]:
    """Warm up, then measure each (label, params, send) point in turn."""
    await ctx.wait_idle()
    await ctx.warm_up(spec.input_tokens, min(spec.output_tokens, 16))
    return [
        await _point(ctx, workload=workload, label=label, params=params, spec=spec, send=send)
        for label, params, send in points
    ]


async def measure_rate(spec: RateSweep, ctx: BenchContext) -> list[Point]:
    """One point per request rate."""
    points = (
        (
            f"rate={rate:g}/s {spec.arrival}",
            {"rate": rate, "arrival": spec.arrival},
            partial(run_at_rate, ctx.client, rate=rate, arrival=spec.arrival, seed=spec.seed),
        )
        for rate in spec.rates
    )
    return await _sweep(ctx, spec, "rate_sweep", points)


async def measure_concurrency(spec: ConcurrencySweep, ctx: BenchContext) -> list[Point]:
    """One point per concurrency."""
    points = (
        (f"C={c}", {"concurrency": c}, partial(run_concurrent, ctx.client, concurrency=c))
        for c in spec.concurrencies
    )
    return await _sweep(ctx, spec, "concurrency_sweep", points)
