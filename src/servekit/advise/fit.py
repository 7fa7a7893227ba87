"""Fitting the engine model to observations: small, explicit least squares.

The model is the simulator's own step model (``servekit.sim.profile``), so the
prediction can run the simulator's scheduler on the fit unchanged:

- **prefill**: each engine step that carries prefill costs ``overhead``, and
  each uncached prompt token ``per_token + quadratic x its context position``;
  a prompt is cut into chunks of ``chunk_tokens`` per step. TTFTs measured at
  several prompt lengths, batches and prefix hits are each a sum of those
  three features over the steps up to that request's first token (the chunk
  schedule is replayed here exactly as the engine runs it), so the fit is a
  non-negative linear least squares in relative error (a 50 ms and a 5 s TTFT
  count alike); the chunk size is chosen among powers of two by the residual.
- **decode**: the measured step time per batch size, less ``per_context x
  batch x context`` (the slope fitted from the same batch at two prompt
  lengths), interpolated in log-log: a local power law between measured
  batches and the last segment's power law beyond them, so a batch that was
  not measured gets neither a straight line nor a constant.
- **KV hand-off**: what a PD pair's TTFT adds to the prefill fit and one decode
  step, linear in the prompt's tokens.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from servekit.advise.model import DecodeFit, PrefillFit, TransferFit
from servekit.advise.observe import DecodeObs, PrefillObs
from servekit.errors import UsageError

CHUNKS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
OUTLIER_FLOOR = 0.15
OUTLIER_SIGMAS = 3.0
SATURATED = 0.25


def nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0 (exact: tries every active set; k <= 4)."""
    k = x.shape[1]
    best = np.zeros(k)
    best_err = float(np.sum(y**2))
    for size in range(1, k + 1):
        for cols in itertools.combinations(range(k), size):
            sub = x[:, cols]
            coef, *_ = np.linalg.lstsq(sub, y, rcond=None)
            if np.any(coef < 0):
                continue
            err = float(np.sum((sub @ coef - y) ** 2))
            if err < best_err - 1e-18:
                best_err = err
                best = np.zeros(k)
                best[list(cols)] = coef
    return best


def chunk_schedule(
    prompts: Sequence[int], cached: Sequence[int], chunk: int
) -> list[tuple[float, float, float]]:
    """Per request (in order), the (steps, tokens, tokens x position) summed over the
    engine steps up to its first token, when all arrive at once on an idle engine."""
    left = [max(0, p - c) for p, c in zip(prompts, cached, strict=True)]
    done = list(cached)
    totals = [0.0, 0.0, 0.0]
    out: list[tuple[float, float, float] | None] = [None] * len(prompts)
    while any(out[i] is None for i in range(len(prompts))):
        budget = chunk
        step_tokens = step_area = 0.0
        finished: list[int] = []
        for i, rest in enumerate(left):
            if out[i] is not None:
                continue
            n = min(budget, rest)
            if rest == 0:
                finished.append(i)
                continue
            if n <= 0:
                continue
            budget -= n
            done[i] += n
            left[i] -= n
            step_tokens += n
            step_area += n * done[i]
            if left[i] == 0:
                finished.append(i)
        totals = [totals[0] + 1, totals[1] + step_tokens, totals[2] + step_area]
        for i in finished:
            out[i] = (totals[0], totals[1], totals[2])
    return [o for o in out if o is not None]


def median_features(obs: PrefillObs, chunk: int) -> np.ndarray:
    """The features of the request whose TTFT is the median (the middle two averaged)."""
    feats = sorted(chunk_schedule(obs.prompts, obs.cached, chunk))
    n = len(feats)
    mid = [feats[(n - 1) // 2], feats[n // 2]]
    return np.array([(a[j] + b[j]) / 2 for a, b in [mid] for j in range(3)])


def prefill_seconds(fit: PrefillFit, obs: PrefillObs) -> float:
    """The fit's median TTFT for an observation's prompts (its prediction)."""
    steps, tokens, area = median_features(obs, fit.chunk_tokens)
    return float(fit.overhead_s * steps + fit.per_token_s * tokens + fit.quadratic_s * area)


def _rms_pct(pred: Sequence[float], meas: Sequence[float]) -> float:
    rel = [(p - m) / m for p, m in zip(pred, meas, strict=True) if m > 0]
    return 100.0 * math.sqrt(sum(r * r for r in rel) / len(rel)) if rel else 0.0


def _best_chunk(
    good: Sequence[PrefillObs], known: int | None = None
) -> tuple[float, int, np.ndarray]:
    """(rms %, chunk, coefficients) of the chunk size that fits best (a tie: the larger),
    or of the ``known`` one (a probe read it off the engine)."""
    y = np.array([o.ttft_s for o in good])
    longest = max(max(o.prompts) for o in good)
    widest = longest * max(len(o.prompts) for o in good)
    best: tuple[float, int, np.ndarray] | None = None
    for chunk in (known,) if known else CHUNKS:
        x = np.array([median_features(o, chunk) for o in good])
        w = 1.0 / y
        coef = nnls(x * w[:, None], y * w)
        rms = _rms_pct(list(x @ coef), list(y))
        # a larger chunk wins a tie: below it every observation is one step anyway
        if best is None or rms <= best[0] + 1e-6:
            best = (rms, chunk, coef)
        if chunk >= widest:
            break
    assert best is not None
    return best


def _outliers(good: Sequence[PrefillObs], chunk: int, coef: np.ndarray) -> list[bool]:
    """Observations whose relative error is far outside the rest (a host hiccup, one run)."""
    rel = np.array(
        [(median_features(o, chunk) @ coef - o.ttft_s) / o.ttft_s for o in good], dtype=float
    )
    scale = 1.4826 * float(np.median(np.abs(rel - np.median(rel))))
    return list(np.abs(rel) > max(OUTLIER_FLOOR, OUTLIER_SIGMAS * scale))


def fit_prefill(obs: Sequence[PrefillObs], chunk: int | None = None) -> PrefillFit:
    """The prefill model with the smallest relative residual over the chunk sizes tried.

    One pass of outlier rejection: an observation whose relative error exceeds
    both 15% and three robust standard deviations of the others (a single run
    hit by a host stall) is left out and counted in ``rejected``.
    """
    good = [
        o
        for o in obs
        if o.ttft_s > 0 and any(p > c for p, c in zip(o.prompts, o.cached, strict=True))
    ]
    if len(good) < 2:
        raise UsageError(
            "calibration: fewer than 2 prefill observations (prefill or single-stream TTFTs); "
            "measure prefill at two or more prompt lengths"
        )
    known = chunk
    rms, chunk, coef = _best_chunk(good, known)
    out = _outliers(good, chunk, coef)
    kept = [o for o, bad in zip(good, out, strict=True) if not bad]
    if len(kept) >= 3 and len(kept) < len(good):
        rms, chunk, coef = _best_chunk(kept, known)
    else:
        kept = good
    return PrefillFit(
        overhead_s=float(coef[0]),
        per_token_s=float(coef[1]),
        quadratic_s=float(coef[2]),
        chunk_tokens=chunk,
        chunk_source="probe" if known else "fit",
        max_prompt_measured=max(max(o.prompts) for o in good),
        observations=len(kept),
        rejected=len(good) - len(kept),
        rms_error_pct=rms,
    )


def saturation(obs: Sequence[DecodeObs]) -> int | None:
    """The batch the engine stopped growing at, read from multi-stream points: a point
    whose median TTFT exceeds a quarter of its streams' decode time had streams waiting
    for a slot (at twice the limit half of them wait a whole decode, so the median is
    about half of it), so the engine ran at most the largest batch below it."""
    ran: list[int] = []
    for o in sorted(obs, key=lambda o: o.batch):
        decode_s = o.step_s * max(1, o.output_tokens - 1) / (o.acceptance or 1.0)
        if o.ttft_s is not None and o.batch > 1 and o.ttft_s > SATURATED * decode_s:
            return max(ran) if ran else None
        ran.append(o.batch)
    return None


def monotone(values: Sequence[float]) -> list[float]:
    """The closest non-decreasing sequence (pool adjacent violators): a larger batch never
    makes a step shorter, so a point measured while the host was busy is averaged with
    its neighbours instead of bending the curve down after it."""
    blocks: list[list[float]] = []  # [sum, count]
    for v in values:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    return [b[0] / b[1] for b in blocks for _ in range(int(b[1]))]


def running_limit(peak: int | None, obs: Sequence[DecodeObs]) -> int | None:
    """The most sequences the engine runs at once: what the probe saw running when it ran
    (``vllm:num_requests_running`` sampled under a full batch: an observation), else read
    from the multi-stream points (:func:`saturation`), else the largest batch measured."""
    if peak:
        return peak
    if not obs:
        return None
    sat = saturation(obs)
    return sat if sat is not None else max(o.batch for o in obs)


def fit_decode(obs: Sequence[DecodeObs], max_running: int | None) -> DecodeFit:
    """Step time per batch (log-log), the context slope, A and the largest batch seen."""
    good = [o for o in obs if o.step_s > 0 and o.batch >= 1]
    if not good:
        raise UsageError(
            "calibration: no decode observations (multi-stream or single-stream ms/step); "
            "measure multi-stream decode at several batch sizes"
        )
    limit = max_running or saturation(good) or max(o.batch for o in good)
    pts = [(min(o.batch, limit), o.context, o.step_s) for o in good]
    groups: dict[int, list[tuple[float, float]]] = {}
    for b, c, s in pts:
        groups.setdefault(b, []).append((c, s))
    num = den = 0.0
    for b, members in groups.items():
        cm = sum(c for c, _ in members) / len(members)
        sm = sum(s for _, s in members) / len(members)
        num += sum(b * (c - cm) * (s - sm) for c, s in members)
        den += sum((b * (c - cm)) ** 2 for c, _ in members)
    slope = max(0.0, num / den) if den > 0 else 0.0
    bases = [
        (b, max(sum(s - slope * b * c for c, s in groups[b]) / len(groups[b]), 1e-9))
        for b in sorted(groups)
    ]
    curve = list(zip([b for b, _ in bases], monotone([v for _, v in bases]), strict=True))
    accepts = [o.acceptance for o in good if o.acceptance]
    fit = DecodeFit(
        points=tuple(curve),
        per_context_token_s=slope,
        acceptance_length=float(np.median(accepts)) if accepts else 1.0,
        max_running=limit,
        observations=len(good),
        rms_error_pct=0.0,
    )
    pred = [fit.step_s(b) + slope * b * c for b, c, _ in pts]
    return fit.model_copy(update={"rms_error_pct": _rms_pct(pred, [s for *_, s in pts])})


def fit_transfer(pair: Sequence[PrefillObs], prefill: PrefillFit, decode: DecodeFit) -> TransferFit:
    """The hand-off: a PD pair's TTFT less the prefill fit and one decode step."""
    rows = []
    for o in pair:
        if len(o.prompts) != 1:
            continue
        tokens = o.prompts[0]
        rest = prefill_seconds(prefill, o) + decode.step_s(1) + decode.per_context_token_s * tokens
        rows.append((tokens, o.ttft_s - rest))
    if not rows:
        return TransferFit(overhead_s=0.0, per_token_s=0.0, observations=0)
    x = np.array([[1.0, t] for t, _ in rows])
    y = np.array([max(0.0, r) for _, r in rows])
    coef = nnls(x, y) if len(rows) > 1 else np.array([y[0], 0.0])
    return TransferFit(
        overhead_s=float(coef[0]), per_token_s=float(coef[1]), observations=len(rows)
    )
