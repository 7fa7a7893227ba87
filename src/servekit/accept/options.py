"""What an acceptance run is asked to do, parsed once from the user's input.

``--context 144k,1m`` and ``--depths`` are parsed here so that a typo is one
line naming the flag and the fix (exit 2), before any request is sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from servekit.accept.needles import DEFAULT_DEPTHS
from servekit.errors import UsageError

DEFAULT_CONTEXTS = ("144k", "1m")
_CONTEXT = re.compile(r"^(\d+)([km]?)$")
_UNITS = {"": 1, "k": 1024, "m": 1024 * 1024}


class AcceptOptions(BaseModel):
    """Every knob of a run; the CLI flags map one to one onto these fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    only: tuple[str, ...] = Field(default=(), description="--only: check ids or group prefixes")
    contexts: tuple[int, ...] = Field(default=(147456, 1048576), description="--context, tokens")
    depths: tuple[float, float, float, float] = Field(
        default=DEFAULT_DEPTHS, description="--depths: where needles A-D sit (0..1)"
    )
    max_tokens: int = Field(default=64, ge=1, description="max_tokens of needle requests")
    concurrency: int = Field(default=4, ge=2, description="--concurrency of the invariant check")
    seed: str = Field(default="servekit", description="--seed: picks the needle codes")
    timeout_s: float = Field(default=600.0, gt=0, description="--timeout per request")


def parse_context(text: str) -> int:
    """``2k`` -> 2048, ``144k`` -> 147456, ``1m`` -> 1048576, ``3000`` -> 3000."""
    match = _CONTEXT.match(text.strip().lower())
    if match is None or int(match.group(1)) == 0:
        raise UsageError(f"--context {text!r}: expected a size such as 2k, 144k or 1m")
    return int(match.group(1)) * _UNITS[match.group(2)]


def parse_contexts(items: Iterable[str]) -> tuple[int, ...]:
    """Parse comma-separated and repeated ``--context`` values, in order, without repeats."""
    sizes: list[int] = []
    for item in items:
        for part in item.split(","):
            if part.strip():
                size = parse_context(part)
                if size not in sizes:
                    sizes.append(size)
    return tuple(sizes)


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
