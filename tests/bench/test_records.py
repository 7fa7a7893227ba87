"""requests.jsonl recomputes every headline figure exactly, by the definitions alone.

The recomputation here is written from docs/bench.md's definitions, not by
calling servekit.bench.stats: from the rows a user reads back (nanosecond
integers, the server's usage), every serving figure of every run of every
point equals bench.json's, bit for bit, and so do their medians. The engine's
counter figures (prefix-cache hits) come from /metrics, not from requests, and
are not in the rows.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from servekit.bench import ConcurrencySweep, RateSweep, RunSettings, run_workloads, write_outputs
from servekit.bench.config import TraceReplay
from servekit.bench.records import RECORDS_FILE, RequestRow, read_rows
from servekit.bench.schema import BenchResult
from servekit.bench.tracegen import TraceShape, write_trace
from servekit.deployment import Deployment

from .conftest import Engine

MS = 1_000_000
SLO = {"ttft": 30.0, "tpot": 3.0, "e2el": 60.0}


def _stats(prefix: str, values: list[float]) -> dict[str, float | None]:
    arr = np.asarray(values)
    out: dict[str, float | None] = {f"{prefix}_mean_ms": float(np.mean(arr)) if len(arr) else None}
    for p in (50, 90, 99):
        out[f"{prefix}_p{p}_ms"] = float(np.percentile(arr, p)) if len(arr) else None
    return out


def _tokens(row: RequestRow) -> int:
    """Output tokens: the server's usage, else the token frames (TTFT's frame and every gap)."""
    return row.output_tokens if row.output_tokens is not None else len(row.itl_ns) + 1


def _tpot(row: RequestRow) -> float | None:
    n = _tokens(row)
    if row.ttft_ns is None or n <= 1:
        return None
    return (row.latency_ns - row.ttft_ns) / (n - 1) / MS


def recompute(rows: list[RequestRow], clock: float) -> dict[str, float | None]:
    """One run's figures from its rows alone."""
    ok = [r for r in rows if r.error is None and r.ttft_ns is not None]
    duration = max(rows[0].run_duration_s, 1e-9)
    tpots = [t for t in (_tpot(r) for r in ok) if t is not None]
    good = sum(
        1
        for r in ok
        if (r.ttft_ns or 0) / MS <= SLO["ttft"]
        and (_tpot(r) or 0.0) <= SLO["tpot"]
        and r.latency_ns / MS <= SLO["e2el"]
    )
    out_tokens = sum(_tokens(r) for r in ok)
    in_tokens = sum(r.prompt_tokens or 0 for r in ok)
    figures: dict[str, float | None] = {
        "request_throughput": len(ok) / duration,
        "output_throughput": out_tokens / duration,
        "total_token_throughput": (in_tokens + out_tokens) / duration,
        "goodput": good / duration,
        **_stats("ttft", [(r.ttft_ns or 0) / MS for r in ok]),
        **_stats("tpot", tpots),
        **_stats("itl", [g / MS for r in ok for g in r.itl_ns]),
        **_stats("e2el", [r.latency_ns / MS for r in ok]),
    }
    if rows[0].scheduled_ns is not None:
        late = np.asarray([(r.lateness_ns or 0) * clock / MS for r in rows])
        figures["lateness_p50_ms"] = float(np.percentile(late, 50))
        figures["lateness_p99_ms"] = float(np.percentile(late, 99))
        figures["lateness_max_ms"] = float(late.max())
    return figures


@pytest.mark.slow
def test_every_headline_figure_recomputes_exactly_from_requests_jsonl(
    engine: Engine, tmp_path: Path
) -> None:
    trace = write_trace(
        tmp_path / "t.jsonl",
        TraceShape(requests=8, rate=20.0, groups=2, shared_blocks=1, own_blocks=(0, 0), seed=2),
    )
    workloads = [
        ConcurrencySweep(concurrencies=(1, 3), requests=6, input_tokens=24, output_tokens=5),
        RateSweep(rates=(50.0,), requests=6, input_tokens=24, output_tokens=5),
        TraceReplay(path=str(trace), speed=4.0),
    ]
    result = run_workloads(
        Deployment(entry_url=engine.url), workloads, RunSettings(runs=2, slo_ms=SLO)
    )
    out = tmp_path / "out"
    write_outputs(result, out)
    rows = read_rows(out / RECORDS_FILE)
    saved = BenchResult.read(out / "bench.json")
    by_run: dict[tuple[str, str, int], list[RequestRow]] = defaultdict(list)
    for row in rows:
        by_run[(row.workload, row.point, row.run)].append(row)
    checked = 0
    for point in saved.points:
        assert point.errors == 0, point.evidence["error_samples"]
        clock = float(point.params.get("engine_clock", 1.0))
        runs = [recompute(by_run[(point.workload, point.label, i)], clock) for i in range(2)]
        assert (
            sum(len(by_run[(point.workload, point.label, i)]) for i in range(2)) == point.requests
        )
        for name, fig in point.figures.items():
            if name.startswith(("harness_", "prefix_cache_")):
                continue  # the harness's own lag and the engine's counters: not per request
            expected = tuple(r[name] for r in runs if r[name] is not None)
            assert fig.runs == expected, (point.label, name)
            assert fig.median == (float(np.median(expected)) if expected else None)
            checked += 1
    assert checked >= 3 * 20 + 3  # every serving figure of four points, lateness of the trace
    assert all(r.prompt_tokens is not None and r.output_tokens is not None for r in rows)
    trace_rows = [r for r in rows if r.workload == "trace"]
    assert all(r.prompt_tokens == r.trace_input_tokens for r in trace_rows)
    assert all(r.output_tokens == r.trace_output_tokens for r in trace_rows)
    # Positive control: one request 1 ms slower no longer reproduces the saved figure.
    point = saved.points[0]
    first = by_run[(point.workload, point.label, 0)]
    slower = [first[0].model_copy(update={"latency_ns": first[0].latency_ns + MS}), *first[1:]]
    assert recompute(slower, 1.0)["e2el_mean_ms"] != point.figures["e2el_mean_ms"].runs[0]
