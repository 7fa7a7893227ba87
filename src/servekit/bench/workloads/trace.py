"""Trace replay: a production trace's arrivals, lengths and shared prefixes.

Per run: read the trace (bounded, :mod:`servekit.bench.trace`), build every
prompt first (exact input lengths, a shared prefix where ``hash_ids`` repeat,
:mod:`servekit.bench.traceprompts`; a fresh tag per run so a run never hits the
cache of the one before), wait for idle, then send request k at its trace time
divided by the speed, without waiting for answers, each for exactly its output
length (``ignore_eos``). The figures are the serving metrics of the other
open-loop workloads (:func:`servekit.bench.stats.serving_metrics`, goodput with
``--slo``) plus:

- **lateness**: each send's client stamp minus its schedule, p50/p99/max, so a
  replay that could not keep up says so instead of silently measuring a
  gentler load;
- **prefix-cache hits**: the engines' ``vllm:prefix_cache_hits`` over
  ``vllm:prefix_cache_queries`` (tokens) across the run, read from /metrics
  before and after, beside the hit rate the trace itself implies.

Against a simulated deployment at speed S the schedule runs on the simulated
clock: a trace second lasts 1 / (speed x S) wall seconds, and lateness is
reported on the same simulated clock (wall lateness x S), so a one-hour trace
is checked in a minute with its lateness in the units of its own schedule.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from servekit.bench.config import TraceReplay
from servekit.bench.context import BenchContext
from servekit.bench.lag import LoopLagProbe
from servekit.bench.load import NS, replay
from servekit.bench.records import rows_of
from servekit.bench.sampler import counter_change, settled
from servekit.bench.schema import Point
from servekit.bench.stats import counted, error_samples, per_request, serving_metrics, spread
from servekit.bench.trace import Trace, read_trace
from servekit.bench.traceprompts import TracePrompts
from servekit.bench.workloads.single_stream import engine_time_scale
from servekit.bench.workloads.sweeps import serving_figures
from servekit.client import RequestRecord
from servekit.vocabulary import PREFIX_CACHE_HITS, PREFIX_CACHE_QUERIES, REQUEST_SUCCESS

WORKLOAD = "trace"


def clock_factor(spec: TraceReplay, ctx: BenchContext) -> float:
    """Trace seconds per wall second: the replay speed times the simulator's speed."""
    return spec.speed * engine_time_scale(ctx.deployment)


def trace_hit_rate(trace: Trace) -> float | None:
    """Share of prompt tokens a perfect prefix cache would hit, by the trace's own ids.

    Block i of a request hits when its id was seen before and so did every
    block before it (a prefix cache reuses a prefix, never a middle); blocks
    count by their tokens, the partial last one too, as vLLM's counters do.
    """
    seen: set[int] = set()
    hit = total = 0
    for req in trace.requests:
        total += req.input_tokens
        prefix = True
        for i, block in enumerate(req.hash_ids):
            size = min(trace.block_size, req.input_tokens - i * trace.block_size)
            prefix = prefix and block in seen
            hit += size if prefix else 0
            seen.add(block)
    return hit / total if total else None


def lateness_ms(
    records: list[RequestRecord], t0_ns: int, offsets_ns: list[int], clock: float
) -> list[float]:
    """Each send's stamp minus its schedule, in ms of the engine's clock."""
    return [
        (rec.t_start_ns - t0_ns - due) * clock / 1e6
        for rec, due in zip(records, offsets_ns, strict=True)
    ]


async def _run(
    spec: TraceReplay, ctx: BenchContext, trace: Trace, index: int
) -> tuple[dict[str, Any], list[RequestRecord]]:
    prompts = TracePrompts(ctx.prompts, spec.block_size, secrets.token_hex(3))
    texts = [await prompts.build(r) for r in trace.requests]
    bodies = [ctx.body(t, r.output_tokens) for t, r in zip(texts, trace.requests, strict=True)]
    factor = clock_factor(spec, ctx)
    offsets = [round(r.at_s / factor * NS) for r in trace.requests]
    await ctx.wait_idle()
    before = await ctx.metrics.snapshot()
    async with LoopLagProbe().running() as probe:
        batch, duration, t0_ns = await replay(ctx.client, bodies, offsets)
    legs = sum(r.ok for r in batch) * ctx.legs_per_request
    after = await settled(ctx.metrics, before, REQUEST_SUCCESS, legs)
    hits = counter_change(before, after, PREFIX_CACHE_HITS)
    queries = counter_change(before, after, PREFIX_CACHE_QUERIES)
    clock = engine_time_scale(ctx.deployment)
    late = lateness_ms(batch, t0_ns, offsets, clock)
    run: dict[str, Any] = {
        "duration_s": duration,
        **serving_metrics(batch, duration, 0, ctx.settings.slo_ms),
        **spread("lateness", late),
        "prefix_cache_hits": hits,
        "prefix_cache_queries": queries,
        "prefix_cache_hit_rate": hits / queries if hits is not None and queries else None,
        **probe.summary(),
    }
    rows = rows_of(
        batch,
        workload=WORKLOAD,
        point=_label(spec),
        run=index,
        duration_s=duration,
        t0_ns=t0_ns,
        scheduled_ns=offsets,
    )
    ctx.rows += [
        row.model_copy(
            update={
                "trace_line": req.line,
                "trace_input_tokens": req.input_tokens,
                "trace_output_tokens": req.output_tokens,
            }
        )
        for row, req in zip(rows, trace.requests, strict=True)
    ]
    return run, batch


def _label(spec: TraceReplay) -> str:
    return f"{Path(spec.path).name} x{spec.speed:g}"


async def measure(spec: TraceReplay, ctx: BenchContext) -> list[Point]:
    """One point: the trace replayed ``runs`` times."""
    trace = read_trace(
        Path(spec.path), fmt=spec.format, block_size=spec.block_size, limit=spec.requests
    )
    runs: list[dict[str, Any]] = []
    records: list[RequestRecord] = []
    samples: list[dict[str, list[float]]] = []
    await ctx.wait_idle()
    for i in range(ctx.settings.runs):
        run, batch = await _run(spec, ctx, trace, i)
        runs.append(run)
        records += batch
        samples.append(per_request(batch))
        ctx.progress(f"trace {_label(spec)}", i + 1, ctx.settings.runs)
    total, distinct = trace.blocks()
    return [
        Point(
            workload=WORKLOAD,
            label=_label(spec),
            params={
                "trace": spec.path,
                "format": trace.format,
                "speed": spec.speed,
                "clock_factor": clock_factor(spec, ctx),
                "engine_clock": engine_time_scale(ctx.deployment),
                "trace_requests": len(trace.requests),
                "trace_span_s": trace.span_s,
                "block_size": spec.block_size,
            },
            figures=serving_figures(runs, "see docs/bench.md#trace-replay---trace"),
            **counted(records),
            evidence={
                "runs": runs,
                "per_request": samples,
                "slo_ms": dict(ctx.settings.slo_ms),
                "trace_blocks": total,
                "trace_distinct_blocks": distinct,
                "trace_hit_rate": trace_hit_rate(trace),
                "lateness_clock": "engine (simulated: wall x speed)"
                if ctx.deployment.simulated
                else "wall",
                "error_samples": error_samples(records),
            },
        )
    ]
