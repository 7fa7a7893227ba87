"""What the advisor calibrates and composes: an engine endpoint's shape.

The unit is what a proxy routes to: one API endpoint, with its role, the
tensor-parallel size of each rank and the DP ranks it fronts (1 for an
external-DP rank or a single engine; the engine's DP size for vLLM's built-in
DP, whose API server balances over its ranks itself). An endpoint of a shape
is measured as a whole, so a built-in DP engine's own balancing is in its
calibration, and a shape nobody measured is never guessed from another one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from servekit.errors import UsageError
from servekit.vocabulary import ROLES, Role

_SHAPE = re.compile(r"(mixed|prefill|decode):tp(\d{1,4}):dp(\d{1,5})")


@dataclass(frozen=True, order=True)
class Shape:
    """One endpoint's role, TP per rank and the DP ranks behind its API server."""

    role: Role
    tp: int = 1
    ranks: int = 1

    @property
    def key(self) -> str:
        return f"{self.role}:tp{self.tp}:dp{self.ranks}"

    def any_role(self) -> Shape:
        """The same engine in the mixed role (what a standalone calibration engine is)."""
        return Shape("mixed", self.tp, self.ranks)

    def __str__(self) -> str:
        return self.key


def parse_shape(text: str, flag: str = "--shape") -> Shape:
    """``prefill:tp4:dp1`` -> Shape; one line naming the grammar otherwise."""
    match = _SHAPE.fullmatch(text.strip())
    if match is None:
        roles = "|".join(ROLES)
        raise UsageError(
            f"{flag} {text[:40]!r}: expected ROLE:tpN:dpM ({roles}), e.g. decode:tp1:dp1"
        )
    role, tp, ranks = match.groups()
    if int(tp) < 1 or int(ranks) < 1:
        raise UsageError(f"{flag} {text[:40]!r}: tp and dp are at least 1")
    return Shape(role, int(tp), int(ranks))  # type: ignore[arg-type]
