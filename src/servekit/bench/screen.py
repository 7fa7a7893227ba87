"""A benchmark result on the terminal: the report section's tables, fitted to the width.

``bench.md`` and ``bench.json`` keep every table whole; here each table goes
through :func:`servekit.termtable.fit_tables`, so an 80-column terminal shows
transposed or split tables instead of columns cut to ``re…``.
"""

from __future__ import annotations

from rich.console import Console

from servekit.bench.baseline import compare, not_compared
from servekit.bench.report import TITLES, delta_grid, grouped, workload_grid
from servekit.bench.schema import BenchResult
from servekit.termtable import fit_tables


def print_result(console: Console, result: BenchResult, baseline: BenchResult | None) -> None:
    """Print what :func:`servekit.bench.report.render_section` says, fitted to the console."""
    inp = result.inputs
    console.print(
        f"[bold]Benchmarks[/bold]: {inp.target} ({inp.engine}, model {inp.model}), "
        f"{inp.settings.runs} runs per figure, median (min-max); measured {result.created} "
        f"by {inp.harness}. Definitions: docs/bench.md.",
        highlight=False,
    )
    if inp.note:
        console.print(f"Note: {inp.note}", highlight=False)
    for workload, points in grouped(result).items():
        header, rows = workload_grid(points)
        for table in fit_tables(console, header, rows, title=TITLES.get(workload, workload)):
            console.print(table)
    if baseline is not None:
        changes = compare(baseline, result)
        title = f"Against the baseline ({baseline.created})"
        for why in not_compared(baseline):
            console.print(f"not compared (definitions differ): {why}", highlight=False)
        if not changes:
            console.print(f"{title}: no figure in common with the baseline.")
            return
        for table in fit_tables(console, *delta_grid(changes), title=title):
            console.print(table)
