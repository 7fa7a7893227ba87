"""How much of an acceptance run is done: every check weighted by the work it sends.

A 1M-token needle check sends a prompt thousands of times larger than an API
check, so counting checks would make the overall bar's estimate of the time
left (:mod:`servekit.progress`) wildly early. Each check weighs one unit, plus
one per 32K tokens of its context for the needle and cache checks (the 144K
checks weigh 5.5, the 1M ones 33), which tracks prefill time, the part of a
long-context check that grows with its size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from rich.console import Console

from servekit.accept.context import parse_context
from servekit.accept.matrix import verdict_text
from servekit.accept.models import CheckResult
from servekit.accept.options import AcceptOptions
from servekit.accept.registry import Check, all_checks, select
from servekit.errors import UsageError
from servekit.progress import overall

TOKENS_PER_UNIT = 32 * 1024
LONG_GROUPS = ("needle", "cache")
TITLE = "accept"


def check_weight(check_id: str) -> float:
    """1 for most checks; 1 + context / 32K for ``needle.<ctx>.*`` and ``cache.<ctx>.*``."""
    parts = check_id.split(".")
    if len(parts) >= 3 and parts[0] in LONG_GROUPS:
        try:
            return 1.0 + parse_context(parts[1]) / TOKENS_PER_UNIT
        except UsageError:
            return 1.0
    return 1.0


def planned_weights(checks: Iterable[Check]) -> dict[str, float]:
    """Every check's weight, by id, in run order."""
    return {c.id: check_weight(c.id) for c in checks}


def weights_for(options: AcceptOptions) -> dict[str, float]:
    """The weights of the checks ``options`` selects."""
    return planned_weights(select(all_checks(options), options.only))


OnResult = Callable[[CheckResult], None]


@contextmanager
def accept_progress(
    weights: dict[str, float], console: Console | None = None, enabled: bool = True
) -> Iterator[OnResult]:
    """An ``on_result`` callback that prints each verdict and advances one overall bar.

    The bar shows the check that runs next, the time spent and an estimate of
    the time left; each finished check's line is printed above it.
    """
    out = console or Console(stderr=True)
    order = list(weights)
    with overall(TITLE, total=sum(weights.values()), console=out, enabled=enabled) as bar:
        if order:
            bar.doing(order[0])

        def on_result(check: CheckResult) -> None:
            out.print(verdict_text(check), check.id, f"({check.duration_s:.1f}s)")
            position = order.index(check.id) if check.id in order else -1
            following = order[position + 1] if 0 <= position < len(order) - 1 else None
            bar.advance(weights.get(check.id, 1.0), what=following)

        yield on_result
