"""Predicting a layout under a workload: the simulator's engines, in virtual time, on the fit.

Every endpoint of the candidate becomes one simulated engine
(:func:`servekit.sim.virtual_engine`: the simulator's own scheduler, chunked
prefill, speculative steps, KV cache and prefix cache) whose profile is the
calibration's fit, never a profile the simulator ships. Requests arrive as the
workload says, are routed as servekit's proxy routes them (least outstanding
tokens, then fewest requests, ties by prefix), go through prefill, the fitted KV
hand-off and decode on a PD layout, or through one engine on a mixed one, and
their TTFT, TPOT and end-to-end latency are read off the virtual clock. The
figures are computed as ``servekit bench`` computes them (docs/bench.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from servekit.advise.candidates import Candidate, Pool
from servekit.advise.model import Calibration, EngineFit, TransferFit
from servekit.bench import TraceRequest
from servekit.sim import Engine, Profile, Seq, VirtualClock, run_virtual, virtual_engine

MAX_STEP_POINTS = 512
TOKEN = "x"


@dataclass(frozen=True)
class Slo:
    """Per-request limits (goodput, as ``vllm bench serve --goodput``) and the percentiles
    a layout is judged at."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None
    ttft_pct: float = 90.0
    tpot_pct: float = 50.0

    def met(self, ttft_s: float, tpot_s: float, e2el_s: float) -> bool:
        return (
            (self.ttft_ms is None or ttft_s * 1000 <= self.ttft_ms)
            and (self.tpot_ms is None or tpot_s * 1000 <= self.tpot_ms)
            and (self.e2el_ms is None or e2el_s * 1000 <= self.e2el_ms)
        )


def fit_for(cal: Calibration, pool: Pool) -> EngineFit | None:
    """The fit that stands for a pool's shape: its own, else the same engine measured mixed."""
    for key in (pool.shape.key, pool.shape.any_role().key):
        for fit in cal.engines:
            if key in fit.shapes:
                return fit
    return None


def profile_of(fit: EngineFit, prefix_caching: bool) -> Profile:
    """The simulator profile the fit describes (decode curve sampled densely)."""
    dec = fit.decode
    top = max(dec.max_running, dec.max_batch_measured)
    batches = sorted({1, top, *range(1, top + 1, max(1, top // MAX_STEP_POINTS))})
    accept = dec.acceptance_length
    drafts = max(0, math.ceil(accept - 1.0 - 1e-9))
    return Profile(
        name=f"fit:{fit.name}",
        label=f"fitted by servekit advise ({fit.engine} calibration {fit.name})",
        block_size=fit.block_size,
        kv_capacity_tokens=fit.kv_capacity_tokens,
        enable_prefix_caching=prefix_caching,
        max_num_seqs=dec.max_running,
        max_num_batched_tokens=fit.prefill.chunk_tokens,
        prefill_overhead_s=fit.prefill.overhead_s,
        prefill_per_token_s=fit.prefill.per_token_s,
        prefill_quadratic_s=fit.prefill.quadratic_s,
        decode_step_s=tuple((b, dec.step_s(b)) for b in batches),
        decode_per_context_token_s=dec.per_context_token_s,
        num_speculative_tokens=drafts,
        acceptance_length=min(accept, drafts + 1.0),
    )


def block_hashes(req: TraceRequest, index: int, block: int, trace_block: int) -> list[int]:
    """Chained hashes of the engine blocks of a request's prompt, from its trace block ids.

    An engine block is the same as another request's when every trace block up to
    its end has the same id and size (as ``servekit bench`` builds the prompts);
    blocks without an id are the request's own.
    """
    keys = []
    for i in range(-(-req.input_tokens // trace_block)):
        size = min(trace_block, req.input_tokens - i * trace_block)
        ident = req.hash_ids[i] if i < len(req.hash_ids) else f"own-{index}-{i}"
        keys.append((ident, size))
    out, parent = [], 0
    for j in range(req.input_tokens // block):
        last = ((j + 1) * block - 1) // trace_block
        parent = hash((parent, keys[last], j))
        out.append(parent)
    return out


@dataclass
class Member:
    """One simulated endpoint and the work the router has placed on it."""

    engine: Engine
    fit: EngineFit
    index: int
    active: set[Seq] = field(default_factory=set)
    peak: int = 0

    def load(self) -> tuple[int, int]:
        return sum(s.prompt_len + s.emitted for s in self.active), len(self.active)


def choose(members: Sequence[Member], key: bytes) -> Member:
    """Least outstanding tokens, then fewest requests, ties by prefix (servekit's proxy)."""

    def score(m: Member) -> tuple[int, int, bytes]:
        tokens, requests = m.load()
        tie = hashlib.blake2b(key + m.index.to_bytes(4, "big"), digest_size=8).digest()
        return tokens, requests, tie

    return min(members, key=score)


@dataclass(frozen=True)
class Outcome:
    """One request as the client would have measured it (None: it failed)."""

    ttft_s: float | None
    e2el_s: float | None
    output_tokens: int
    prompt_tokens: int
    start_s: float


@dataclass(frozen=True)
class Prediction:
    """A candidate's predicted figures under the workload (bench's definitions)."""

    requests: int
    errors: int
    duration_s: float
    goodput: float
    request_throughput: float
    output_throughput: float
    ttft_ms: dict[str, float]
    tpot_ms: dict[str, float]
    e2el_ms: dict[str, float]
    meets_slo: bool
    flags: tuple[str, ...]
    peak_batch: dict[str, int]


def _pct(values: Sequence[float], pcts: Sequence[float]) -> dict[str, float]:
    if not values:
        return {f"p{p:g}": float("nan") for p in pcts}
    return {f"p{p:g}": float(np.percentile(values, p)) * 1000 for p in pcts}


def summarize(outcomes: Sequence[Outcome], slo: Slo) -> tuple[Prediction, list[float]]:
    ok = [o for o in outcomes if o.ttft_s is not None and o.e2el_s is not None]
    start = min((o.start_s for o in outcomes), default=0.0)
    end = max((o.start_s + (o.e2el_s or 0.0) for o in ok), default=start)
    duration = max(end - start, 1e-9)
    ttft = [o.ttft_s or 0.0 for o in ok]
    tpot = [
        ((o.e2el_s or 0.0) - (o.ttft_s or 0.0)) / (o.output_tokens - 1)
        for o in ok
        if o.output_tokens > 1
    ]
    e2el = [o.e2el_s or 0.0 for o in ok]
    good = sum(
        slo.met(
            o.ttft_s or 0.0,
            ((o.e2el_s or 0.0) - (o.ttft_s or 0.0)) / (o.output_tokens - 1)
            if o.output_tokens > 1
            else 0.0,
            o.e2el_s or 0.0,
        )
        for o in ok
    )
    pcts = sorted({50.0, 90.0, 99.0, slo.ttft_pct, slo.tpot_pct})
    ttft_p, tpot_p = _pct(ttft, pcts), _pct(tpot, pcts)
    meets = (slo.ttft_ms is None or ttft_p[f"p{slo.ttft_pct:g}"] <= slo.ttft_ms) and (
        slo.tpot_ms is None or tpot_p[f"p{slo.tpot_pct:g}"] <= slo.tpot_ms
    )
    pred = Prediction(
        requests=len(outcomes),
        errors=len(outcomes) - len(ok),
        duration_s=duration,
        goodput=good / duration,
        request_throughput=len(ok) / duration,
        output_throughput=sum(o.output_tokens for o in ok) / duration,
        ttft_ms=ttft_p,
        tpot_ms=tpot_p,
        e2el_ms=_pct(e2el, pcts),
        meets_slo=bool(meets and len(ok) == len(outcomes)),
        flags=(),
        peak_batch={},
    )
    return pred, tpot


class Cluster:
    """The candidate's endpoints as simulated engines, routed like servekit's proxy."""

    def __init__(self, cand: Candidate, cal: Calibration, clock: VirtualClock) -> None:
        self.cand = cand
        self.clock = clock
        self.transfer: TransferFit = cal.transfer
        self.pools: dict[str, list[Member]] = {}
        index = 0
        for pool in cand.pools:
            fit = fit_for(cal, pool)
            if fit is None:
                raise LookupError(pool.shape.key)
            profile = profile_of(fit, cand.prefix_caching)
            for _ in range(pool.count):
                member = Member(virtual_engine(profile, clock), fit, index)
                index += 1
                self.pools.setdefault(pool.role, []).append(member)

    def start(self) -> None:
        for members in self.pools.values():
            for m in members:
                m.engine.start()

    async def stop(self) -> None:
        for members in self.pools.values():
            for m in members:
                await m.engine.stop()

    async def _run(
        self, member: Member, prompt: int, hashes: list[int], out: int, remote: bool = False
    ) -> Seq | None:
        if not member.engine.fits(prompt + out):
            return None
        now = self.clock.now()
        seq = Seq(prompt, hashes, [TOKEN] * out, "length", now, now, remote_kv=remote)
        member.active.add(seq)
        member.peak = max(member.peak, min(len(member.active), member.fit.decode.max_running))
        member.engine.submit(seq)
        try:
            await seq.done
        finally:
            member.active.discard(seq)
        return seq

    async def request(self, req: TraceRequest, index: int, trace_block: int) -> Outcome:
        await self.clock.sleep_until(req.at_s)
        start = self.clock.now()
        key = str(req.hash_ids[0] if req.hash_ids else f"own-{index}").encode()
        fail = Outcome(None, None, req.output_tokens, req.input_tokens, start)
        limit = self.cand.max_model_len
        if limit is not None and req.input_tokens + req.output_tokens > limit:
            return fail
        if "mixed" in self.pools:
            member = choose(self.pools["mixed"], key)
            hashes = block_hashes(req, index, member.fit.block_size, trace_block)
            seq = await self._run(member, req.input_tokens, hashes, req.output_tokens)
        else:
            pre = choose(self.pools["prefill"], key)
            hashes = block_hashes(req, index, pre.fit.block_size, trace_block)
            first = await self._run(pre, req.input_tokens, hashes, 1)
            if first is None:
                return fail
            dec = choose(self.pools["decode"], key)
            await self.clock.sleep(self.transfer.seconds(req.input_tokens))
            seq = await self._run(dec, req.input_tokens, [], req.output_tokens, remote=True)
        if seq is None or seq.first_token_at is None or seq.finished_at is None:
            return fail
        return Outcome(
            seq.first_token_at - start,
            seq.finished_at - start,
            req.output_tokens,
            req.input_tokens,
            start,
        )


def _flags(cluster: Cluster, cal: Calibration, requests: Sequence[TraceRequest]) -> list[str]:
    """Where the prediction left what the calibration measured."""
    flags: list[str] = []
    for role, members in cluster.pools.items():
        fit = members[0].fit
        peak = max(m.peak for m in members)
        if peak > fit.decode.max_batch_measured:
            flags.append(
                f"{role} batch reached {peak}, beyond the {fit.decode.max_batch_measured} "
                f"calibrated on {fit.name}"
            )
    longest = max((r.input_tokens for r in requests), default=0)
    measured = min(m[0].fit.prefill.max_prompt_measured for m in cluster.pools.values())
    if longest > measured:
        flags.append(f"prompts up to {longest:,} tokens, beyond the {measured:,} calibrated")
    if cluster.cand.pd and cal.transfer.observations == 0:
        flags.append("KV hand-off not measured (no PD pair calibrated): taken as no time")
    return flags


def predict_layout(
    cand: Candidate,
    cal: Calibration,
    requests: Sequence[TraceRequest],
    slo: Slo,
    trace_block: int = 512,
) -> Prediction:
    """Run the candidate on the workload in virtual time and summarize it."""

    async def main() -> tuple[list[Outcome], Cluster]:
        clock = VirtualClock()
        cluster = Cluster(cand, cal, clock)
        cluster.start()
        try:
            outcomes = await asyncio.gather(
                *(cluster.request(r, i, trace_block) for i, r in enumerate(requests))
            )
        finally:
            await cluster.stop()
        return list(outcomes), cluster

    outcomes, cluster = run_virtual(main)
    pred, _ = summarize(outcomes, slo)
    peaks = {role: max(m.peak for m in ms) for role, ms in cluster.pools.items()}
    return Prediction(
        **{**pred.__dict__, "flags": tuple(_flags(cluster, cal, requests)), "peak_batch": peaks}
    )
