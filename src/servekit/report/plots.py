"""The benchmark plots of a verify run, as files beside the evidence and inline in the page.

bench draws its plots (:func:`servekit.bench.plots.write_plots`: throughput
against load, latency distributions) from ``bench/bench.json``; the report
writes them to ``bench/plots/`` (so they are evidence with a checksum, and the
Markdown report links them) and embeds each in ``report.html`` as a base64 PNG
``data:`` URI, so the page stays one self-contained file. A plot is drawn from
the run's files alone, so rebuilding the report rewrites the same bytes.
"""

from __future__ import annotations

import base64
from pathlib import Path

from servekit.bench import TITLES, BenchResult, write_plots
from servekit.report.view import Plot

PLOTS_DIR = "bench/plots"
LATENCY = "_latency"
GOODPUT = "_goodput"


def plot_title(stem: str) -> str:
    """``rate_sweep_latency`` -> ``Request-rate sweep: latency distribution per point``."""
    if stem.endswith(LATENCY):
        workload = stem.removesuffix(LATENCY)
        return f"{TITLES.get(workload, workload)}: latency distribution per point"
    if stem.endswith(GOODPUT):
        workload = stem.removesuffix(GOODPUT)
        return f"{TITLES.get(workload, workload)}: goodput (requests meeting every SLO) per point"
    return f"{TITLES.get(stem, stem)}: throughput against load"


def report_plots(run_dir: Path, bench: BenchResult, source: str = "") -> tuple[Plot, ...]:
    """Draw every plot that applies into ``run_dir/bench/plots``; one :class:`Plot` each.

    ``source`` (`` (simulated at 10x speed)``, `` (real engines)``) goes into each
    title, so a plot says where its figures came from as the table rows do.
    """
    paths = write_plots(bench, run_dir / PLOTS_DIR)
    return tuple(
        Plot(
            title=plot_title(path.stem) + source,
            href=path.relative_to(run_dir).as_posix(),
            data_uri="data:image/png;base64," + base64.b64encode(path.read_bytes()).decode(),
        )
        for path in paths
    )
