"""How many client connections fit under the process's file-descriptor limit.

When accept() fails for want of an fd, the event loop logs every failure
(239,614 lines in 15 s at 19,980 sockets) and the proxy can open no engine
connection either, so /health and every request fail. The connection cap is
therefore kept below the limit with room to spare: each client connection may
need up to :data:`FDS_PER_CONNECTION` descriptors (its socket, the engine
connection of the stage it is in, and a pooled one from an earlier stage), and
:data:`RESERVE` plus two per engine are kept for probes, scrapes, logs and the
listening socket. Like nginx's ``worker_rlimit_nofile`` (and Go's runtime),
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


def open_fds() -> int:
    """Descriptors this process holds now (0 where the system does not say)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return 0


def connection_cap(wanted: int, engines: int) -> tuple[int, str | None]:
    """(the cap to apply, a warning when it is below ``wanted``)."""
    if resource is None:
        return wanted, None
    reserve = RESERVE + 2 * engines
    need = open_fds() + reserve + FDS_PER_CONNECTION * wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinite = resource.RLIM_INFINITY
    if soft != infinite and soft < need:
        target = need if hard == infinite else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == infinite:
        return wanted, None
    fit = (soft - open_fds() - reserve) // FDS_PER_CONNECTION
    cap = max(1, min(wanted, fit))
    if cap >= wanted:
        return wanted, None
    return cap, (
        f"--max-connections {wanted}: the fd limit is {soft} (hard {hard}), so at most {cap} "
        f"client connections are kept open; raise it (ulimit -n) for more"
    )
