"""How figures are written, everywhere: the same number always reads the same way.

The rules are the seeds' (the release page's tables): thousands get separators
and no decimals (``7,135`` tok/s, ``2,987,727`` tokens), hundreds one decimal
(``116.4``), units two (``24.84``), and fractions three significant digits
(``0.843``, ``0.0363``) so a small latency never prints as ``0.00``. The bench
tables and the verify report both call :func:`fmt`.
"""

from __future__ import annotations


def fmt(value: float | None, unit: str = "") -> str:
    """``2987727`` -> ``2,987,727``; ``113.44`` -> ``113.4``; ``0.843`` -> ``0.843``."""
    if value is None:
        return "n/a"
    size = abs(value)
    if unit == "tokens" or size >= 1000:
        return f"{value:,.0f}"
    if size >= 100:
        return f"{value:.1f}"
    if size >= 1 or value == 0:
        return f"{value:.2f}"
    return f"{value:.3g}"


def signed_percent(fraction: float | None) -> str:
    """``0.026`` -> ``+2.6%``; ``n/a`` when unknown."""
    return "n/a" if fraction is None else f"{fraction * 100:+.1f}%"


def delta(before: float | None, after: float | None) -> str:
    """``+2.6%`` (relative change), ``n/a`` when either side is missing or zero."""
    if before is None or after is None or before == 0:
        return "n/a"
    return signed_percent((after - before) / abs(before))
