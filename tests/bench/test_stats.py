"""Serving metrics and run summaries on records with known stamps."""

from __future__ import annotations

import numpy as np

from servekit.bench.stats import figure, per_request, serving_metrics, stream_rates, tpot_ms
from servekit.client import RequestRecord, Usage

MS = 1_000_000


def record(
    start_ms: float, token_ms: list[float], out: int | None = None, **kw: object
) -> RequestRecord:
    usage = Usage(prompt_tokens=10, completion_tokens=out) if out is not None else None
    return RequestRecord(
        kind="completion",
        method="POST",
        url="http://x/v1/completions",
        request_body="{}",
        stream=True,
        status=200,
        t_start_ns=int(start_ms * MS),
        t_end_ns=int((token_ms[-1] if token_ms else start_ms) * MS) + 1,
        token_times_ns=tuple(int(t * MS) for t in token_ms),
        usage=usage,
        **kw,
    )


def test_figure_is_median_with_min_max_and_skips_missing_runs() -> None:
    fig = figure([3.0, None, 1.0, 2.0], "tok/s", "m")
    assert fig.median == 2.0 and fig.min == 1.0 and fig.max == 3.0
    assert fig.runs == (3.0, 1.0, 2.0) and fig.unit == "tok/s"
    empty = figure([None], "ms")
    assert empty.median is None and empty.runs == ()


def test_vllm_definitions_of_ttft_itl_tpot_e2el() -> None:
    # Started at 0; tokens at 10, 12, 16 ms; usage says 3 output tokens.
    rec = record(0, [10, 12, 16], out=3)
    assert rec.ttft_ns == 10 * MS
    assert rec.itl_ns == [2 * MS, 4 * MS]
    assert rec.latency_ns == 16 * MS
    assert tpot_ms(rec) == 3.0  # (16 - 10) / (3 - 1)


def test_serving_metrics_percentiles_throughputs_and_goodput() -> None:
    recs = [record(0, [10, 12, 16], out=3), record(0, [20, 30], out=2), record(0, [5], out=1)]
    failed = record(0, [], error="HTTP 500", error_kind="http")
    m = serving_metrics([*recs, failed], duration_s=2.0, prompt_tokens=99, slo_ms={"ttft": 15})
    assert m["completed"] == 3 and m["failed"] == 1
    assert m["request_throughput"] == 1.5
    assert m["output_throughput"] == 3.0  # (3 + 2 + 1) / 2 s
    assert m["total_token_throughput"] == (30 + 6) / 2.0  # usage prompt_tokens = 10 each
    assert m["ttft_p50_ms"] == 10.0
    assert m["ttft_p99_ms"] == float(np.percentile([10, 20, 5], 99))
    assert m["itl_p50_ms"] == float(np.percentile([2, 4, 10], 50))
    assert m["tpot_mean_ms"] == (3.0 + 10.0) / 2  # 1-token output has no TPOT
    assert m["e2el_p50_ms"] == 16.0
    # ttft <= 15 ms: the first and third requests are good.
    assert m["goodput"] == 1.0


def test_goodput_absent_without_slos_and_tpot_zero_for_one_token() -> None:
    recs = [record(0, [5], out=1)]
    assert serving_metrics(recs, 1.0, 1, {})["goodput"] is None
    assert serving_metrics(recs, 1.0, 1, {"tpot": 0.001})["goodput"] == 1.0


def test_stream_rates_per_stream_tokens_and_step_time() -> None:
    # 5 tokens in 3 frames (speculative: 1, then 2, then 2) over 20 ms.
    rec = record(0, [10, 20, 30], out=5)
    rates, steps = stream_rates([rec])
    assert rates == [4 / 0.020]
    assert steps == [10.0]


def test_per_request_lists_for_distributions() -> None:
    out = per_request([record(0, [10, 12, 16], out=3)])
    assert out == {"ttft_ms": [10.0], "tpot_ms": [3.0], "e2el_ms": [16.0]}


def test_frames_that_arrived_together_give_no_window_instead_of_a_crash() -> None:
    from servekit.bench.workloads.multi_stream import batch_figures

    rec = record(0, [10, 10, 10], out=3)
    assert stream_rates([rec]) == ([], [])
    ev = batch_figures([rec])
    assert ev["per_stream_tok_per_s"] is None and ev["total_tok_per_s"] is None
    assert ev["ms_per_step"] is None and ev["ttft_p50_ms"] == 10.0
