"""What an acceptance run is asked to do, parsed once from the user's input.

:class:`AcceptCommandOptions` is ``servekit accept``'s options model (the typer
command and the docs table are generated from it); :class:`AcceptOptions` is
what a run needs, parsed from it. ``--context 144k,1m`` and ``--depths`` are
parsed here so that a typo is one line naming the flag and the fix (exit 2),
before any request is sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from servekit.accept.needles import DEFAULT_DEPTHS
from servekit.errors import UsageError
from servekit.vocabulary import StrictModel

DEFAULT_CONTEXTS = ("144k", "1m")
_CONTEXT = re.compile(r"^(\d+)([km]?)$")
_UNITS = {"": 1, "k": 1024, "m": 1024 * 1024}
# Bounds shared by the run options and the command's options (so the CLI refuses
# what the run would, in one line naming the flag).
Concurrency = Annotated[int, Field(ge=2, le=1024)]
Seed = Annotated[str, Field(min_length=1, max_length=200)]
TimeoutS = Annotated[float, Field(gt=0, le=86400, allow_inf_nan=False)]


class AcceptOptions(StrictModel):
    """Every knob of a run; the CLI flags map one to one onto these fields."""

    only: tuple[str, ...] = Field(default=(), description="--only: check ids or group prefixes")
    contexts: tuple[int, ...] = Field(default=(147456, 1048576), description="--context, tokens")
    depths: tuple[float, float, float, float] = Field(
        default=DEFAULT_DEPTHS, description="--depths: where needles A-D sit (0..1)"
    )
    max_tokens: int = Field(default=64, ge=1, le=65536, description="max_tokens of needle requests")
    concurrency: Concurrency = Field(default=4, description="--concurrency of the invariant check")
    seed: Seed = Field(default="servekit", description="--seed: picks the needle codes")
    timeout_s: TimeoutS = Field(default=600.0, description="--timeout per request")


def _run_field(name: str, flag_help: str, **bounds: Any) -> Any:
    """A field of AcceptOptions, reused so its default exists once."""
    return Field(AcceptOptions.model_fields[name].default, description=flag_help, **bounds)


class AcceptCommandOptions(StrictModel):
    """The options of ``servekit accept``: one model for the CLI, the code and the docs."""

    target: str | None = Field(
        None, description="URL of the entry, or a layout run by 'servekit up'"
    )
    only: tuple[str, ...] = Field(
        (), description="check id or group (repeatable): guard, needle.144k"
    )
    context: tuple[str, ...] = Field(
        (),
        description=f"needle contexts, e.g. 144k,1m or 2k (default: {','.join(DEFAULT_CONTEXTS)})",
    )
    depths: str | None = Field(
        None,
        description="depths of needles A-D, e.g. 0.1,0.4,0.6,0.9 "
        f"(default: {','.join(map(str, DEFAULT_DEPTHS))})",
    )
    model: str | None = Field(None, description="served model name (URL targets)")
    capability: tuple[str, ...] = Field(
        (), description="declare retrieval / vision (URL targets; repeatable)"
    )
    seed: Seed = _run_field("seed", "picks the needle codes")
    timeout: TimeoutS = _run_field("timeout_s", "seconds per request")
    concurrency: Concurrency = _run_field(
        "concurrency", "requests sent at once by the invariant check (2 or more)"
    )
    out: Path = Field(Path("accept-out"), description="folder for result.json, accept.md, evidence")
    selfcheck: bool = Field(
        False, description="prove the checks fail on simulator faults behind the real proxy"
    )
    list_checks: bool = Field(
        False, description="list the checks and exit", json_schema_extra={"flag": "--list"}
    )


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
