"""Single-stream decode: ms/step, acceptance length A and tok/s, together.

Method (shared/reference/verification.md): wait for an idle engine, warm up,
send one greedy ``ignore_eos`` stream with a prompt of exactly N tokens and
sample /metrics every 0.25 s. The decode window runs from the first streamed
token to the last. Steps are the delta of spec-decode drafts when the engine
exposes them (A = 1 + accepted / drafts); an engine with metrics but no drafts
does not speculate (steps = tokens - 1, A = 1); only a target without /metrics
falls back to counting token frames (A = tokens per frame). ms/step = window /
steps; tok/s = A x 1000 / ms/step. A run during which more than one request
was running or waiting, or another request finished on the engines (the
``vllm:request_success`` delta, which catches short requests the 0.25 s
sampling misses), is invalid and re-run.

The window is the client's when it can see one. A starved API server hands
several steps' tokens over in one frame (vLLM merges the deltas a slow reader
has not collected yet), and on a small fast model the whole stream can arrive
in one read: then the window is the engines' own decode time (the delta of
``vllm:request_decode_time_seconds``, first token to last on the engine), and
the run says so in ``window_source``. Both windows are kept when both exist.

Both windows are in one time base, the client's clock: a simulated engine at
``sim_speed`` S reports its decode time in simulated seconds, S times the wall
time it took, so its window is divided by S. Otherwise the figure would be S
times smaller whenever frames merged (the engine's window) than when they did
not (the client's), and one cluster read two ways would give two figures.
"""

from __future__ import annotations

from typing import Any

from servekit.bench.config import SingleStream
from servekit.bench.context import BenchContext
from servekit.bench.sampler import Sampler
from servekit.bench.schema import Point
from servekit.bench.stats import counted, distinct_reads, error_samples, figure
from servekit.client import RequestRecord
from servekit.deployment import Deployment
from servekit.vocabulary import (
    REQUEST_DECODE_TIME_SECONDS,
    REQUEST_SUCCESS,
    SPEC_DECODE_NUM_ACCEPTED_TOKENS,
    SPEC_DECODE_NUM_DRAFTS,
)


def shot_figures(
    rec: RequestRecord, sampler: Sampler, legs: int = 1, time_scale: float = 1.0
) -> dict[str, Any]:
    """One shot's (ms/step, A, tok/s) and the evidence behind them.

    ``legs`` is how many engine requests one client request makes (2 through a
    PD proxy: the prefill and the decode leg); any other request that finished
    on the engines during the shot is counted in ``foreign_requests``.
    ``time_scale`` is the engines' seconds per wall second (a simulated
    deployment's speed): the engine's window is divided by it.
    """
    t = rec.token_times_ns
    out: dict[str, Any] = {"ok": rec.ok, "error": rec.error, "max_running": sampler.max_running()}
    out["samples"] = len(sampler.samples)
    finished = sampler.counter_delta(REQUEST_SUCCESS)
    out["foreign_requests"] = None if finished is None else max(0.0, finished - legs)
    if not rec.ok or rec.output_tokens < 2 or len(t) < 1:
        return out
    drafts = sampler.counter_delta(SPEC_DECODE_NUM_DRAFTS)
    accepted = sampler.counter_delta(SPEC_DECODE_NUM_ACCEPTED_TOKENS)
    if drafts:
        steps, accept = drafts, 1.0 + (accepted or 0.0) / drafts
        source = "spec_decode drafts delta"
    elif sampler.samples:
        # The engine reports metrics but no drafts: no speculation, one token
        # per step. Frames are not steps here: a lagging API server merges them.
        steps, accept = float(rec.output_tokens - 1), 1.0
        source = "one token per step (no spec-decode counters)"
    else:
        steps = float(len(t) - 1)
        accept = (rec.output_tokens - 1) / steps if steps else 0.0
        source = "token frames after the first (no /metrics)"
    # One frame per step, each read on its own, unless a starved server merged
    # steps or the client read several frames at once: then the client's
    # window is short by the merged steps and the engine's is used.
    reads = distinct_reads(t)
    merged = reads - 1 < steps
    client_ms = (t[-1] - t[0]) / 1e6
    engine_s = sampler.histogram_sum_delta(REQUEST_DECODE_TIME_SECONDS)
    engine_ms = engine_s * 1000.0 / time_scale if engine_s else None
    out.update(
        frames=len(t),
        reads=reads,
        frames_merged=merged,
        client_window_ms=client_ms,
        engine_decode_ms=engine_ms,
        engine_time_scale=time_scale,
    )
    if not merged and client_ms > 0:
        window_ms, out["window_source"] = client_ms, "client: first to last token frame"
    elif engine_ms:
        window_ms = engine_ms
        out["window_source"] = f"engine: {REQUEST_DECODE_TIME_SECONDS} delta (token frames merged)"
    else:
        out["note"] = "token frames merged and the engine reports no decode time: not measured"
        return out
    ms_per_step = window_ms / steps
    out.update(
        window_ms=window_ms,
        steps=steps,
        steps_source=source,
        drafts=drafts,
        accepted=accepted,
        output_tokens=rec.output_tokens,
        ttft_ms=(rec.ttft_ns or 0) / 1e6,
        ms_per_step=ms_per_step,
        acceptance_length=accept,
        tok_per_s=accept * 1000.0 / ms_per_step,
        stream_tok_per_s=(rec.output_tokens - 1) * 1000.0 / window_ms,
        request_sha256=rec.request_sha256,
    )
    return out


async def _shot(spec: SingleStream, ctx: BenchContext) -> tuple[RequestRecord, dict[str, Any]]:
    await ctx.wait_idle()
    prompt = await ctx.prompts.build(spec.prompt_tokens)
    sampler = Sampler(ctx.metrics, spec.sample_interval_s)
    async with sampler.running():
        rec = await ctx.client.completion(ctx.body(prompt, spec.output_tokens))
    if rec.ok:
        await sampler.settle(REQUEST_SUCCESS, ctx.legs_per_request)
    scale = engine_time_scale(ctx.deployment)
    return rec, shot_figures(rec, sampler, legs=ctx.legs_per_request, time_scale=scale)


def engine_time_scale(dep: Deployment) -> float:
    """The engines' seconds per wall second: a simulated deployment's speed, else 1."""
    return dep.sim_speed if dep.simulated and dep.sim_speed else 1.0


def _valid(ev: dict[str, Any]) -> bool:
    """Measured (a decode window exists) and alone on the engine."""
    running = ev.get("max_running")
    alone = (running is None or running <= 1) and not ev.get("foreign_requests")
    return "ms_per_step" in ev and alone


async def measure(spec: SingleStream, ctx: BenchContext) -> list[Point]:
    """Measure R valid shots (each re-run up to ``max_retries`` times)."""
    await ctx.wait_idle()
    await ctx.warm_up(spec.prompt_tokens, min(spec.output_tokens, 16))
    shots: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    records: list[RequestRecord] = []
    for i in range(ctx.settings.runs):
        for _attempt in range(spec.max_retries + 1):
            rec, ev = await _shot(spec, ctx)
            records.append(rec)
            if _valid(ev) or not rec.ok:
                break
            rejected.append(ev)
        shots.append(ev)
        ctx.progress(f"single_stream ISL={spec.prompt_tokens}", i + 1, ctx.settings.runs)
    good = [s for s in shots if _valid(s)]
    method = "see docs/bench.md#single-stream-decode"
    figures = {
        name: figure((s.get(name) for s in good), unit, method)
        for name, unit in (
            ("ms_per_step", "ms"),
            ("acceptance_length", "tokens/step"),
            ("tok_per_s", "tok/s"),
            ("ttft_ms", "ms"),
            ("stream_tok_per_s", "tok/s"),
        )
    }
    return [
        Point(
            workload="single_stream",
            label=f"ISL={spec.prompt_tokens}",
            params={"prompt_tokens": spec.prompt_tokens, "output_tokens": spec.output_tokens},
            figures=figures,
            **counted(records),
            invalid_runs=len(rejected),
            evidence={
                "runs": shots,
                "rejected_runs": rejected,
                "idle_checked": ctx.idle_checked,
                "error_samples": error_samples(records),
            },
        )
    ]
