"""One memory budget for every body the proxy holds, across all connections.

Caps per body (``--max-body-bytes``, ``--max-answer-bytes``) bound one request,
not many: a 32 MiB request of small JSON values cost +812 MB once parsed (a
parsed value weighs up to 25x its text), six 60 MB answers 2,247 MB, 50
stalled metaserver callers +201 MB. Here every byte a handler reads (request
body, engine answer, metaserver call) and every parse it makes is charged to
the request's :class:`Hold`, and all holds draw on one :class:`Budget`
(``--memory-budget``): a charge that would pass it is a 503 ``overloaded`` at
once, and the request's charges are given back when its handler ends.

The parse is charged by :func:`parse_cost`, an estimate from the text that
costs two ``bytes.count`` calls: twice the size (the decoded text, then the
values) plus 64 bytes per comma and 144 per colon (a list entry, an object's
key and value), measured on CPython 3.11 as at least what ``json.loads``
allocates for lists of ints, floats, short strings and small objects. A
request whose estimate passes ``--max-parse-bytes`` is a 413 before it is
parsed. A big body is parsed in a worker process
(:mod:`servekit.proxy.parsepool`), its parse charged here while it runs there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from servekit.proxy.failures import ProxyError

COMMA_BYTES = 64
COLON_BYTES = 144


COUNT_SLICE = 1 << 20


def parse_cost(raw: bytes, start: int = 0, end: int | None = None) -> int:
    """About the most memory ``json.loads(raw)`` takes (text and values); of
    ``raw[start:end]`` when given (counted in place, never copied)."""
    end = len(raw) if end is None else end
    commas, colons = raw.count(b",", start, end), raw.count(b":", start, end)
    return 2 * (end - start) + COMMA_BYTES * commas + COLON_BYTES * colons


async def parse_cost_yielding(raw: bytes) -> int:
    """:func:`parse_cost`, a MiB at a time with the loop served between: counting a
    48 MiB answer at once held the loop 20-40 ms (one probe's wait, measured by
    tests/proxy/test_parsepool.py's health-while-parsing tests)."""
    total = 0
    for start in range(0, len(raw), COUNT_SLICE):
        total += parse_cost(raw, start, min(start + COUNT_SLICE, len(raw)))
        if len(raw) > COUNT_SLICE:
            await asyncio.sleep(0)
    return total


class Budget:
    """Bytes the proxy may hold for bodies at once."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self.refused = 0


class Hold:
    """What one request holds of the budget; given back whole when it ends."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.taken = 0

    def take(self, n: int) -> None:
        budget = self.budget
        if n > 0 and budget.used + n > budget.total:
            budget.refused += 1
            msg = (
                f"the proxy holds {budget.used} of its {budget.total} bytes of bodies "
                "(--memory-budget); retry later"
            )
            raise ProxyError("overloaded", "proxy", msg)
        budget.used += n
        self.taken += n

    def give(self, n: int) -> None:
        n = min(n, self.taken)
        self.taken -= n
        self.budget.used -= n

    def release(self) -> None:
        self.give(self.taken)


CURRENT: ContextVar[Hold | None] = ContextVar("servekit_proxy_hold", default=None)


def charge(n: int) -> None:
    """Charge ``n`` bytes to the running request's hold (none outside a request)."""
    hold = CURRENT.get()
    if hold is not None:
        hold.take(n)


def refund(n: int) -> None:
    hold = CURRENT.get()
    if hold is not None:
        hold.give(n)


@contextlib.contextmanager
def holding(budget: Budget) -> Iterator[Hold]:
    """The request's hold for the duration of its handler (tasks it starts share it)."""
    hold = Hold(budget)
    token = CURRENT.set(hold)
    try:
        yield hold
    finally:
        CURRENT.reset(token)
        hold.release()


@contextlib.contextmanager
def charged(n: int) -> Iterator[None]:
    """``n`` bytes charged for the block only (a parse whose values are dropped after)."""
    charge(n)
    try:
        yield
    finally:
        refund(n)
