"""The user's verbs: up (foreground or detached), down, status, logs.

``up`` prepares the run (all checks first, so bad input starts nothing), then
either supervises in this process or starts :mod:`servekit.local.daemon` in its
own session and follows ``state.json`` until the run is ready or has failed.
``down`` asks the supervisor to stop (SIGTERM) and, if it is gone, stops the
recorded process groups itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from rich.console import Console

from servekit import procgroup
from servekit.deployment import run_roots
from servekit.errors import UsageError
from servekit.local import procs
from servekit.local.display import ProgressView
from servekit.local.observe import runs_of
from servekit.local.rundir import RunDir
from servekit.local.runspec import RunSpec
from servekit.local.state import (
    RunState,
    foreign_note,
    pid_alive,
    proc_alive,
    read_state,
    state_or_why,
    supervisor_alive,
    write_state,
)
from servekit.local.supervisor import EXIT_FAILED, Supervisor

POLL_S = 0.5
EXIT_INTERRUPTED = 130


def summary(spec: RunSpec) -> str:
    """What to tell the user once everything answers."""
    speed = f" at {spec.sim_speed:g}x speed" if spec.sim_speed not in (None, 1.0) else ""
    return (
        f"{spec.layout} is ready ({spec.engine}{speed}): {spec.entry_url} serves {spec.model!r}\n"
        f"run records: {spec.run_dir} (deployment.json, plan.json, logs/)"
    )


def say_notes(spec: RunSpec, console: Console) -> None:
    """What preparing the run did on the user's behalf, one line each."""
    for line in spec.notes:
        console.print(line, highlight=False, soft_wrap=True, markup=False)


def up_foreground(spec: RunSpec, console: Console, ready_timeout_s: float) -> int:
    """Supervise here until Ctrl-C, ``servekit down`` or a death."""
    say_notes(spec, console)
    with ProgressView(console) as view:
        supervisor = Supervisor(spec, on_change=view.update, ready_timeout_s=ready_timeout_s)

        def ready(_: RunState) -> None:
            view.close()
            console.print(summary(spec))
            console.print("supervising; Ctrl-C or 'servekit down' stops everything")

        code = supervisor.run(on_ready=ready)
    if code != 0:
        console.print(f"[red]{spec.layout} failed:[/red] {supervisor.state.message}")
    else:
        console.print(f"{spec.layout} stopped ({supervisor.state.message}); nothing left running")
    return code


def start_detached(spec: RunSpec, ready_timeout_s: float) -> subprocess.Popen[bytes]:
    """Start the background supervisor of a prepared run (it reads launch.json)."""
    run = RunDir(spec.run_dir)
    argv = [sys.executable, "-m", "servekit.local.daemon", str(run.root), str(ready_timeout_s)]
    with open(run.supervisor_log, "ab") as log:
        return procgroup.start_detached(argv, stdout=log, cwd=spec.cwd)


def _current(spec: RunSpec, daemon: subprocess.Popen[bytes]) -> RunState | None:
    state = read_state(RunDir(spec.run_dir).state)
    return state if state is not None and state.supervisor_pid == daemon.pid else None


def _settled(state: RunState | None, daemon: subprocess.Popen[bytes]) -> bool:
    if state is not None and state.phase in ("ready", "failed", "stopped"):
        return True
    return daemon.poll() is not None


def follow(
    runs: list[tuple[RunSpec, subprocess.Popen[bytes]]], update: Callable[..., None]
) -> list[RunState | None]:
    """Poll each run's state.json until every run is ready or over (or its daemon is gone)."""
    while True:
        states = [_current(spec, daemon) for spec, daemon in runs]
        update(*(s for s in states if s is not None))
        if all(_settled(s, d) for s, (_, d) in zip(states, runs, strict=True)):
            return [_current(spec, daemon) for spec, daemon in runs]
        time.sleep(POLL_S)


def report_detached(
    spec: RunSpec, daemon: subprocess.Popen[bytes], state: RunState | None, console: Console
) -> int:
    """Say how a detached start ended: 0 when ready, else the reason and EXIT_FAILED."""
    if state is not None and state.phase == "ready":
        console.print(summary(spec))
        console.print(
            f"supervisor pid {daemon.pid} keeps watching; stop with: servekit down {spec.layout}"
        )
        return 0
    with contextlib.suppress(subprocess.TimeoutExpired):
        daemon.wait(timeout=60.0)
    if state is None:
        tail = "\n".join(procs.tail(RunDir(spec.run_dir).supervisor_log, 15))
        console.print(f"[red]{spec.layout}: the supervisor exited early[/red]\n{tail}")
    else:
        console.print(f"[red]{spec.layout} failed:[/red] {state.message}")
    return EXIT_FAILED


def up_detached(spec: RunSpec, console: Console, ready_timeout_s: float) -> int:
    """Start the background supervisor, show progress, return once ready (0) or failed."""
    say_notes(spec, console)
    daemon: subprocess.Popen[bytes] | None = None
    try:
        daemon = start_detached(spec, ready_timeout_s)
        with ProgressView(console) as view:
            (state,) = follow([(spec, daemon)], view.update)
    except KeyboardInterrupt:
        if daemon is not None:
            _stop_supervisor(daemon.pid, timeout_s=60.0)
        console.print(f"{spec.layout}: start-up interrupted; stopped")
        return EXIT_INTERRUPTED
    return report_detached(spec, daemon, state, console)


def _stop_supervisor(pid: int, timeout_s: float) -> bool:
    """SIGTERM the supervisor and wait for it to finish its teardown."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not pid_alive(pid)


def active_runs() -> list[RunDir]:
    """Run directories (in every root) whose state says something may still be running."""
    found = []
    for run in runs_of(None):
        state = state_or_why(run.state)
        if isinstance(state, str) or (
            state is not None and state.phase not in ("failed", "stopped")
        ):
            found.append(run)  # an unreadable record may hide live processes
    return found


def stop_run(run: RunDir, timeout_s: float = 60.0) -> str:
    """Stop one run: through its supervisor, or directly if the supervisor is gone."""
    found = state_or_why(run.state)
    if isinstance(found, str):
        return _set_aside(run, found)
    state = found
    if state is None:
        return f"{run.root.name}: nothing recorded"
    stopped_cleanly = False
    if supervisor_alive(state):
        stopped_cleanly = _stop_supervisor(state.supervisor_pid, timeout_s)
    # Only processes that are provably this run's (pid and start time as recorded at
    # spawn) are signalled: a pid reused after a reboot or a wrap is someone else's.
    leftovers = {p.pid for p in state.processes if p.pid is not None and proc_alive(p)}
    note = foreign_note(state)
    survivors = procs.stop_group_pids(leftovers) if leftovers else set()
    if survivors:
        return f"{state.layout}: could not stop pids {sorted(survivors)}{note}"
    if not stopped_cleanly:
        shutil.rmtree(run.scratch, ignore_errors=True)
        run.deployment.unlink(missing_ok=True)
        _record_stopped(run, state)
    return f"{state.layout}: stopped{note}"


def _set_aside(run: RunDir, why: str) -> str:
    """An unreadable state.json: keep it as evidence under another name, clear the record."""
    kept = run.state.with_name(f"state.json.unreadable-{int(time.time())}")
    os.replace(run.state, kept)
    return (
        f"{run.root.name}: {why}; kept as {kept.name}. Its processes could not be listed: "
        f"if any still run, stop them by hand (their logs are under {run.logs})"
    )


def _record_stopped(run: RunDir, state: RunState) -> None:
    """Say in state.json that ``down`` stopped a run whose supervisor was gone."""
    if state.phase in ("failed", "stopped"):
        return
    procs_now = [
        p.model_copy(update={"phase": "exited"}) if p.phase != "exited" else p
        for p in state.processes
    ]
    message = f"stopped by servekit down; its supervisor (pid {state.supervisor_pid}) was gone"
    if state.message:
        message += f"; before that: {state.message}"
    write_state(
        run.state,
        state.model_copy(update={"phase": "stopped", "message": message, "processes": procs_now}),
    )


def down(name: str | None) -> list[str]:
    """Stop the named run, or every active run when no name is given."""
    if name is not None:
        runs = [r for r in runs_of(name) if r.state.exists()]
        if not runs:
            where = ", ".join(str(r) for r in run_roots())
            raise UsageError(f"{name} has no run under {where}; nothing to stop")
        return [stop_run(r) for r in runs]
    runs = active_runs()
    return [stop_run(r) for r in runs] or ["nothing running"]
