"""Detached process groups: the one way servekit starts a process apart and stops it.

A detached process runs in its own session, so in its own process group: a
terminal's Ctrl-C does not reach it, and stopping its group stops everything it
started that stayed in the group. Its stdin is /dev/null and its output goes to
the files it is given. Stopping groups is SIGTERM, a grace period, SIGKILL for
what is left and a last wait; a caller that tracks processes that left their
group (a supervisor's descendants) names them, and they are signalled alike.

Used by the local runner (engines, the proxy, the detached supervisor), the dry-run
clusters (each node's entry) and the importer's fake platform (each node's reaper).
Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import IO

KILL_WAIT_S = 5.0
POLL_S = 0.05

Output = IO[bytes] | int


def start_detached(
    argv: Sequence[str],
    *,
    stdout: Output,
    stderr: Output = subprocess.STDOUT,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session (its own process group), stdin from /dev/null."""
    return subprocess.Popen(
        list(argv),
        env=dict(env) if env is not None else None,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
    )


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to every process of group ``pgid`` (gone or not ours: nothing)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def group_alive(pgid: int) -> bool:
    """Whether group ``pgid`` still has a process (one we may not signal counts)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_groups(
    pgids: Collection[int],
    *,
    grace_s: float,
    term: bool = True,
    alive: Callable[[], set[int]] | None = None,
) -> set[int]:
    """Stop the process groups ``pgids``; what is still alive at the end (empty: all gone).

    SIGTERM each group (``term`` False: they were asked already, only wait), wait
    up to ``grace_s`` for them to be gone, SIGKILL what is left, wait up to
    :data:`KILL_WAIT_S` more. ``alive`` gives the processes still to stop when the
    groups' own members are not all of them (descendants that changed group):
    each is signalled with the groups; by default the groups that still have a
    process.
    """
    groups = set(pgids)

    def left() -> set[int]:
        return alive() if alive is not None else {g for g in groups if group_alive(g)}

    remaining = left()
    if term and remaining:
        _signal_all(groups, remaining, signal.SIGTERM)
    remaining = _wait_gone(left, grace_s)
    if remaining:
        _signal_all(groups, remaining, signal.SIGKILL)
        remaining = _wait_gone(left, KILL_WAIT_S)
    return remaining


def _signal_all(groups: set[int], pids: set[int], signum: int) -> None:
    for pgid in groups:
        signal_group(pgid, signum)
    for pid in pids - groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _wait_gone(left: Callable[[], set[int]], timeout_s: float) -> set[int]:
    deadline = time.monotonic() + timeout_s
    remaining = left()
    while remaining and time.monotonic() < deadline:
        time.sleep(POLL_S)
        remaining = left()
    return remaining
