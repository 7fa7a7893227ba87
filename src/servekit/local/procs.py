"""Start, watch and stop the processes of a run.

Every process gets its own session (so its own process group), stdin from
/dev/null, and stdout plus stderr appended to one log file. Stopping sends
SIGTERM to each group, waits a grace period, then SIGKILLs whatever is left,
including descendants that changed group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servekit.local import proctree
from servekit.logscan import last_lines


@dataclass
class Child:
    """A started process with its log."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    started_at: float = field(default_factory=time.time)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exit_code(self) -> int | None:
        """None while running, else the exit code (negative: killed by that signal)."""
        return self.popen.poll()


def spawn(
    name: str, argv: Sequence[str], env: Mapping[str, str], log: Path, cwd: Path | None = None
) -> Child:
    """Start ``argv`` in a new session with output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            list(argv),
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
        )
    return Child(name=name, popen=popen, log=log)


def tail(log: Path, lines: int = 20) -> list[str]:
    """The last ``lines`` lines of a log (empty when it does not exist or is not a file)."""
    try:
        return last_lines(log, lines)
    except OSError:
        return []


def first_dead(children: Iterable[Child]) -> Child | None:
    """The first child that has exited, if any."""
    for child in children:
        if child.exit_code() is not None:
            return child
    return None


def _signal_all(pids: Iterable[int], groups: Iterable[int], sig: signal.Signals) -> None:
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _still_alive(tracked: set[int], roots: set[int]) -> set[int]:
    table = proctree.snapshot()
    live = {pid for pid in tracked if table.get(pid, (0, 0, "Z"))[2] != "Z"}
    return live | proctree.members(roots)


def stop_group_pids(roots: set[int], grace_s: float = 10.0) -> set[int]:
    """SIGTERM every group of ``roots`` and its descendants, then SIGKILL survivors.

    Works on plain pids, so ``servekit down`` can clean up after a supervisor that
    died. Returns the pids still alive at the end (empty on success).
    """
    tracked = proctree.members(roots)
    _signal_all(tracked, roots, signal.SIGTERM)
    alive = _wait_gone(tracked, roots, grace_s)
    if alive:
        _signal_all(alive, roots, signal.SIGKILL)
        alive = _wait_gone(alive, roots, 5.0)
    return alive


def _wait_gone(tracked: set[int], roots: set[int], timeout_s: float) -> set[int]:
    deadline = time.monotonic() + timeout_s
    alive = _still_alive(tracked, roots)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = _still_alive(tracked | alive, roots)
    return alive


def stop_children(children: Sequence[Child], grace_s: float = 10.0) -> set[int]:
    """Stop every child (reaping them) and everything they started."""
    roots = {c.pid for c in children}
    survivors = stop_group_pids(roots, grace_s)
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.popen.wait(timeout=1.0)
    return survivors
