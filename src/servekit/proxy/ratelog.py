"""Log lines a client can cause, bounded: one line each, at most a burst per interval.

Anything a remote peer can repeat at will (a malformed request, a refused key,
a connection shed at the cap, an accept error at the fd limit) must not be able
to fill the disk: 2,000 malformed requests wrote 1.1 MB of tracebacks, and
accept errors at the fd limit 106 MB in 15 s. Each kind of line goes through a
:class:`RateLimited`: ``burst`` lines per ``interval_s``, the rest counted and
reported in one ``suppressed N`` line when the window ends.

:class:`ServerLog` is the logger aiohttp's request handler is given: a request
it could not parse (:class:`aiohttp.http_exceptions.HttpProcessingError`)
becomes one WARNING line naming the peer and the parser's complaint (printable
characters only, so a request cannot forge log lines); anything else (a bug in
a handler) keeps its traceback, rate-limited too.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

MAX_TEXT = 200


def printable(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` on one line, control characters escaped, cut at ``limit`` characters."""
    flat = " ".join(text.split())
    out = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in flat)
    return out if len(out) <= limit else out[:limit] + "..."


class RateLimited:
    """At most ``burst`` lines per ``interval_s`` on ``logger``; the rest summed in one line."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        burst: int,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.what = what
        self.burst = burst
        self.interval_s = interval_s
        self.clock = clock
        self.window_start = clock()
        self.used = 0
        self.suppressed = 0
        self._flush_handle: asyncio.TimerHandle | None = None

    def allow(self) -> bool:
        """True when one more line may be written now; counts it otherwise."""
        now = self.clock()
        if now - self.window_start >= self.interval_s:
            self.flush()
        if self.used < self.burst:
            self.used += 1
            return True
        self.suppressed += 1
        if self._flush_handle is None:
            self._schedule_flush(self.window_start + self.interval_s - now)
        return False

    def _schedule_flush(self, delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: the next line's allow() reports the count
        self._flush_handle = loop.call_later(max(delay, 0.0), self.flush)

    def flush(self) -> None:
        """Report what was suppressed (if anything) and open a new window."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self.suppressed:
            self.logger.warning(
                "%s: suppressed %d more lines like this (at most %d per %g s)", self.what,
                self.suppressed, self.burst, self.interval_s,
            )  # fmt: skip
        self.window_start, self.used, self.suppressed = self.clock(), 0, 0

    def log(self, level: int, msg: str, *args: object, exc_info: Any = None) -> None:
        if self.logger.isEnabledFor(level) and self.allow():
            self.logger.log(level, msg, *args, exc_info=exc_info)


def _exception_of(exc_info: Any) -> BaseException | None:
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple) and len(exc_info) == 3:
        return exc_info[1]  # type: ignore[no-any-return]
    return sys.exc_info()[1] if exc_info else None


class ServerLog:
    """The ``logger`` of aiohttp's RequestHandler: one line per unparsable request."""

    def __init__(self, logger: logging.Logger, bad: RateLimited, errors: RateLimited) -> None:
        self.logger = logger
        self.bad = bad
        self.errors = errors

    def debug(self, msg: str, *args: object, **kw: Any) -> None:
        self.logger.debug(msg, *args, **kw)

    def info(self, msg: str, *args: object, **kw: Any) -> None:
        self.errors.log(logging.INFO, msg, *args)

    def warning(self, msg: str, *args: object, **kw: Any) -> None:
        self.errors.log(logging.WARNING, msg, *args)

    def error(self, msg: str, *args: object, exc_info: Any = None, **kw: Any) -> None:
        exc = _exception_of(exc_info)
        if isinstance(exc, HttpProcessingError):
            text = printable(f"{exc.__class__.__name__}: {exc}")
            self.bad.log(logging.WARNING, "%s: %s", printable(msg % args), text)
            return
        self.errors.log(logging.ERROR, msg, *args, exc_info=exc_info)

    def exception(self, msg: str, *args: object, exc_info: Any = True, **kw: Any) -> None:
        self.error(msg, *args, exc_info=exc_info)

    def isEnabledFor(self, level: int) -> bool:
        return self.logger.isEnabledFor(level)


def loop_exception_handler(limiter: RateLimited) -> Callable[[Any, dict[str, Any]], None]:
    """An event loop exception handler that rate-limits (accept errors at the fd limit)."""

    def handle(loop: Any, context: dict[str, Any]) -> None:
        if limiter.allow():
            loop.default_exception_handler(context)

    return handle
