"""What verify shows while it measures: one overall bar with an estimate of the time left.

The bar covers acceptance, the benchmarks and the kit (start-up and teardown
draw their own display). Its units are work, not steps: each acceptance check
weighs what :func:`servekit.accept.progress.check_weight` says (a 1M needle
check weighs 33 short checks), each planned benchmark run weighs one, and a
kit check a fixed share. The estimate is :mod:`servekit.progress`'s: the mean
pace so far times the units left.

The real adapters report through :data:`HOOKS`, a context variable the flow
sets for the duration of a run, so the component Protocols stay as small as
they are and test doubles need not know about progress.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import Progress

from servekit.accept import AcceptOptions, CheckResult, check_weight, weights_for
from servekit.bench import RunSettings, Workload, planned_runs
from servekit.progress import Overall, overall_columns

KIT_UNITS = 10.0
TITLE = "verify"


def _ignore_check(result: CheckResult) -> None:
    """Default: nobody listens."""


def _ignore_bench(what: str, done: int, total: int) -> None:
    """Default: nobody listens."""


@dataclass
class Hooks:
    """Where the real adapters report as they go."""

    on_check: Callable[[CheckResult], None] = _ignore_check
    on_bench: Callable[[str, int, int], None] = _ignore_bench


HOOKS: ContextVar[Hooks] = ContextVar("servekit_verify_hooks", default=Hooks())  # noqa: B039


def accept_units(contexts: Sequence[str]) -> dict[str, float]:
    """Each acceptance check's weight at these contexts."""
    return weights_for(AcceptOptions(context=tuple(contexts)))


def bench_units(workloads: Sequence[Workload], settings: RunSettings) -> float:
    return float(planned_runs(workloads, settings.runs))


@dataclass
class VerifyProgress:
    """The overall bar of one verify run; :meth:`measuring` draws it."""

    console: Console | None = None
    enabled: bool = True
    checks: list[CheckResult] = field(default_factory=list)
    _bar: Overall | None = None
    _progress: Progress | None = None
    _bench_seen: dict[str, int] = field(default_factory=dict)

    def hooks(self) -> Hooks:
        return Hooks(on_check=self._on_check, on_bench=self._on_bench)

    def _on_check(self, result: CheckResult) -> None:
        self.checks.append(result)
        self.advance(check_weight(result.id), what=f"accept {result.id}")

    def _on_bench(self, what: str, done: int, total: int) -> None:
        now = min(done, total)
        grew = max(0, now - self._bench_seen.get(what, 0))
        self._bench_seen[what] = max(now, self._bench_seen.get(what, 0))
        self.advance(grew, what=f"bench {what}")

    def doing(self, what: str) -> None:
        if self._bar is not None:
            self._bar.doing(what)

    def advance(self, units: float, what: str | None = None) -> None:
        if self._bar is not None:
            self._bar.advance(units, what=what)

    @contextmanager
    def measuring(self, total: float) -> Iterator[VerifyProgress]:
        """Draw the bar for ``total`` units until the block ends."""
        progress = Progress(
            *overall_columns(),
            console=self.console or Console(stderr=True),
            transient=False,
            disable=not self.enabled,
        )
        self._progress = progress
        self._bar = Overall(progress, progress.add_task(TITLE, total=total), TITLE)
        token = HOOKS.set(self.hooks())
        try:
            with progress:
                yield self
                self._bar.finish()
        finally:
            HOOKS.reset(token)
            self._bar = self._progress = None

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Take the bar off the screen while another display runs (a restart's)."""
        progress = self._progress
        if progress is None:
            yield
            return
        progress.stop()
        try:
            yield
        finally:
            progress.start()
