"""Multi-stream decode: N concurrent streams, each with a unique prefix.

Per run: wait for idle, send N greedy ``ignore_eos`` streams of exactly ISL
prompt tokens and OSL output tokens at once. Per-stream tok/s is the median
over streams of (tokens - 1) / (t_last - t_first); total tok/s is all output
tokens over the decode window (first token of any stream to the last token of
any stream); ms/step is the median over streams of window x A / (tokens - 1),
with A from the engines' spec-decode counters over the batch (1.0 without
speculation), or window / (frames - 1) for a target without /metrics.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servekit.bench.config import MultiStream
from servekit.bench.context import BenchContext
from servekit.bench.load import run_concurrent
from servekit.bench.schema import Point
from servekit.bench.stats import error_kinds, error_samples, figure, stream_rates
from servekit.bench.workloads.single_stream import ACCEPTED, DRAFTS
from servekit.client import MetricsSnapshot, RequestRecord

FIGURES = (
    ("per_stream_tok_per_s", "tok/s"),
    ("total_tok_per_s", "tok/s"),
    ("ms_per_step", "ms"),
    ("acceptance_length", "tokens/step"),
    ("ttft_p50_ms", "ms"),
)


def batch_figures(records: list[RequestRecord], accept: float | None = None) -> dict[str, Any]:
    """One batch's figures from its records.

    ``accept`` is the batch's acceptance length from the engines' counters
    (1.0 for an engine that does not speculate); ms/step is then each stream's
    window x A / (tokens - 1). Without it (no /metrics) ms/step counts frames.
    """
    ok = [r for r in records if r.ok and len(r.token_times_ns) >= 2]
    rates, steps = stream_rates(ok)
    ev: dict[str, Any] = {"ok": len(ok), "failed": sum(not r.ok for r in records)}
    if not ok:
        return ev
    first = min(r.token_times_ns[0] for r in ok)
    last = max(r.token_times_ns[-1] for r in ok)
    window_s = (last - first) / 1e9
    ev.update(
        window_ms=window_s * 1000,
        output_tokens=sum(r.output_tokens for r in ok),
        per_stream_tok_per_s=float(np.median(rates)) if rates else None,
        total_tok_per_s=sum(r.output_tokens for r in ok) / window_s if window_s > 0 else None,
        acceptance_length=accept,
        ms_per_step=_ms_per_step(rates, steps, accept),
        ttft_p50_ms=float(np.median([(r.ttft_ns or 0) / 1e6 for r in ok])),
    )
    return ev


def _ms_per_step(rates: list[float], steps: list[float], accept: float | None) -> float | None:
    if accept is not None and rates:
        return float(np.median([accept * 1000.0 / r for r in rates]))
    return float(np.median(steps)) if steps else None


def acceptance(before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> float | None:
    """A over a batch: 1 + accepted / drafts; 1.0 with metrics but no drafts."""
    if before is None or after is None:
        return None
    drafts = (after.counter(DRAFTS) or 0.0) - (before.counter(DRAFTS) or 0.0)
    accepted = (after.counter(ACCEPTED) or 0.0) - (before.counter(ACCEPTED) or 0.0)
    return 1.0 + accepted / drafts if drafts > 0 else 1.0


async def measure(spec: MultiStream, ctx: BenchContext) -> list[Point]:
    """One point per N in ``spec.streams``."""
    await ctx.wait_idle()
    await ctx.warm_up(spec.input_tokens, min(spec.output_tokens, 16))
    points = []
    for n in spec.streams:
        runs: list[dict[str, Any]] = []
        records: list[RequestRecord] = []
        for i in range(ctx.settings.runs):
            prompts = await ctx.prompts.build_many(spec.input_tokens, n)
            await ctx.wait_idle()
            before = await ctx.metrics.snapshot()
            batch, _ = await run_concurrent(
                ctx.client, [ctx.body(p, spec.output_tokens) for p in prompts], n
            )
            after = await ctx.metrics.snapshot()
            records += batch
            runs.append(batch_figures(batch, acceptance(before, after)))
            ctx.progress(f"multi_stream N={n}", i + 1, ctx.settings.runs)
        points.append(_point(spec, n, runs, records))
    return points


def _point(
    spec: MultiStream, n: int, runs: list[dict[str, Any]], records: list[RequestRecord]
) -> Point:
    method = "see docs/bench.md#multi-stream-decode"
    return Point(
        workload="multi_stream",
        label=f"N={n}",
        params={
            "streams": n,
            "input_tokens": spec.input_tokens,
            "output_tokens": spec.output_tokens,
        },
        figures={k: figure((r.get(k) for r in runs), u, method) for k, u in FIGURES},
        requests=len(records),
        errors=sum(not r.ok for r in records),
        error_kinds=error_kinds(records),
        evidence={"runs": runs, "error_samples": error_samples(records)},
    )
