"""Correctness invariants that hold for any model at temperature 0.

They need no knowledge of what the right answer is, only that the same
question gets the same answer whatever path it takes: through PD or a single
instance, from the prefix cache or not, streamed or not, alone or in a crowd,
beside a long request, on any replica. The tiny CPU model is as good a witness
as a 600B one.
"""

from __future__ import annotations

import asyncio
import secrets

from servekit.accept.check import Check
from servekit.accept.checks.common import (
    CACHING_OFF,
    PROMPTS,
    complete,
    engine_metrics,
    first_diff,
    metric_labelled,
    metric_sum,
    prefix_caching_off,
    text_or_reason,
)
from servekit.accept.corpus import filler
from servekit.accept.env import Probe, base_url
from servekit.accept.outcome import Outcome, failed, passed, skipped
from servekit.accept.replies import cached_tokens, read_stream, usage
from servekit.accept.wire import Exchange
from servekit.deployment import Endpoint
from servekit.vocabulary import BY_SOURCE_SERIES, EXTERNAL_HIT_SERIES, PREFIX_HIT_SERIES

NO_DIRECT_ACCESS = (
    "the engines are reached only through the proxy (attached without --nodes): "
    "{what} need direct access; pass --nodes IP,... (the nodes' addresses in rank order)"
)


async def _answers(probe: Probe, url: str, prompts: tuple[str, ...]) -> list[str] | str:
    """Serial greedy answers from ``url``, or the first failure's reason."""
    out: list[str] = []
    for prompt in prompts:
        text, why = text_or_reason(await complete(probe, url, prompt))
        if text is None:
            return why
        out.append(text)
    return out


def _compare(label: str, want: list[str], got: list[str], prompts: tuple[str, ...]) -> str | None:
    for prompt, a, b in zip(prompts, want, got, strict=True):
        if a != b:
            return f"{label}: {prompt!r} {first_diff(a, b)}"
    return None


def _handoff_prompt() -> str:
    """A prompt several KV blocks long: connectors hand over whole blocks only.

    ExampleConnector on the CPU stores whole blocks, so a prompt shorter than
    one block "hits" without loading anything; this one cannot.
    """
    return f"Handoff probe {secrets.token_hex(6)}.\n\n{filler(2400)}\n\nThe next line reads"


async def pd_equals_single(probe: Probe) -> Outcome:
    """Through the deployment equals a single reference instance (short and long prompts)."""
    ref = probe.env.deployment.reference_url
    if ref is None:
        return skipped("no reference endpoint given (Deployment.reference_url)")
    prompts = (*PROMPTS[:4], _handoff_prompt())
    want = await _answers(probe, base_url(ref), prompts)
    got = await _answers(probe, probe.env.entry, prompts)
    if isinstance(want, str) or isinstance(got, str):
        return failed(f"request failed: {want if isinstance(want, str) else got}")
    diff = _compare("deployment vs reference", want, got, prompts)
    return failed(diff) if diff else passed(f"{len(prompts)} answers equal the reference")


async def _external_hits(probe: Probe, decode: tuple[Endpoint, ...]) -> float | None:
    """Tokens decode engines loaded through the KV connector (None: not exported)."""
    texts = await engine_metrics(probe, decode)
    found = [t for t in texts if any(name in t for name in EXTERNAL_HIT_SERIES)]
    return sum((metric_sum(t, EXTERNAL_HIT_SERIES) for t in found), 0.0) if found else None


SOURCES = ("external_kv_transfer", "local_compute")


async def _by_source(probe: Probe, decode: tuple[Endpoint, ...]) -> dict[str, float] | None:
    """Decode's prompt tokens by source (external_kv_transfer, local_compute); None: absent."""
    texts = await engine_metrics(probe, decode)
    found: dict[str, float] = {}
    for source in SOURCES:
        values = [metric_labelled(t, BY_SOURCE_SERIES, "source", source) for t in texts]
        if any(v is not None for v in values):
            found[source] = sum(v or 0.0 for v in values)
    return found if len(found) == len(SOURCES) else None


def _prompt_tokens(ex: Exchange) -> int | None:
    value = usage(ex).get("prompt_tokens")
    return value if isinstance(value, int) else None


async def pd_kv_handoff(probe: Probe) -> Outcome:
    """In PD, decode really loads the prompt's KV from prefill (not a silent re-prefill).

    Where vLLM exports ``vllm:prompt_tokens_by_source`` the measurements say how
    many of the prompt's tokens decode received from the transfer and how many
    it computed itself (a transfer-engine connector: all, and none).
    """
    decode = probe.env.deployment.by_role("decode")
    if not decode or not probe.env.deployment.by_role("prefill"):
        return skipped("not a PD deployment (no prefill and decode endpoints)")
    before = await _external_hits(probe, decode)
    if before is None:
        return skipped("decode endpoints export no vllm:external_prefix_cache_hits metric")
    sources_before = await _by_source(probe, decode)
    ex = await complete(probe, probe.env.entry, _handoff_prompt(), max_tokens=16)
    text, why = text_or_reason(ex)
    if text is None:
        return failed(f"request failed: {why}")
    after = await _external_hits(probe, decode)
    delta = (after or 0.0) - before
    sources_after = await _by_source(probe, decode)
    if sources_before is not None and sources_after is not None:
        figures = {f"decode_{k}_tokens": sources_after[k] - sources_before[k] for k in SOURCES}
        prompt = _prompt_tokens(ex)
        if prompt is not None:
            figures["prompt_tokens_sent"] = float(prompt)
        if delta <= 0:
            return failed(
                "decode loaded no KV through the connector: it re-ran prefill by itself",
                external_hits_delta=delta, **figures,
            )  # fmt: skip
        got = figures["decode_external_kv_transfer_tokens"]
        local = figures["decode_local_compute_tokens"]
        return passed(
            f"decode received {got:.0f} of {prompt} prompt tokens from prefill and computed "
            f"{local:.0f} itself",
            external_hits_delta=delta, **figures,
        )  # fmt: skip
    if delta <= 0:
        return failed(
            "decode loaded no KV through the connector (external prefix-cache hits did not "
            "move): it re-ran prefill by itself",
            external_hits_delta=delta,
        )
    return passed(
        f"decode loaded {delta:.0f} prompt tokens from prefill", external_hits_delta=delta
    )


def _cache_endpoints(probe: Probe) -> tuple[tuple[Endpoint, ...], bool]:
    """Where prefix-cache hits are counted, and whether usage may vouch for them.

    In PD the decode side reports the KV it received from prefill as cached, so
    only the prefill instances' own /metrics show prefix caching there.
    """
    prefill = probe.env.deployment.by_role("prefill")
    if prefill:
        return prefill, False
    entry = Endpoint(name="entry", role="mixed", url=probe.env.entry)
    return probe.env.engines() or (entry,), True


async def _prefix_hits(probe: Probe, endpoints: tuple[Endpoint, ...]) -> tuple[float, bool]:
    """Prefix-cache hits summed over ``endpoints``, and whether they have caching off."""
    texts = await engine_metrics(probe, endpoints)
    return sum(metric_sum(text, PREFIX_HIT_SERIES) for text in texts), prefix_caching_off(texts)


async def prefix_hot_cold(probe: Probe) -> Outcome:
    """The same long prompt twice: hot equals cold byte for byte, and hits the cache."""
    nonce = secrets.token_hex(6)
    prompt = f"Reading session {nonce}.\n\n{filler(1600)}\n\nIn one sentence, the town is"
    urls, usage_counts = _cache_endpoints(probe)
    before, _ = await _prefix_hits(probe, urls)
    cold_ex = await complete(probe, probe.env.entry, prompt, max_tokens=32)
    hot_ex = await complete(probe, probe.env.entry, prompt, max_tokens=32)
    after, caching_off = await _prefix_hits(probe, urls)
    delta = after - before
    cold, why_cold = text_or_reason(cold_ex)
    hot, why_hot = text_or_reason(hot_ex)
    if cold is None or hot is None:
        return failed(f"request failed: {why_cold or why_hot}")
    cached = cached_tokens(usage(hot_ex))
    measures: dict[str, str | int | float | bool] = {
        "metric_hits_delta": delta,
        "cold_s": cold_ex.elapsed_s,
        "hot_s": hot_ex.elapsed_s,
        "usage_cached_tokens": cached if cached is not None else -1,
    }
    if hot != cold:
        return failed(f"hot answer differs from cold: {first_diff(cold, hot)}", **measures)
    if not (delta > 0 or (usage_counts and cached)):
        if caching_off:
            return passed(f"hot equals cold byte for byte; {CACHING_OFF}", **measures)
        where = "prefill /metrics" if not usage_counts else "usage or /metrics"
        return failed(f"hot request shows no prefix-cache hit ({where})", **measures)
    return passed("hot equals cold byte for byte and hit the prefix cache", **measures)


async def stream_equals_nonstream(probe: Probe) -> Outcome:
    """The concatenated stream equals the non-streamed answer."""
    entry = probe.env.entry
    prompt = PROMPTS[6]
    plain, why = text_or_reason(await complete(probe, entry, prompt, max_tokens=32))
    if plain is None:
        return failed(f"request failed: {why}")
    ex = await probe.stream(
        f"{entry}/v1/completions", probe.completion(prompt, max_tokens=32, stream=True)
    )
    if not ex.ok:
        return failed(f"stream failed: {ex.describe()}")
    streamed = read_stream(ex).text
    if streamed != plain:
        return failed(f"stream differs from non-stream: {first_diff(plain, streamed)}")
    return passed(f"stream equals non-stream ({len(plain)} characters)")


async def concurrent_equals_serial(probe: Probe) -> Outcome:
    """N concurrent requests, identical and different, equal their serial answers."""
    n = probe.options.concurrency
    prompts = tuple(PROMPTS[i % len(PROMPTS)] for i in range(n))
    serial = await _answers(probe, probe.env.entry, prompts)
    if isinstance(serial, str):
        return failed(f"request failed: {serial}")
    for label, batch in (("identical", (prompts[0],) * n), ("different", prompts)):
        exchanges = await asyncio.gather(*(complete(probe, probe.env.entry, p) for p in batch))
        got = [text_or_reason(ex) for ex in exchanges]
        if any(text is None for text, _ in got):
            return failed(f"{label} batch: {next(w for t, w in got if t is None)}")
        want = [serial[prompts.index(p)] for p in batch]
        diff = _compare(f"{label} x{n}", want, [t or "" for t, _ in got], batch)
        if diff:
            return failed(diff)
    return passed(f"{n} concurrent identical and different requests equal serial", n=n)


def _long_prompt_chars(max_model_len: int | None) -> int:
    tokens = min((max_model_len or 8192) // 3, 8192)
    return max(tokens * 3, 400)


async def long_beside_short(probe: Probe) -> Outcome:
    """Short answers do not change while a long request runs beside them."""
    entry = probe.env.entry
    shorts = PROMPTS[:3]
    baseline = await _answers(probe, entry, shorts)
    if isinstance(baseline, str):
        return failed(f"request failed: {baseline}")
    long_prompt = f"{filler(_long_prompt_chars(probe.env.max_model_len))}\n\nSummary:"
    long_task = asyncio.create_task(complete(probe, entry, long_prompt, max_tokens=64))
    beside = await asyncio.gather(*(complete(probe, entry, p) for p in shorts))
    long_ex = await long_task
    if not long_ex.ok:
        return failed(f"long request failed: {long_ex.describe()}")
    got = [text_or_reason(ex) for ex in beside]
    if any(text is None for text, _ in got):
        return failed(f"short request failed: {next(w for t, w in got if t is None)}")
    diff = _compare("beside a long request", baseline, [t or "" for t, _ in got], shorts)
    if diff:
        return failed(diff)
    return passed(f"{len(shorts)} short answers unchanged beside a long request")


async def replicas_agree(probe: Probe) -> Outcome:
    """Every mixed replica gives the same greedy answers."""
    replicas = probe.env.deployment.by_role("mixed")
    if len(replicas) < 2:
        return skipped(f"{len(replicas)} mixed replica(s): nothing to compare")
    if not probe.env.deployment.direct:
        return skipped(NO_DIRECT_ACCESS.format(what="each replica's own answers"))
    prompts = PROMPTS[:2]
    first = await _answers(probe, base_url(replicas[0].url), prompts)
    if isinstance(first, str):
        return failed(f"{replicas[0].name}: {first}")
    for replica in replicas[1:]:
        other = await _answers(probe, base_url(replica.url), prompts)
        if isinstance(other, str):
            return failed(f"{replica.name}: {other}")
        diff = _compare(f"{replicas[0].name} vs {replica.name}", first, other, prompts)
        if diff:
            return failed(diff)
    return passed(f"{len(replicas)} replicas agree", replicas=len(replicas))


CHECKS = (
    Check(
        "invariant.pd_equals_single",
        "invariant",
        "PD output equals a single instance",
        pd_equals_single,
    ),
    Check(
        "invariant.pd_kv_handoff",
        "invariant",
        "PD: decode loads the KV prefill computed",
        pd_kv_handoff,
    ),
    Check(
        "invariant.prefix_hot_cold", "invariant", "prefix cache: hot equals cold", prefix_hot_cold
    ),
    Check(
        "invariant.stream_equals_nonstream",
        "invariant",
        "stream equals non-stream",
        stream_equals_nonstream,
    ),
    Check(
        "invariant.concurrent_equals_serial",
        "invariant",
        "concurrent equals serial",
        concurrent_equals_serial,
    ),
    Check(
        "invariant.long_beside_short",
        "invariant",
        "long request does not change short ones",
        long_beside_short,
    ),
    Check("invariant.replicas_agree", "invariant", "replicas agree", replicas_agree),
)
