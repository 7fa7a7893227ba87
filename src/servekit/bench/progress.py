"""The progress display of a benchmark run (used by the CLI).

Workloads report (what, runs done, runs total); each distinct ``what`` gets its
own bar, and one overall bar above them (:class:`servekit.progress.Overall`)
counts every run of every point the workloads plan (:func:`planned_runs`), with
the time spent and an estimate of the time left.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from rich.console import Console
from rich.progress import Progress, TaskID

from servekit.bench.config import (
    ConcurrencySweep,
    MultiStream,
    Prefill,
    RateSweep,
    SingleStream,
    WorkloadSpec,
)
from servekit.bench.context import ProgressFn
from servekit.progress import Overall, overall_columns

TITLE = "bench"


def points_of(spec: WorkloadSpec) -> int:
    """How many points a workload measures (each measured ``runs`` times)."""
    if isinstance(spec, SingleStream):
        return 1
    if isinstance(spec, MultiStream | Prefill):
        return len(spec.streams)
    if isinstance(spec, RateSweep):
        return len(spec.rates)
    if isinstance(spec, ConcurrencySweep):
        return len(spec.concurrencies)
    return 0  # KV capacity reads a figure; it reports no runs


def planned_runs(workloads: Sequence[WorkloadSpec], runs: int) -> int:
    """Every run the workloads will report, the overall bar's total."""
    return sum(points_of(w) for w in workloads) * runs


@contextmanager
def rich_progress(console: Console | None = None, total: int = 0) -> Iterator[ProgressFn]:
    """Yield a progress callback drawing one bar per point and, with ``total``, an overall bar."""
    progress = Progress(*overall_columns(), console=console, transient=False)
    whole = Overall(progress, progress.add_task(TITLE, total=total), TITLE) if total else None
    tasks: dict[str, TaskID] = {}
    counted: dict[str, int] = {}

    def update(what: str, done: int, total: int) -> None:
        if what not in tasks:
            tasks[what] = progress.add_task(what, total=total)
        progress.update(tasks[what], completed=done, total=total)
        if whole is not None:
            now = min(done, total)
            whole.advance(max(0, now - counted.get(what, 0)), what=what)
            counted[what] = max(now, counted.get(what, 0))

    with progress:
        yield update
        if whole is not None:
            whole.finish()
