"""``servekit bench`` on an 80-column terminal: tables fit, nothing is cut to ``re…``."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from servekit.bench.config import RateSweep, RunSettings
from servekit.bench.progress import planned_runs, rich_progress
from servekit.bench.report import workload_grid
from servekit.bench.runner import run_workloads
from servekit.bench.schema import BenchResult
from servekit.bench.screen import print_result
from servekit.deployment import Deployment
from servekit.sim.testing import running_sim

SPEC = {"endpoints": [{"name": "e0", "port": 0, "role": "mixed", "served_model_name": "m"}]}


@pytest.fixture(scope="module")
def rate_result() -> BenchResult:
    sweep = RateSweep(rates=(4.0, 8.0, 16.0), requests=6, input_tokens=32, output_tokens=4)
    with running_sim(SPEC) as sim:
        dep = Deployment(entry_url=sim.url, model="m")
        return run_workloads(dep, [sweep], RunSettings(runs=1, warmup=0))


@pytest.mark.slow
def test_the_rate_sweep_fits_80_columns_with_every_figure_whole(rate_result: BenchResult) -> None:
    console = Console(width=80, file=io.StringIO(), color_system=None)
    print_result(console, rate_result, baseline=rate_result)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    header, rows = workload_grid(rate_result.points)
    for cell in [*header, *(c for row in rows for c in row)]:
        assert cell in out, cell
    assert "Against the baseline" in out


def test_the_overall_bar_counts_every_planned_run_and_estimates_the_rest() -> None:
    sweep = RateSweep(rates=(4.0, 8.0), requests=4, input_tokens=32, output_tokens=4)
    total = planned_runs([sweep], runs=2)
    assert total == 4
    console = Console(width=100, file=io.StringIO(), color_system=None)
    with rich_progress(console, total=total) as progress:
        progress("rate_sweep rate=4/s", 1, 2)
        progress("rate_sweep rate=4/s", 2, 2)
        progress("rate_sweep rate=4/s", 3, 2)  # a retry past the planned runs counts once
        progress("rate_sweep rate=8/s", 2, 2)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    first = out.splitlines()[0]
    assert first.startswith("bench: finished in") and "4/4" in first and "done" in first
