"""What one acceptance check is: an id, its group, a summary and the coroutine that runs it.

Kept below both the check modules (which define checks) and the registry (which
lists and selects them), so the two never import each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from servekit.accept.env import Probe
from servekit.accept.outcome import Outcome

CheckFn = Callable[[Probe], Awaitable[Outcome]]


@dataclass(frozen=True)
class Check:
    """One entry of the matrix."""

    id: str
    group: str
    summary: str
    run: CheckFn
