"""Each bench plot file gets the title of what it draws (the HTML report's captions)."""

from __future__ import annotations

from servekit.report.plots import plot_title


def test_plot_titles_name_the_workload_and_the_figure() -> None:
    assert plot_title("rate_sweep") == "Request-rate sweep: throughput against load"
    assert plot_title("trace_latency") == "Trace replay: latency distribution per point"
    assert plot_title("trace_goodput") == (
        "Trace replay: goodput (requests meeting every SLO) per point"
    )
    assert plot_title("concurrency_sweep_goodput").startswith("Concurrency sweep: goodput")
