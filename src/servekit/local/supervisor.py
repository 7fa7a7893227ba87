"""The supervisor: start a RunSpec's processes, wait until ready, watch, tear down.

One loop, one thread. Signals (Ctrl-C, SIGTERM from ``servekit down``, SIGHUP)
only set a flag that the loop checks, so teardown always runs in one place:
every process group gets SIGTERM then SIGKILL, the scratch folder goes, and
``state.json`` says how the run ended. A process that exits on its own is a
failure: the run is torn down and the supervisor exits non-zero, naming the
process, its exit code and its last log lines.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from collections.abc import Callable
from types import FrameType

from servekit.client import ReadyTarget, probe_all
from servekit.deployment import Deployment, Endpoint
from servekit.local import procs
from servekit.local.rundir import RunDir, versions
from servekit.local.runspec import RunSpec
from servekit.local.state import ProcState, RunState, start_ticks, write_state
from servekit.vocabulary import atomic_write_text

TICK_S = 0.5
EXIT_FAILED = 1
LOG_LINES = 15


class Stop(Exception):
    """The loop must end: ``reason`` says why, ``failed`` whether it is an error."""

    def __init__(self, reason: str, failed: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.failed = failed


def death_report(child: procs.Child, lines: int = LOG_LINES) -> str:
    """'<name> exited with code N' plus the last lines of its log."""
    code = child.exit_code()
    how = f"code {code}"
    if code is not None and code < 0:
        how += f" (killed by {signal.Signals(-code).name})"
    tail = "\n".join(f"  | {line}" for line in procs.tail(child.log, lines))
    return f"process {child.name} exited with {how}; last lines of {child.log}:\n{tail}"


class Supervisor:
    """Runs one RunSpec until it is stopped or something dies."""

    def __init__(
        self,
        spec: RunSpec,
        on_change: Callable[[RunState], None] | None = None,
        ready_timeout_s: float = 600.0,
        grace_s: float = 10.0,
    ) -> None:
        self.spec = spec
        self.dir = RunDir(spec.run_dir)
        self.on_change = on_change
        self.ready_timeout_s = ready_timeout_s
        self.grace_s = grace_s
        self.children: list[procs.Child] = []
        self._stop_signal: str | None = None
        self.state = RunState(
            layout=spec.layout,
            engine=spec.engine,
            supervisor_pid=os.getpid(),
            supervisor_start=start_ticks(os.getpid()),
            entry_url=spec.entry_url,
            started_at=time.time(),
            processes=[
                ProcState(name=x.name, role=x.role, kind=x.kind, url=x.url, port=x.port, log=x.log)
                for x in spec.launches
            ],
        )

    # -- state ---------------------------------------------------------------
    def _publish(self) -> None:
        write_state(self.dir.state, self.state)
        if self.on_change is not None:
            self.on_change(self.state)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._stop_signal = signal.Signals(signum).name

    def _check(self) -> None:
        if self._stop_signal is not None:
            raise Stop(f"stopped by {self._stop_signal}", failed=False)
        dead = procs.first_dead(self.children)
        if dead is not None:
            proc = self.state.proc(dead.name)
            proc.phase, proc.exit_code = "exited", dead.exit_code()
            raise Stop(death_report(dead), failed=True)

    # -- phases --------------------------------------------------------------
    def _start_all(self) -> None:
        for launch in self.spec.launches:
            child = procs.spawn(launch.name, launch.argv, launch.env, launch.log, self.spec.cwd)
            self.children.append(child)
            proc = self.state.proc(launch.name)
            proc.pid, proc.started_at, proc.phase = child.pid, child.started_at, "starting"
            proc.pid_start = start_ticks(child.pid)
        self._publish()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        targets = {
            (x.name, url): ReadyTarget(
                x.name, url, x.ready_model, tuple(sorted(x.ready_backends.items()))
            )
            for x in self.spec.launches
            for url in x.ready_urls
        }
        while targets:
            self._check()
            if time.monotonic() > deadline:
                names = ", ".join(sorted({name for name, _ in targets}))
                raise Stop(f"not ready after {self.ready_timeout_s:.0f} s: {names}", failed=True)
            results = asyncio.run(probe_all(list(targets.values())))
            for key, result in zip(list(targets), results, strict=True):
                proc = self.state.proc(key[0])
                proc.detail = result.detail
                if result.ready:
                    del targets[key]
                    if not any(k[0] == key[0] for k in targets):
                        proc.phase, proc.ready_at = "ready", time.time()
            self._publish()
            if targets:
                time.sleep(TICK_S)

    def _write_deployment(self) -> None:
        spec = self.spec
        endpoints = tuple(
            Endpoint(
                name=e.name,
                role=e.role,
                url=e.url,
                engine_id=e.engine_id,
                log=spec.launch(e.process).log,
            )
            for e in spec.endpoints
        )
        deployment = Deployment(
            layout=spec.layout,
            layout_names=spec.layout_names,
            engine=spec.engine,
            model=spec.model,
            entry_url=spec.entry_url,
            endpoints=endpoints,
            capabilities=spec.capabilities,
            run_dir=spec.run_dir,
            versions=versions(),
            sim_speed=spec.sim_speed,
        )
        atomic_write_text(self.dir.deployment, deployment.model_dump_json(indent=2) + "\n")

    def _watch(self) -> None:
        while True:
            self._check()
            time.sleep(TICK_S)

    def _teardown(self, stop: Stop) -> None:
        self.state.phase = "stopping"
        self.state.message = stop.reason
        self._publish()
        survivors = procs.stop_children(self.children, self.grace_s)
        for child in self.children:
            proc = self.state.proc(child.name)
            if proc.phase != "exited":
                proc.phase, proc.exit_code = "exited", child.exit_code()
        shutil.rmtree(self.spec.scratch, ignore_errors=True)
        self.dir.deployment.unlink(missing_ok=True)
        if survivors:
            self.state.message += f"; pids still alive after SIGKILL: {sorted(survivors)}"
        self.state.phase = "failed" if stop.failed or survivors else "stopped"
        self._publish()

    # -- entry ---------------------------------------------------------------
    def run(self, on_ready: Callable[[RunState], None] | None = None) -> int:
        """Start, wait, watch until stopped; returns the exit code (0 when stopped on request)."""
        previous = {
            s: signal.signal(s, self._on_signal)
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        }
        try:
            self.spec.scratch.mkdir(parents=True, exist_ok=True)
            self._publish()
            try:
                self._start_all()
                self._wait_ready()
                self._write_deployment()
                self.state.phase, self.state.ready_at = "ready", time.time()
                self._publish()
                if on_ready is not None:
                    on_ready(self.state)
                self._watch()
            except Stop as stop:
                self._teardown(stop)
                return EXIT_FAILED if self.state.phase == "failed" else 0
            except BaseException as exc:
                self._teardown(Stop(f"supervisor error: {exc!r}", failed=True))
                raise
            return 0
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
