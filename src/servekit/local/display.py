"""The rich views of a run: live start-up progress and the ``status`` table.

Both are drawn from a :class:`~servekit.local.state.RunState`, so the foreground
supervisor, the detached ``up`` (which reads ``state.json``) and ``status`` show
the same thing.
"""

from __future__ import annotations

import time
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


def _row(proc: ProcState, now: float, health: str | None) -> list[str]:
    style = PHASE_STYLE.get(proc.phase, "")
    phase = f"[{style}]{proc.phase}[/{style}]" if style else proc.phase
    if proc.exit_code is not None:
        phase += f" (code {proc.exit_code})"
    uptime = "-" if proc.phase == "exited" else _age(proc.started_at, now)
    cells = [proc.name, proc.role, str(proc.port or "-"), str(proc.pid or "-"), phase]
    cells += [health] if health is not None else [proc.detail]
    return [*cells, uptime]


def state_table(state: RunState, health: dict[str, str] | None = None) -> Table:
    """One row per process; ``health`` (name -> text) replaces the detail column."""
    now = time.time()
    title = f"{state.layout} ({state.engine}): {state.phase}"
    table = Table(title=title, title_justify="left")
    last = "health" if health is not None else "detail"
    for column in ("process", "role", "port", "pid", "phase", last, "uptime"):
        table.add_column(column, overflow="fold")
    for proc in state.processes:
        table.add_row(*_row(proc, now, None if health is None else health.get(proc.name, "-")))
    return table


def _view_row(proc: ProcView, now: float) -> list[str]:
    if proc.phase != "exited" and not proc.alive:
        phase = "[red]gone[/red]"
    else:
        style = PHASE_STYLE.get(proc.phase, "")
        phase = f"[{style}]{proc.phase}[/{style}]" if style else proc.phase
    if proc.exit_code is not None:
        phase += f" (code {proc.exit_code})"
    uptime = _age(proc.started_at, now) if proc.alive else "-"
    health = proc.health if proc.health is not None else "-"
    return [
        proc.name,
        proc.role,
        str(proc.port or "-"),
        str(proc.pid or "-"),
        phase,
        health,
        uptime,
    ]


def view_table(view: RunView) -> Table:
    """``servekit status``: one row per process, with what is true now (alive, health)."""
    now = time.time()
    style = RUN_STYLE.get(view.phase, "")
    phase = f"[{style}]{view.phase}[/{style}]" if style else view.phase
    table = Table(title=f"{view.layout} ({view.engine}): {phase}", title_justify="left")
    for column in ("process", "role", "port", "pid", "phase", "health", "uptime"):
        table.add_column(column, overflow="fold")
    for proc in view.processes:
        table.add_row(*_view_row(proc, now))
    return table


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
