"""How a report writes one figure: its median, its unit (rules in :mod:`servekit.numbers`)."""

from __future__ import annotations

from servekit.bench import Figure
from servekit.numbers import fmt


def fmt_figure(fig: Figure | None) -> str:
    """A figure as ``113.4 tok/s`` (median over its runs)."""
    if fig is None or fig.median is None:
        return "no valid run"
    unit = "" if fig.unit == "tokens" else f" {fig.unit}"
    text = fmt(fig.median, fig.unit) + unit
    if fig.unit == "tokens":
        text += " tokens"
    return text
