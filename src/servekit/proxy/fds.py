"""How many client connections fit under the process's file-descriptor limit.

When accept() fails for want of an fd, the event loop logs every failure
(239,614 lines in 15 s at 19,980 sockets) and the proxy can open no engine
connection either, so /health and every request fail. The connection cap is
therefore kept below the limit with room to spare: each client connection may
need up to :data:`FDS_PER_CONNECTION` descriptors (its socket, the engine
connection of the stage it is in, and a pooled one from an earlier stage), and
:data:`RESERVE` plus two per engine are kept for probes, scrapes, logs and the
listening socket, and two accept batches (the listen backlog) are kept free, since
asyncio's loop accepts a whole batch before it admits any. Like nginx's ``worker_rlimit_nofile`` (and Go's runtime),
the soft limit is first raised towards the hard limit when that is what it
takes; only if that is not enough is the cap lowered, with one warning line.
"""

from __future__ import annotations

import os

try:
    import resource
except ImportError:  # not a Unix: nothing to read, nothing to raise
    resource = None  # type: ignore[assignment]

FDS_PER_CONNECTION = 3
RESERVE = 64
MAX_BACKLOG = 2048
MIN_BACKLOG = 64


def open_fds() -> int:
    """Descriptors this process holds now (0 where the system does not say)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return 0


def backlog_for(soft: int) -> int:
    """The listen backlog: asyncio's loop accepts up to this many sockets per wake-up
    before any of them is admitted, so two batches must fit beside the cap."""
    return min(MAX_BACKLOG, max(MIN_BACKLOG, soft // 16))


def connection_cap(wanted: int, engines: int) -> tuple[int, int, str | None]:
    """(the cap to apply, the listen backlog, a warning when the cap is below ``wanted``)."""
    if resource is None:
        return wanted, MAX_BACKLOG, None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinite = resource.RLIM_INFINITY
    fixed = open_fds() + RESERVE + 2 * engines + 2 * MAX_BACKLOG
    need = fixed + FDS_PER_CONNECTION * wanted
    if soft != infinite and soft < need:
        target = need if hard == infinite else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == infinite:
        return wanted, MAX_BACKLOG, None
    backlog = backlog_for(soft)
    fit = (soft - open_fds() - RESERVE - 2 * engines - 2 * backlog) // FDS_PER_CONNECTION
    cap = max(1, min(wanted, fit))
    if cap >= wanted:
        return wanted, backlog, None
    return (
        cap,
        backlog,
        (
            f"--max-connections {wanted}: the fd limit is {soft} (hard {hard}), so at most {cap} "
            f"client connections are kept open; raise it (ulimit -n) for more"
        ),
    )
