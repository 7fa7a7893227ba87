"""Prefix caching on one long prompt: cold, then hot twice, timed, with each role's hits.

The seed's release table sends the same long prompt cold and then hot twice,
with timings and the speed-up, and shows prefix-cache hits on the prefill side
beside the decode side. Here a fresh needle prompt of the context's length goes
out three times as a stream: every answer is judged, the hot ones must be byte
for byte the cold one and must hit the prefix cache. Recorded: each request's
TTFT and duration, the speed-up (cold TTFT over the mean hot TTFT) and each
role's cache-hit counters over the three requests, from the engines' /metrics
(kept as evidence). Wall time is recorded, never judged.
"""

from __future__ import annotations

import secrets
import statistics

from servekit.accept.check import Check
from servekit.accept.checks.common import (
    CACHING_OFF,
    engine_metrics,
    metric_sum,
    prefix_caching_off,
)
from servekit.accept.checks.needle import (
    bind_context,
    calibrated,
    gate,
    judged_needle,
    needle_messages,
    needles_for,
)
from servekit.accept.context import context_label
from servekit.accept.corpus import filler
from servekit.accept.env import Probe
from servekit.accept.needles import embed
from servekit.accept.outcome import Measure, Outcome, failed, passed
from servekit.accept.replies import cached_tokens, read_stream
from servekit.accept.wire import Exchange
from servekit.vocabulary import EXTERNAL_HIT_SERIES, PD_ROLES, PREFIX_HIT_SERIES, EndpointRole

RUNS = ("cold", "hot1", "hot2")
HIT_METRICS = {
    "prefix_cache_hits": PREFIX_HIT_SERIES,
    "external_prefix_cache_hits": EXTERNAL_HIT_SERIES,
}
ROLES: tuple[EndpointRole, ...] = (*PD_ROLES, "mixed")  # the measures' order


async def role_hits(probe: Probe) -> dict[str, float]:
    """Cache-hit counters per role (``prefill_prefix_cache_hits``...), summed over engines.

    ``<role>_prefix_caching_off`` is 1.0 when that role's engines report prefix
    caching off (their hits cannot move), else absent.
    """
    found: dict[str, float] = {}
    for role in ROLES:
        texts = await engine_metrics(probe, probe.env.deployment.by_role(role))
        if prefix_caching_off(texts):
            found[f"{role}_prefix_caching_off"] = 1.0
        for text in texts:
            for key, names in HIT_METRICS.items():
                if any(name in text for name in names):
                    name = f"{role}_{key}"
                    found[name] = found.get(name, 0.0) + metric_sum(text, names)
    return found


def hit_deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in sorted(after) if not k.endswith("_off")}


def _timings(runs: list[Exchange]) -> dict[str, Measure]:
    ttfts = [ex.ttft_s or ex.elapsed_s for ex in runs]
    out: dict[str, Measure] = {}
    for label, ex, ttft in zip(RUNS, runs, ttfts, strict=True):
        out[f"{label}_ttft_s"] = round(ttft, 6)
        out[f"{label}_s"] = round(ex.elapsed_s, 6)
    hot = statistics.fmean(ttfts[1:])
    out["speedup"] = round(ttfts[0] / hot, 3) if hot > 0 else 0.0
    return out


def _cache_hit(probe: Probe, deltas: dict[str, float], hot_cached: list[int]) -> str | None:
    """Why the hot requests show no prefix-cache hit, or None when they do.

    In PD a decode instance reports the KV it received as cached, so there only
    the prefill side's own counter can show a hit.
    """
    if probe.env.deployment.by_role("prefill"):
        if deltas.get("prefill_prefix_cache_hits", 0.0) > 0:
            return None
        return "the prefill instances' vllm:prefix_cache_hits did not move"
    if deltas.get("mixed_prefix_cache_hits", 0.0) > 0 or all(c > 0 for c in hot_cached):
        return None
    return "no prefix-cache hit in /metrics or usage.prompt_tokens_details.cached_tokens"


def _caching_off(probe: Probe, after: dict[str, float]) -> bool:
    """Whether the engines that would show the hit run with prefix caching off."""
    role = "prefill" if probe.env.deployment.by_role("prefill") else "mixed"
    return after.get(f"{role}_prefix_caching_off") == 1.0


async def cold_hot_hot(probe: Probe, ctx: int) -> Outcome:
    """The same long prompt cold, hot, hot: judged, byte-identical, hitting the cache."""
    if (closed := gate(probe, ctx)) is not None:
        return closed
    needle = needles_for(probe, ctx)[2]
    cal = await calibrated(probe, ctx, (needle,), probe.options.max_tokens)
    if isinstance(cal, str):
        return failed(cal)
    document = f"Cache session {secrets.token_hex(6)}.\n\n{embed(filler(cal.chars), (needle,))}"
    body = probe.chat(
        needle_messages(document, needle.name),
        stream=True,
        stream_options={"include_usage": True},
    )
    url = f"{probe.env.entry}/v1/chat/completions"
    before = await role_hits(probe)
    runs = [await probe.stream(url, body) for _ in RUNS]
    after = await role_hits(probe)
    deltas = hit_deltas(before, after)
    readings = [read_stream(ex) for ex in runs]
    for label, ex, reading in zip(RUNS, runs, readings, strict=True):
        if not ex.ok or reading.problems:
            return failed(f"{label} request failed: {reading.problems[:1] or ex.describe()}")
    cached = [cached_tokens(r.usage or {}) or 0 for r in readings]
    measures: dict[str, Measure] = {
        **_timings(runs),
        **{f"{label}_cached_tokens": c for label, c in zip(RUNS, cached, strict=True)},
        **deltas,
    }
    for label, ex, reading in zip(RUNS, runs, readings, strict=True):
        verdict = judged_needle(probe, ex, reading.text, needle, cal)
        if verdict.verdict != "pass":
            return failed(f"{label}: {verdict.reason}", **measures)
    if any(r.text != readings[0].text for r in readings[1:]):
        return failed("a hot answer is not byte-identical to the cold one", **measures)
    why = _cache_hit(probe, deltas, cached[1:])
    speedup = measures["speedup"]
    if why is not None and _caching_off(probe, after):
        return passed(
            f"cold, hot, hot byte-identical and judged; {CACHING_OFF}; cold/hot TTFT {speedup}",
            prompt_tokens=cal.tokens,
            prefix_caching_off=True,
            **measures,
        )
    if why is not None:
        return failed(f"hot requests show no prefix-cache hit: {why}", **measures)
    return passed(
        f"cold, hot, hot byte-identical and judged; hot TTFT {speedup}x faster than cold",
        prompt_tokens=cal.tokens,
        **measures,
    )


def checks_for(contexts: tuple[int, ...]) -> tuple[Check, ...]:
    """One cold/hot/hot row per context."""
    return tuple(
        Check(
            f"cache.{context_label(ctx)}.cold_hot_hot",
            "cache",
            f"{context_label(ctx)}: the same prompt cold, hot, hot (timings, each role's hits)",
            bind_context(cold_hot_hot, ctx),
        )
        for ctx in contexts
    )
