"""The context words of an acceptance run: ``--context`` sizes, ``--depths``, and their labels.

A module of their own, below the options and the checks: the needle and cache
checks name their ids by :func:`context_label`, the options validate with the
parsers, and neither has to import the other for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from servekit.errors import UsageError

DEFAULT_CONTEXTS = ("144k", "1m")
_CONTEXT = re.compile(r"^(\d+)([km]?)$")
_UNITS = {"": 1, "k": 1024, "m": 1024 * 1024}


def parse_context(text: str) -> int:
    """``2k`` -> 2048, ``144k`` -> 147456, ``1m`` -> 1048576, ``3000`` -> 3000."""
    match = _CONTEXT.match(text.strip().lower())
    if match is None or int(match.group(1)) == 0:
        raise UsageError(f"--context {text!r}: expected a size such as 2k, 144k or 1m")
    return int(match.group(1)) * _UNITS[match.group(2)]


def parse_contexts(items: Iterable[str]) -> tuple[int, ...]:
    """Parse comma-separated and repeated ``--context`` values, in order, without repeats."""
    parts = (part for item in items for part in item.split(",") if part.strip())
    return tuple(dict.fromkeys(parse_context(part) for part in parts))


def parse_depths(text: str) -> tuple[float, float, float, float]:
    """``0.1,0.4,0.6,0.9`` -> the depths of needles A-D."""
    try:
        values = [float(p) for p in text.split(",")]
    except ValueError as exc:
        raise UsageError(
            f"--depths {text!r}: expected four numbers such as 0.1,0.4,0.6,0.9"
        ) from exc
    if len(values) != 4 or not all(0.0 <= v <= 1.0 for v in values):
        raise UsageError(f"--depths {text!r}: give four depths between 0 and 1, one per needle")
    return (values[0], values[1], values[2], values[3])


def context_label(tokens: int) -> str:
    """The short name of a context size: 147456 -> ``144k``, 1048576 -> ``1m``."""
    if tokens % _UNITS["m"] == 0:
        return f"{tokens // _UNITS['m']}m"
    if tokens % _UNITS["k"] == 0:
        return f"{tokens // _UNITS['k']}k"
    return str(tokens)
