"""What a platform's renderer takes and gives: a leaf module, so each platform folder
names these types without importing the table that chooses between them."""

from __future__ import annotations

from dataclasses import dataclass, field

from servekit.catalog import Layout
from servekit.render import Plan

Files = dict[str, str | bytes]


@dataclass(frozen=True)
class RenderRequest:
    """What a platform's renderer gets: the Plan, its layout (where the platform needs
    more than the Plan: Kubernetes, the hardware), the platform's settings, and
    whether the entries run the preflight first."""

    plan: Plan
    layout: Layout | None = None
    settings: dict[str, str] = field(default_factory=dict)
    preflight: bool = True
    """Ship the preflight and run it before the engines (servekit.preflight)."""
