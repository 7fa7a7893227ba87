"""How figures are written: the same number always reads the same way."""

from __future__ import annotations

from servekit.bench.schema import Figure


def fmt(value: float | None, unit: str = "") -> str:
    """``2987727`` -> ``2,987,727``; ``113.44`` -> ``113.4``; ``0.843`` -> ``0.843``."""
    if value is None:
        return "n/a"
    if unit == "tokens" or (float(value).is_integer() and abs(value) >= 1000):
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:,.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def fmt_figure(fig: Figure | None) -> str:
    """A figure as ``113.4 tok/s`` (median over its runs)."""
    if fig is None or fig.median is None:
        return "no valid run"
    unit = "" if fig.unit == "tokens" else f" {fig.unit}"
    text = fmt(fig.median, fig.unit) + unit
    if fig.unit == "tokens":
        text += " tokens"
    return text


def delta(before: float | None, after: float | None) -> str:
    """``+2.6%`` (relative change), ``n/a`` when either side is missing or zero."""
    if before is None or after is None or before == 0:
        return "n/a"
    change = (after - before) / abs(before) * 100.0
    return f"{change:+.1f}%"
