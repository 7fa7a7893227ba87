"""A rich progress display for a benchmark run (used by the CLI).

Workloads report (what, runs done, runs total); each distinct ``what`` gets
its own bar, so a long sweep shows where it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TimeElapsedColumn

from servekit.bench.context import ProgressFn


@contextmanager
def rich_progress(console: Console | None = None) -> Iterator[ProgressFn]:
    """Yield a progress callback drawing one bar per point."""
    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    tasks: dict[str, TaskID] = {}

    def update(what: str, done: int, total: int) -> None:
        if what not in tasks:
            tasks[what] = progress.add_task(what, total=total)
        progress.update(tasks[what], completed=done, total=total)

    with progress:
        yield update
