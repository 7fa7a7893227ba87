"""The check registry: every check's id, group and function, and ``--only``.

Ids are dotted (``guard.decode_direct``, ``needle.144k.A``) so ``--only`` can
name one check or a whole group by prefix. The needle checks are made per
context, so the registry is a function of the options.
"""

from __future__ import annotations

from collections.abc import Iterable

from servekit.accept.check import Check, CheckFn
from servekit.accept.options import AcceptOptions
from servekit.errors import UsageError

__all__ = ["Check", "CheckFn", "all_checks", "select"]


def all_checks(options: AcceptOptions) -> tuple[Check, ...]:
    """Every check, in the order they run (log counters last, after all traffic)."""
    from servekit.accept.checks import api, cache, guard, invariants, needle, service

    return (
        *service.CHECKS,
        *api.CHECKS,
        *invariants.CHECKS,
        *guard.CHECKS,
        *needle.checks_for(options.contexts),
        *cache.checks_for(options.contexts),
        *service.FINAL_CHECKS,
    )


def _matches(check: Check, selector: str) -> bool:
    return check.id == selector or check.id.startswith(selector.rstrip(".") + ".")


def select(checks: Iterable[Check], only: Iterable[str]) -> tuple[Check, ...]:
    """The checks named by ``only`` (ids or group prefixes); all when empty."""
    pool = tuple(checks)
    wanted = tuple(only)
    if not wanted:
        return pool
    for selector in wanted:
        if not any(_matches(c, selector) for c in pool):
            groups = sorted({c.group for c in pool})
            raise UsageError(
                f"--only {selector}: no such check or group; use one of {', '.join(groups)} "
                "or an id from 'servekit accept --list'"
            )
    return tuple(c for c in pool if any(_matches(c, s) for s in wanted))
