"""The rich views of a run: live start-up progress and the ``status`` table.

Both are drawn from a :class:`~servekit.local.state.RunState`, so the foreground
supervisor, the detached ``up`` (which reads ``state.json``) and ``status`` show
the same thing.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from types import TracebackType

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from servekit.local.runview import ProcView, RunView
from servekit.local.state import ProcState, RunState

PHASE_STYLE = {"pending": "dim", "starting": "yellow", "ready": "green", "exited": "red"}
RUN_STYLE = {"ready": "green", "starting": "yellow", "unsupervised": "red", "dead": "red"}


def _age(since: float | None, now: float) -> str:
    if since is None:
        return "-"
    seconds = int(now - since)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _styled(text: str, styles: dict[str, str]) -> str:
    style = styles.get(text, "")
    return f"[{style}]{text}[/{style}]" if style else text


def _cells(proc: ProcState | ProcView, phase: str, last: str, uptime: str) -> list[str]:
    """A process's row: name, role, port, pid, phase (with its exit code), ``last``, uptime."""
    if proc.exit_code is not None:
        phase += f" (code {proc.exit_code})"
    return [proc.name, proc.role, str(proc.port or "-"), str(proc.pid or "-"), phase, last, uptime]


def _table(title: str, last: str, rows: Iterable[list[str]]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("process", "role", "port", "pid", "phase", last, "uptime"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def state_table(state: RunState) -> Table:
    """One row per process, as the run's state records it (the start-up view)."""
    now = time.time()
    rows = (
        _cells(
            p,
            _styled(p.phase, PHASE_STYLE),
            p.detail,
            "-" if p.phase == "exited" else _age(p.started_at, now),
        )
        for p in state.processes
    )
    return _table(f"{state.layout} ({state.engine}): {state.phase}", "detail", rows)


def view_table(view: RunView) -> Table:
    """``servekit status``: one row per process, with what is true now (alive, health)."""
    now = time.time()
    rows = (
        _cells(
            p,
            _styled(p.phase, PHASE_STYLE) if p.phase == "exited" or p.alive else "[red]gone[/red]",
            p.health if p.health is not None else "-",
            _age(p.started_at, now) if p.alive else "-",
        )
        for p in view.processes
    )
    return _table(
        f"{view.layout} ({view.engine}): {_styled(view.phase, RUN_STYLE)}", "health", rows
    )


class ProgressView:
    """A live table that redraws whenever the supervisor reports a change."""

    def __init__(self, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True)
        self._live: Live | None = None

    def __enter__(self) -> ProgressView:
        self._live = Live(console=self._console, refresh_per_second=4, transient=False)
        self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)
            self._live = None

    def close(self) -> None:
        """Stop redrawing (the last table stays on screen)."""
        self.__exit__(None, None, None)

    def update(self, *states: RunState) -> None:
        """Redraw with one table per run."""
        if self._live is not None:
            self._live.update(Group(*(state_table(s) for s in states)))
