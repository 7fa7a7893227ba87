"""Prefill throughput with cold prefixes, after warm-up.

Per run: wait for idle, send N requests at once, each with a fresh
``[req-NNNNN]`` prefix (nothing cached) and max_tokens 1. Prefill tok/s is
the sum of prompt tokens over the time from the first request's start to the
last first token. The warm-up request comes first: the first prefill of a
session pays one-time costs ("must warm up first").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servekit.bench.config import Prefill
from servekit.bench.context import BenchContext
from servekit.bench.load import run_concurrent
from servekit.bench.schema import Point
from servekit.bench.stats import counted, error_samples, figure
from servekit.client import RequestRecord


def batch_figures(records: list[RequestRecord], prompt_tokens: int) -> dict[str, Any]:
    """Prefill tok/s and TTFT of one batch."""
    ok = [r for r in records if r.ok and r.token_times_ns]
    ev: dict[str, Any] = {"ok": len(ok), "failed": len(records) - len(ok)}
    if not ok:
        return ev
    start = min(r.t_start_ns for r in ok)
    end = max(r.token_times_ns[0] for r in ok)
    tokens = sum(
        r.usage.prompt_tokens if r.usage and r.usage.prompt_tokens else prompt_tokens for r in ok
    )
    cached = sum(r.usage.cached_tokens or 0 for r in ok if r.usage)
    ev.update(
        window_ms=(end - start) / 1e6,
        prompt_tokens=tokens,
        cached_tokens=cached,
        prefill_tok_per_s=tokens / ((end - start) / 1e9),
        ttft_p50_ms=float(np.median([(r.ttft_ns or 0) / 1e6 for r in ok])),
    )
    return ev


async def measure(spec: Prefill, ctx: BenchContext) -> list[Point]:
    """One point per N in ``spec.streams``."""
    await ctx.wait_idle()
    await ctx.warm_up(spec.prompt_tokens, 1)
    points = []
    for n in spec.streams:
        runs: list[dict[str, Any]] = []
        records: list[RequestRecord] = []
        for i in range(ctx.settings.runs):
            prompts = await ctx.prompts.build_many(spec.prompt_tokens, n)
            await ctx.wait_idle()
            batch, _ = await run_concurrent(ctx.client, [ctx.body(p, 1) for p in prompts], n)
            records += batch
            runs.append(batch_figures(batch, spec.prompt_tokens))
            ctx.progress(f"prefill N={n}", i + 1, ctx.settings.runs)
        method = "see docs/bench.md#prefill-throughput"
        points.append(
            Point(
                workload="prefill",
                label=f"N={n}",
                params={"streams": n, "prompt_tokens": spec.prompt_tokens},
                figures={
                    "prefill_tok_per_s": figure(
                        (r.get("prefill_tok_per_s") for r in runs), "tok/s", method
                    ),
                    "ttft_p50_ms": figure((r.get("ttft_p50_ms") for r in runs), "ms", method),
                },
                **counted(records),
                evidence={"runs": runs, "error_samples": error_samples(records)},
            )
        )
    return points
