"""Multi-stream decode: N concurrent streams, each with a unique prefix.

Per run: wait for idle, send N greedy ``ignore_eos`` streams of exactly ISL
prompt tokens and OSL output tokens at once. Per-stream tok/s is the median
over streams of (tokens - 1) / (t_last - t_first); total tok/s is all output
tokens over the decode window (first token of any stream to the last token of
any stream); ms/step is the median over streams of window / (frames - 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servekit.bench.config import MultiStream
from servekit.bench.context import BenchContext
from servekit.bench.load import run_concurrent
from servekit.bench.schema import Point
from servekit.bench.stats import error_kinds, error_samples, figure, stream_rates
from servekit.client import RequestRecord

FIGURES = (
    ("per_stream_tok_per_s", "tok/s"),
    ("total_tok_per_s", "tok/s"),
    ("ms_per_step", "ms"),
    ("ttft_p50_ms", "ms"),
)


def batch_figures(records: list[RequestRecord]) -> dict[str, Any]:
    """One batch's figures from its records."""
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
        ms_per_step=float(np.median(steps)) if steps else None,
        ttft_p50_ms=float(np.median([(r.ttft_ns or 0) / 1e6 for r in ok])),
    )
    return ev


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
            batch, _ = await run_concurrent(
                ctx.client, [ctx.body(p, spec.output_tokens) for p in prompts], n
            )
            records += batch
            runs.append(batch_figures(batch))
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
