"""A run as it is now: the recorded state checked against the live processes.

``servekit status`` prints it as a table and ``status --json`` as a document for
scripts (:class:`RunView`); both come from :func:`run_view`, which reads
``state.json`` and ``launch.json``, asks every endpoint's ``/health`` and checks
whether the supervisor and each process still run.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import Field

from servekit.client import ReadyTarget, probe_all
from servekit.local.rundir import RunDir
from servekit.local.runspec import RunSpec
from servekit.local.state import (
    RunState,
    SeenPhase,
    proc_alive,
    seen_phase,
    supervisor_alive,
)
from servekit.vocabulary import StrictModel


def _live_health(state: RunState) -> dict[str, str]:
    targets = [ReadyTarget(p.name, p.url, None) for p in state.processes if p.url is not None]
    if not targets:
        return {}
    results = asyncio.run(probe_all(targets, timeout_s=2.0))
    return {
        t.process: ("ok" if r.ready else r.detail) for t, r in zip(targets, results, strict=True)
    }


class ProcView(StrictModel):
    """One process of a run as ``status --json`` shows it."""

    name: str
    role: str
    url: str | None
    port: int | None
    pid: int | None
    alive: bool
    phase: str
    exit_code: int | None
    started_at: float | None
    health: str | None = Field(description="live /health answer ('ok'), or None when not asked")
    log: Path


class RunView(StrictModel):
    """One run as ``status --json`` shows it: the recorded state and what is true now."""

    layout: str
    engine: str
    phase: SeenPhase = Field(description="recorded phase, or unsupervised/dead after a kill")
    recorded_phase: str
    entry_url: str | None
    supervisor_pid: int
    supervisor_alive: bool
    started_at: float
    ready_at: float | None
    message: str
    run_dir: Path
    processes: tuple[ProcView, ...]


def run_view(run: RunDir, state: RunState) -> RunView:
    """What is true of a run now: its supervisor, its processes and their live health."""
    phase = seen_phase(state)
    health = _live_health(state) if phase in ("ready", "starting", "unsupervised") else {}
    procs_now = tuple(
        ProcView(
            name=p.name,
            role=p.role,
            url=p.url,
            port=p.port,
            pid=p.pid,
            alive=proc_alive(p),
            phase=p.phase,
            exit_code=p.exit_code,
            started_at=p.started_at,
            health=health.get(p.name),
            log=p.log,
        )
        for p in state.processes
    )
    return RunView(
        layout=state.layout,
        engine=state.engine,
        phase=phase,
        recorded_phase=state.phase,
        entry_url=state.entry_url or _entry_from_launch(run),
        supervisor_pid=state.supervisor_pid,
        supervisor_alive=supervisor_alive(state),
        started_at=state.started_at,
        ready_at=state.ready_at,
        message=state.message,
        run_dir=run.root,
        processes=procs_now,
    )


def _entry_from_launch(run: RunDir) -> str | None:
    """The entry URL from launch.json, for runs recorded before state.json carried it."""
    try:
        return RunSpec.model_validate_json(run.launch.read_text()).entry_url
    except (OSError, ValueError, KeyError):
        return None
