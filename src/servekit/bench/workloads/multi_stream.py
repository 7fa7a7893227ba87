"""Multi-stream decode: N concurrent streams, each with a unique prefix.

Per run: wait for idle, send N greedy ``ignore_eos`` streams of exactly ISL
prompt tokens and OSL output tokens at once. Per-stream tok/s is the median
over streams of (tokens - 1) / (t_last - t_first); total tok/s is all output
tokens over the decode window (first token of any stream to the last token of
any stream); ms/step is the median over streams of window x A / (tokens - 1),
with A from the engines' spec-decode counters over the batch (1.0 without
speculation), or window / (frames - 1) for a target without /metrics.

A starved API server merges several steps into one frame, and frames read
together share one arrival stamp; then a stream's client window is short by
the merged steps (on a small CPU model a whole stream can arrive in one read).
A batch with a merged stream (fewer separate reads than steps: tokens - 1
without speculation) takes its per-stream figures from
the engines' mean decode time instead (``vllm:request_decode_time_seconds``
delta over the streams) and says so in ``window_source``; its decode window is
then at least that mean, so total tok/s is an upper bound there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servekit.bench.config import MultiStream
from servekit.bench.context import BenchContext
from servekit.bench.load import run_concurrent
from servekit.bench.sampler import histogram_sum_change, settled
from servekit.bench.schema import Point
from servekit.bench.stats import counted, distinct_reads, error_samples, figure, stream_rates
from servekit.bench.workloads.single_stream import (
    engine_time_scale,
)
from servekit.client import MetricsSnapshot, RequestRecord
from servekit.vocabulary import (
    REQUEST_DECODE_TIME_SECONDS,
    REQUEST_SUCCESS,
    SPEC_DECODE_NUM_ACCEPTED_TOKENS,
    SPEC_DECODE_NUM_DRAFTS,
)

FIGURES = (
    ("per_stream_tok_per_s", "tok/s"),
    ("total_tok_per_s", "tok/s"),
    ("ms_per_step", "ms"),
    ("acceptance_length", "tokens/step"),
    ("ttft_p50_ms", "ms"),
)


def batch_figures(
    records: list[RequestRecord],
    accept: float | None = None,
    engine_decode_s: float | None = None,
) -> dict[str, Any]:
    """One batch's figures from its records.

    ``accept`` is the batch's acceptance length from the engines' counters
    (1.0 for an engine that does not speculate); ms/step is then each stream's
    window x A / (tokens - 1). Without it (no /metrics) ms/step counts frames.
    ``engine_decode_s`` is the engines' summed decode time over the batch, used
    when a stream's frames were merged.
    """
    ok = [r for r in records if r.ok and len(r.token_times_ns) >= 1 and r.output_tokens >= 2]
    ev: dict[str, Any] = {"ok": len(ok), "failed": sum(not r.ok for r in records)}
    if not ok:
        return ev
    first = min(r.token_times_ns[0] for r in ok)
    last = max(r.token_times_ns[-1] for r in ok)
    window_s = (last - first) / 1e9
    merged = sum(frames_merged(r, accept) for r in ok)
    ev.update(
        output_tokens=sum(r.output_tokens for r in ok),
        client_window_ms=window_s * 1000,
        merged_streams=merged,
        acceptance_length=accept,
        ttft_p50_ms=float(np.median([(r.ttft_ns or 0) / 1e6 for r in ok])),
    )
    if merged and engine_decode_s:
        mean_s = engine_decode_s / len(ok)
        tokens = float(np.median([r.output_tokens for r in ok]))
        window_s = max(window_s, mean_s)
        ev.update(
            window_source=f"engine: mean {REQUEST_DECODE_TIME_SECONDS} over the streams (frames merged)",
            engine_mean_decode_ms=mean_s * 1000,
            per_stream_tok_per_s=(tokens - 1) / mean_s,
            ms_per_step=mean_s * 1000 * (accept or 1.0) / (tokens - 1),
        )
    elif merged:
        ev["note"] = "token frames merged and the engine reports no decode time: not measured"
        return ev
    else:
        rates, steps = stream_rates(ok)
        ev.update(
            window_source="client: first to last token frame",
            per_stream_tok_per_s=float(np.median(rates)) if rates else None,
            ms_per_step=_ms_per_step(rates, steps, accept),
        )
    ev.update(
        window_ms=window_s * 1000,
        total_tok_per_s=ev["output_tokens"] / window_s if window_s > 0 else None,
    )
    return ev


def frames_merged(record: RequestRecord, accept: float | None) -> bool:
    """Whether a stream arrived in fewer reads than the engine made steps.

    Without speculation every step streams one token, so fewer frames than
    tokens means merged frames. With it, A is the batch's average and one
    stream's own steps vary around (tokens - 1) / A: only fewer than half of
    them counts. Without /metrics (``accept`` None) nothing can be told.
    """
    if accept is None:
        return False
    steps = (record.output_tokens - 1) / accept
    reads_after_first = distinct_reads(record.token_times_ns) - 1
    return reads_after_first < (steps if accept == 1.0 else steps / 2)


def _ms_per_step(rates: list[float], steps: list[float], accept: float | None) -> float | None:
    if accept is not None and rates:
        return float(np.median([accept * 1000.0 / r for r in rates]))
    return float(np.median(steps)) if steps else None


def acceptance(before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> float | None:
    """A over a batch: 1 + accepted / drafts; 1.0 with metrics but no drafts."""
    if before is None or after is None:
        return None
    drafts, accepted = (
        (after.counter(name) or 0.0) - (before.counter(name) or 0.0)
        for name in (SPEC_DECODE_NUM_DRAFTS, SPEC_DECODE_NUM_ACCEPTED_TOKENS)
    )
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
            legs = sum(r.ok for r in batch) * ctx.legs_per_request
            after = await settled(ctx.metrics, before, REQUEST_SUCCESS, legs)
            records += batch
            decode_s = histogram_sum_change(before, after, REQUEST_DECODE_TIME_SECONDS)
            if decode_s:  # the engines' seconds, in the client's time base (single_stream)
                decode_s /= engine_time_scale(ctx.deployment)
            runs.append(batch_figures(batch, acceptance(before, after), decode_s))
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
        **counted(records),
        evidence={"runs": runs, "error_samples": error_samples(records)},
    )
