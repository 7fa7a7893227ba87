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

from collections.abc import Awaitable, Callable
from typing import Any

from servekit.bench.config import ConcurrencySweep, RateSweep
from servekit.bench.context import BenchContext
from servekit.bench.lag import LoopLagProbe
from servekit.bench.load import run_at_rate, run_concurrent
from servekit.bench.records import rows_of
from servekit.bench.schema import Figure, Point
from servekit.bench.stats import error_kinds, error_samples, figure, per_request, serving_metrics
from servekit.client import RequestRecord

Runner = Callable[[list[dict[str, Any]]], Awaitable[tuple[list[RequestRecord], float]]]
COUNTS = ("completed", "failed")
HARNESS_LAG = "harness_loop_lag_p99_ms"


def unit_of(name: str) -> str:
    """The unit of a serving metric by its name."""
    if name.endswith("_ms"):
        return "ms"
    if name in ("request_throughput", "goodput"):
        return "req/s"
    return "tok/s"


async def _point(
    ctx: BenchContext,
    *,
    workload: str,
    label: str,
    params: dict[str, float | int | str],
    spec: RateSweep | ConcurrencySweep,
    send: Runner,
) -> Point:
    runs: list[dict[str, float | None]] = []
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
    names = [k for k in runs[0] if k not in COUNTS and k != "duration_s" and "lag" not in k]
    method = "see docs/bench.md#serving-metrics"
    figures: dict[str, Figure] = {
        n: figure((r[n] for r in runs), unit_of(n), method) for n in names
    }
    figures[HARNESS_LAG] = figure(
        (r["loop_lag_p99_ms"] for r in runs), "ms", "harness event-loop lag p99 (docs/bench.md)"
    )
    return Point(
        workload=workload,
        label=label,
        params={**params, "input_tokens": spec.input_tokens, "output_tokens": spec.output_tokens},
        figures=figures,
        requests=len(records),
        errors=sum(not r.ok for r in records),
        error_kinds=error_kinds(records),
        evidence={
            "runs": runs,
            "per_request": samples,
            "slo_ms": dict(ctx.settings.slo_ms),
            "error_samples": error_samples(records),
        },
    )


async def measure_rate(spec: RateSweep, ctx: BenchContext) -> list[Point]:
    """One point per request rate."""
    await ctx.wait_idle()
    await ctx.warm_up(spec.input_tokens, min(spec.output_tokens, 16))
    points = []
    for rate in spec.rates:

        async def send(bodies: list[dict[str, Any]], rate: float = rate) -> Any:
            return await run_at_rate(ctx.client, bodies, rate, spec.arrival, spec.seed)

        label = f"rate={rate:g}/s {spec.arrival}"
        params: dict[str, float | int | str] = {"rate": rate, "arrival": spec.arrival}
        points.append(
            await _point(
                ctx, workload="rate_sweep", label=label, params=params, spec=spec, send=send
            )
        )
    return points


async def measure_concurrency(spec: ConcurrencySweep, ctx: BenchContext) -> list[Point]:
    """One point per concurrency."""
    await ctx.wait_idle()
    await ctx.warm_up(spec.input_tokens, min(spec.output_tokens, 16))
    points = []
    for c in spec.concurrencies:

        async def send(bodies: list[dict[str, Any]], c: int = c) -> Any:
            return await run_concurrent(ctx.client, bodies, c)

        label = f"C={c}"
        points.append(
            await _point(
                ctx,
                workload="concurrency_sweep",
                label=label,
                params={"concurrency": c},
                spec=spec,
                send=send,
            )
        )
    return points
