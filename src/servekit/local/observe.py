"""Looking at runs: ``servekit status`` (live health per process) and ``servekit logs``.

Both read the run directory only (``state.json``, ``launch.json``, ``logs/``);
neither touches the processes.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from servekit.deployment import run_dir_for, runs_root
from servekit.errors import UsageError
from servekit.local import procs
from servekit.local.display import state_table
from servekit.local.readiness import ReadyTarget, probe_all
from servekit.local.rundir import RunDir
from servekit.local.state import RunState, pid_alive, read_state

POLL_S = 0.5


def _live_health(state: RunState) -> dict[str, str]:
    targets = [ReadyTarget(p.name, p.url, None) for p in state.processes if p.url is not None]
    if not targets:
        return {}
    results = asyncio.run(probe_all(targets, timeout_s=2.0))
    return {
        t.process: ("ok" if r.ready else r.detail) for t, r in zip(targets, results, strict=True)
    }


def status(name: str | None, console: Console) -> int:
    """Print a table per run: process, port, pid, phase, live health, uptime."""
    runs = (
        [RunDir(run_dir_for(name))]
        if name
        else [RunDir(p.parent) for p in sorted(runs_root().glob("*/state.json"))]
    )
    shown = 0
    for run in runs:
        state = read_state(run.state)
        if state is None:
            continue
        shown += 1
        supervisor = "alive" if pid_alive(state.supervisor_pid) else "gone"
        health = _live_health(state) if state.phase in ("ready", "starting") else None
        console.print(state_table(state, health))
        console.print(f"supervisor pid {state.supervisor_pid} ({supervisor}); records: {run.root}")
        if state.message:
            console.print(f"last event: {state.message}")
    if not shown:
        raise UsageError(f"no runs under {runs_root()}; start one with: servekit up NAME")
    return 0


def find_log(process: str, name: str | None) -> Path:
    """The log of ``process`` in the named run, or in the only run that has it."""
    runs = (
        [RunDir(run_dir_for(name))]
        if name
        else [RunDir(p.parent) for p in sorted(runs_root().glob("*/launch.json"))]
    )
    hits = [r for r in runs if (r.log_of(process)).is_file()]
    if len(hits) == 1:
        return hits[0].log_of(process)
    if len(hits) > 1:
        names = ", ".join(r.root.name.replace("__", "/") for r in hits)
        raise UsageError(
            f"process {process!r} exists in several runs ({names}); pick one with --layout"
        )
    known = sorted({p.stem for r in runs for p in r.logs.glob("*.log")})
    raise UsageError(
        f"no log for process {process!r}; known processes: {', '.join(known) or 'none'}"
    )


def logs(
    process: str, name: str | None, lines: int, follow: bool, out: Callable[[str], None]
) -> None:
    """Print the last ``lines`` of one process log; with ``follow``, keep printing."""
    path = find_log(process, name)
    for line in procs.tail(path, lines):
        out(line)
    if not follow:
        return
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        while True:
            chunk = fh.readline()
            if chunk:
                out(chunk.decode("utf-8", errors="replace").rstrip("\n"))
            else:
                time.sleep(POLL_S)
