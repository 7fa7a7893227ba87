"""One overall progress bar with an estimate of the time left, for long runs.

accept, bench and verify run for minutes; this shows how far the whole job is,
what runs now, the time spent and an estimate of the time left. The API is
three calls::

    from servekit.progress import overall

    with overall("bench", total=12, console=console) as bar:
        bar.advance(what="multi_stream N=4")   # one unit done, now doing that
        bar.advance(2)                          # two more units done
        bar.add_total(3)                        # the job turned out bigger

A display that already has bars (bench's per-point bars) makes its own handle:
``Overall(progress, progress.add_task(title, total=n), title)`` on a
``Progress(*overall_columns())``, then ``finish()`` when the job ends.

``total`` is in any unit the caller counts (runs, checks, steps); a unit should
cost roughly the same as another, since the estimate is the mean time per
unit so far times the units left (:func:`estimate_left`). Before the first unit
ends it says "estimating". ``overall`` accepts ``console=None`` (stderr) and
``enabled=False`` (draw nothing: tests, ``--json`` output) without changing
the caller's code.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TimeElapsedColumn,
)
from rich.text import Text


def estimate_left(elapsed_s: float, done: float, total: float) -> float | None:
    """Seconds left at the mean pace so far; None before anything is done."""
    if done <= 0 or elapsed_s <= 0:
        return None
    return max(0.0, total - done) * elapsed_s / done


def clock(seconds: float) -> str:
    """``1h02m``, ``4m05s`` or ``12s``."""
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class LeftColumn(ProgressColumn):
    """``~4m05s left`` from :func:`estimate_left`; ``estimating`` before the first unit."""

    def render(self, task: Task) -> Text:
        if task.finished:
            return Text("done", style="green")
        left = estimate_left(task.elapsed or 0.0, task.completed, task.total or 0.0)
        return Text("estimating" if left is None else f"~{clock(left)} left", style="cyan")


class Overall:
    """The handle ``overall`` yields: advance, retitle, grow the total."""

    def __init__(self, progress: Progress, task: TaskID, title: str) -> None:
        self._progress = progress
        self._task = task
        self._title = title
        self._started = time.monotonic()

    def advance(self, by: float = 1.0, what: str | None = None) -> None:
        """``by`` units are done; ``what`` (if given) is what runs now."""
        self._progress.advance(self._task, by)
        if what is not None:
            self.doing(what)

    def doing(self, what: str) -> None:
        """Show what runs now, without advancing."""
        self._progress.update(self._task, description=f"{self._title}: {what}")

    def add_total(self, units: float) -> None:
        """The job has ``units`` more to do than announced."""
        task = self._progress.tasks[self._task]
        self._progress.update(self._task, total=(task.total or 0.0) + units)

    def finish(self) -> None:
        """Say the job ended and how long it took (the bar stays on screen)."""
        took = clock(time.monotonic() - self._started)
        self._progress.update(self._task, description=f"{self._title}: finished in {took}")

    @property
    def completed(self) -> float:
        return self._progress.tasks[self._task].completed

    @property
    def total(self) -> float:
        return self._progress.tasks[self._task].total or 0.0


def overall_columns() -> tuple[ProgressColumn | str, ...]:
    """The columns of an overall bar (bench adds its per-point bars to the same display)."""
    return (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        LeftColumn(),
    )


@contextmanager
def overall(
    title: str, total: float, console: Console | None = None, enabled: bool = True
) -> Iterator[Overall]:
    """Draw one bar for a job of ``total`` units until the block ends."""
    progress = Progress(
        *overall_columns(),
        console=console or Console(stderr=True),
        transient=False,
        disable=not enabled,
    )
    bar = Overall(progress, progress.add_task(title, total=total), title)
    with progress:
        yield bar
        bar.finish()
