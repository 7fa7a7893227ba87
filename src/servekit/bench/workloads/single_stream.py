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
"""

from __future__ import annotations

from typing import Any

from servekit.bench.config import SingleStream
from servekit.bench.context import BenchContext
from servekit.bench.sampler import Sampler
from servekit.bench.schema import Point
from servekit.bench.stats import error_kinds, error_samples, figure
from servekit.client import RequestRecord

DRAFTS = "vllm:spec_decode_num_drafts"
FINISHED = "vllm:request_success"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"


def shot_figures(rec: RequestRecord, sampler: Sampler, legs: int = 1) -> dict[str, Any]:
    """One shot's (ms/step, A, tok/s) and the evidence behind them.

    ``legs`` is how many engine requests one client request makes (2 through a
    PD proxy: the prefill and the decode leg); any other request that finished
    on the engines during the shot is counted in ``foreign_requests``.
    """
    t = rec.token_times_ns
    out: dict[str, Any] = {"ok": rec.ok, "error": rec.error, "max_running": sampler.max_running()}
    out["samples"] = len(sampler.samples)
    finished = sampler.counter_delta(FINISHED)
    out["foreign_requests"] = None if finished is None else max(0.0, finished - legs)
    if not rec.ok or len(t) < 2:
        return out
    window_ms = (t[-1] - t[0]) / 1e6
    if window_ms <= 0:
        out["note"] = "all token frames arrived in one read: no decode window to measure"
        return out
    drafts = sampler.counter_delta(DRAFTS)
    accepted = sampler.counter_delta(ACCEPTED)
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
        accept = (rec.output_tokens - 1) / steps
        source = "token frames after the first (no /metrics)"
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
    return rec, shot_figures(rec, sampler, legs=2 if ctx.deployment.is_pd else 1)


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
    records: list[RequestRecord] = []
    invalid = 0
    for i in range(ctx.settings.runs):
        for _attempt in range(spec.max_retries + 1):
            rec, ev = await _shot(spec, ctx)
            records.append(rec)
            if _valid(ev) or not rec.ok:
                break
            invalid += 1
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
            requests=len(records),
            errors=sum(not r.ok for r in records),
            error_kinds=error_kinds(records),
            invalid_runs=invalid,
            evidence={
                "runs": shots,
                "idle_checked": ctx.idle_checked,
                "error_samples": error_samples(records),
            },
        )
    ]
