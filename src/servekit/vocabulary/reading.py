"""Bounded reads: at most N bytes of a file a person named, else one line saying why.

A plan.json, a selftest log, a saved tutorial or a kit member may be anything
(a multi-gigabyte file, a copy of /dev/zero): reading it whole first would cost
the memory the bound protects. :func:`read_at_most` reads one byte past the bound,
so a file of exactly N bytes is kept and one of N+1 is refused unread beyond that.
Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from servekit.errors import UsageError


def read_at_most(
    path: Path,
    limit: int,
    where: str,
    too_large: str,
    *,
    hint: str = "",
    error: Callable[[str], Exception] = UsageError,
) -> bytes:
    """``path``'s bytes, at most ``limit`` of them.

    Refusals are one line starting with ``where`` (say ``--smoke PATH``): past the
    bound ``"{where}: {too_large}"``; a read that fails ``"{where}: cannot read
    (why){hint}"``. ``error`` builds the exception (a kit reader raises its own).
    """
    try:
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise error(f"{where}: cannot read ({exc.strerror}){hint}") from None
    if len(data) > limit:
        raise error(f"{where}: {too_large}")
    return data
