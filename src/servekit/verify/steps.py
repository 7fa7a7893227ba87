"""Timing and recording lifecycle steps: each one ends ok, failed or skipped.

A step that raises becomes a failed :class:`StepOutcome` with a one-line reason,
so a broken acceptance run still produces a report that says why, and teardown
still happens. An interrupt (Ctrl-C, SIGTERM: a ``KeyboardInterrupt``) is
recorded as the step's failure ("interrupted by SIGINT") and passed on, so the
flow stops there and reports what finished.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from servekit.report import StepName, StepOutcome

T = TypeVar("T")


class StepFailed(Exception):
    """A step's own verdict of failure (for example acceptance N/M with M > N)."""


class Steps:
    """Runs steps in order and keeps their outcomes (and which one runs now)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.outcomes: list[StepOutcome] = []
        self.current: StepName | None = None
        self.interrupt_name: Callable[[], str] = lambda: "SIGINT"
        self._clock = clock

    def skip(self, name: StepName, why: str) -> None:
        self.outcomes.append(StepOutcome(name=name, status="skipped", detail=why))

    def run(self, name: StepName, fn: Callable[[], T], describe: Callable[[T], str]) -> T | None:
        """Run ``fn``; record ok with ``describe(result)``, or fail with the error."""
        start = self.begin(name)
        try:
            value = fn()
        except KeyboardInterrupt:
            self.interrupted(name, start)
            raise
        except Exception as exc:
            self._add(name, "fail", one_line(exc), start)
            return None
        self._add(name, "ok", describe(value), start)
        return value

    def begin(self, name: StepName) -> float:
        """Note that ``name`` runs from now; returns its start time."""
        self.current = name
        return self._clock()

    def interrupted(self, name: StepName, start: float) -> None:
        self._add(name, "fail", f"interrupted by {self.interrupt_name()}", start)

    def mark(self, name: StepName, ok: bool, detail: str, start: float) -> None:
        self._add(name, "ok" if ok else "fail", detail, start)

    def finished(self) -> tuple[str, ...]:
        """The steps that ended ok, in order."""
        return tuple(s.name for s in self.outcomes if s.status == "ok")

    def _add(self, name: StepName, status: str, detail: str, start: float) -> None:
        took = round(self._clock() - start, 3)
        outcome = StepOutcome.model_validate(
            {"name": name, "status": status, "detail": detail, "duration_s": took}
        )
        self.outcomes.append(outcome)
        self.current = None


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``, for a step's detail."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
