"""Ctrl-C and SIGTERM during ``servekit verify``: stop measuring, tear down, report.

SIGINT raises ``KeyboardInterrupt`` as Python always does (asyncio cancels the
running request cleanly); SIGTERM is made to do the same, and :class:`Interrupts`
remembers which signal came so the run exits 130 or 143 as shells expect. While
the flow tears down and writes its report, :meth:`Interrupts.shielded` ignores
further signals: a second Ctrl-C must not leave engines running or a run folder
without its report.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


class Interrupts:
    """Installs the SIGTERM handler for the duration of a ``with`` block."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._saved: dict[int, Any] = {}

    @property
    def active(self) -> bool:
        """Signal handlers can only be set from the main thread."""
        return threading.current_thread() is threading.main_thread()

    def _on_term(self, signum: int, _frame: FrameType | None) -> None:
        self.signum = signum
        raise KeyboardInterrupt

    def __enter__(self) -> Interrupts:
        if self.active:
            self._saved[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._on_term)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)
        self._saved.clear()

    def name(self) -> str:
        """The signal behind a KeyboardInterrupt: SIGTERM when it came, else SIGINT."""
        return signal.Signals(self.signum or signal.SIGINT).name

    @contextmanager
    def shielded(self) -> Iterator[None]:
        """Ignore SIGINT and SIGTERM inside the block (teardown, the report)."""
        if not self.active:
            yield
            return
        saved = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for signum, handler in saved.items():
                signal.signal(signum, handler)
