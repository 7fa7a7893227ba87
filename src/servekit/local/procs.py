"""Start, watch and stop the processes of a run.

Every process is detached (:mod:`servekit.procgroup`: its own session, so its
own process group, stdin from /dev/null), stdout plus stderr appended to one log
file. Stopping sends SIGTERM to each group, waits a grace period, then SIGKILLs
whatever is left, including descendants that changed group.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servekit.local import proctree
from servekit.logscan import last_lines
from servekit.procgroup import start_detached, stop_groups


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
        popen = start_detached(argv, stdout=out, env={**os.environ, **env}, cwd=cwd)
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


def _still_alive(tracked: set[int], roots: set[int]) -> set[int]:
    table = proctree.snapshot()
    live = {pid for pid in tracked if table.get(pid, (0, 0, "Z"))[2] != "Z"}
    return live | proctree.members(roots)


def stop_group_pids(roots: set[int], grace_s: float = 10.0) -> set[int]:
    """SIGTERM every group of ``roots`` and its descendants, then SIGKILL survivors.

    Works on plain pids, so ``servekit down`` can clean up after a supervisor that
    died. Returns the pids still alive at the end (empty on success).
    """
    seen = proctree.members(roots)

    def alive() -> set[int]:
        now = _still_alive(seen, roots)
        seen.update(now)
        return now

    return stop_groups(roots, grace_s=grace_s, alive=alive)


def stop_children(children: Sequence[Child], grace_s: float = 10.0) -> set[int]:
    """Stop every child (reaping them) and everything they started."""
    roots = {c.pid for c in children}
    survivors = stop_group_pids(roots, grace_s)
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.popen.wait(timeout=1.0)
    return survivors
