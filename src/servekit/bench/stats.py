"""Statistics: per-run serving metrics from request records, and run summaries.

Definitions follow ``vllm bench serve`` (docs/bench.md repeats them):
TTFT is start to first token frame; ITL the gaps between consecutive token
frames, pooled over requests; TPOT per request is (E2EL - TTFT) / (output
tokens - 1); E2EL is start to last token frame. Throughputs divide by the run's
wall duration; goodput counts requests meeting every SLO given.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from servekit.bench.config import SLOName
from servekit.bench.schema import Figure
from servekit.client import RequestRecord

PERCENTILES = (50, 90, 99)
NS_PER_MS = 1_000_000


def figure(values: Iterable[float | None], unit: str, method: str = "") -> Figure:
    """Summarise one value per run: the median with min-max; None runs skipped."""
    runs = tuple(float(v) for v in values if v is not None and np.isfinite(v))
    if not runs:
        return Figure(unit=unit, median=None, runs=(), method=method)
    arr = np.asarray(runs)
    return Figure(
        unit=unit,
        median=float(np.median(arr)),
        min=float(arr.min()),
        max=float(arr.max()),
        runs=runs,
        method=method,
    )


def percentile(values: Sequence[float], p: float) -> float | None:
    """Linear-interpolated percentile (numpy's default, as vLLM); None if empty."""
    return float(np.percentile(np.asarray(values), p)) if len(values) else None


def mean(values: Sequence[float]) -> float | None:
    """Arithmetic mean; None if empty."""
    return float(np.mean(np.asarray(values))) if len(values) else None


def spread(prefix: str, values: Sequence[float]) -> dict[str, float | None]:
    """``PREFIX_p50_ms``, ``_p99_ms`` and ``_max_ms`` of ``values`` (None when empty)."""
    arr = np.asarray(values)
    return {
        f"{prefix}_p50_ms": percentile(values, 50),
        f"{prefix}_p99_ms": percentile(values, 99),
        f"{prefix}_max_ms": float(arr.max()) if len(arr) else None,
    }


def error_kinds(records: Iterable[RequestRecord]) -> dict[str, int]:
    """Count failed records by kind."""
    return dict(Counter(r.error_kind or "unknown" for r in records if not r.ok))


def counted(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """A point's ``requests``, ``errors`` and ``error_kinds`` from its measured records."""
    return {
        "requests": len(records),
        "errors": sum(not r.ok for r in records),
        "error_kinds": error_kinds(records),
    }


def error_samples(records: Iterable[RequestRecord], n: int = 3) -> list[str]:
    """The first ``n`` distinct error messages, so a failed point says why."""
    seen: list[str] = []
    for r in records:
        if r.error is not None and r.error not in seen:
            seen.append(r.error)
            if len(seen) == n:
                break
    return seen


def tpot_ms(rec: RequestRecord) -> float | None:
    """Time per output token after the first (vLLM's TPOT); None for 1-token outputs."""
    ttft = rec.ttft_ns
    n = rec.output_tokens
    if ttft is None or n <= 1:
        return None
    return (rec.latency_ns - ttft) / (n - 1) / NS_PER_MS


def serving_metrics(
    records: Sequence[RequestRecord],
    duration_s: float,
    prompt_tokens: int,
    slo_ms: Mapping[SLOName, float],
) -> dict[str, float | None]:
    """One run's vLLM-style serving metrics from its measured records."""
    ok = [r for r in records if r.ok and r.ttft_ns is not None]
    ttft = [r.ttft_ns / NS_PER_MS for r in ok if r.ttft_ns is not None]
    tpot = [t for t in (tpot_ms(r) for r in ok) if t is not None]
    itl = [g / NS_PER_MS for r in ok for g in r.itl_ns]
    e2el = [r.latency_ns / NS_PER_MS for r in ok]
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(_prompt_len(r, prompt_tokens) for r in ok)
    dur = max(duration_s, 1e-9)
    result: dict[str, float | None] = {
        "completed": float(len(ok)),
        "failed": float(len(records) - len(ok)),
        "request_throughput": len(ok) / dur,
        "output_throughput": out_tokens / dur,
        "total_token_throughput": (in_tokens + out_tokens) / dur,
        "goodput": _good(ok, slo_ms) / dur if slo_ms else None,
    }
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        result[f"{name}_mean_ms"] = mean(values)
        for p in PERCENTILES:
            result[f"{name}_p{p}_ms"] = percentile(values, p)
    return result


def _prompt_len(rec: RequestRecord, default: int) -> int:
    if rec.usage is not None and rec.usage.prompt_tokens is not None:
        return rec.usage.prompt_tokens
    return default


def _good(records: Sequence[RequestRecord], slo_ms: Mapping[SLOName, float]) -> int:
    """Requests meeting every SLO (vLLM: a 1-token output has TPOT 0)."""
    good = 0
    for r in records:
        values: dict[SLOName, float] = {
            "ttft": (r.ttft_ns or 0) / NS_PER_MS,
            "tpot": tpot_ms(r) or 0.0,
            "e2el": r.latency_ns / NS_PER_MS,
        }
        if all(values[k] <= limit for k, limit in slo_ms.items()):
            good += 1
    return good


def distinct_reads(token_times_ns: Sequence[int]) -> int:
    """How many separate reads a stream's frames arrived in.

    Frames parsed out of one socket read share their arrival stamp, so frames
    that came together count once: they tell the client nothing about steps.
    """
    return len(set(token_times_ns))


def stream_rates(records: Sequence[RequestRecord]) -> tuple[list[float], list[float]]:
    """Per-stream decode tok/s and ms/step from streamed token stamps.

    tok/s = (tokens - 1) / (t_last - t_first); ms/step = (t_last - t_first) /
    (frames - 1), since the engine emits one frame per step per stream. A
    stream whose frames all arrived in one read has no window and is skipped.
    """
    rates: list[float] = []
    steps: list[float] = []
    for r in records:
        t = r.token_times_ns
        if not r.ok or len(t) < 2 or t[-1] <= t[0]:
            continue
        window_s = (t[-1] - t[0]) / 1e9
        rates.append((r.output_tokens - 1) / window_s)
        steps.append(window_s * 1000 / (len(t) - 1))
    return rates, steps


def per_request(records: Sequence[RequestRecord]) -> dict[str, list[float]]:
    """Each successful request's TTFT, TPOT and E2EL in ms (for distributions)."""
    ok = [r for r in records if r.ok and r.ttft_ns is not None]
    return {
        "ttft_ms": [round((r.ttft_ns or 0) / NS_PER_MS, 3) for r in ok],
        "tpot_ms": [round(t, 3) for t in (tpot_ms(r) for r in ok) if t is not None],
        "e2el_ms": [round(r.latency_ns / NS_PER_MS, 3) for r in ok],
    }
