"""What an acceptance run is asked to do: one options model, validated once.

:class:`AcceptOptions` is ``servekit accept``'s options model (the typer command
and the docs table are generated from it) and what the Python API takes.
``--context 144k,1m``, ``--depths`` and ``--only`` are checked here so that a
typo is one line naming the flag and the fix (exit 2), before any request is sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Self

from pydantic import Field, field_validator, model_validator

from servekit.accept.needles import DEFAULT_DEPTHS
from servekit.errors import UsageError
from servekit.vocabulary import StrictModel

DEFAULT_CONTEXTS = ("144k", "1m")
_CONTEXT = re.compile(r"^(\d+)([km]?)$")
_UNITS = {"": 1, "k": 1024, "m": 1024 * 1024}


class AcceptOptions(StrictModel):
    """The options of ``servekit accept`` and of :func:`~servekit.accept.run_accept`.

    One model for the CLI, the Python API and the docs: the typer command is
    generated from these fields, so a new flag is one field here. Fields hold
    what the user types, defaults included (``context=("144k", "1m")``,
    ``depths="0.1,0.4,0.6,0.9"``); their validators refuse a bad value in one
    line naming the flag and the fix (a :class:`~servekit.errors.UsageError`,
    exit 2), and :attr:`contexts` and :attr:`needle_depths` are the parsed
    values a run reads.
    """

    target: str | None = Field(
        None, description="URL of the entry, or a layout run by 'servekit up'"
    )
    only: tuple[str, ...] = Field(
        (), description="check id or group (repeatable): guard, needle.144k"
    )
    context: tuple[str, ...] = Field(
        DEFAULT_CONTEXTS, description="needle contexts, e.g. 144k,1m or 2k (none: no needles)"
    )
    depths: str = Field(
        ",".join(map(str, DEFAULT_DEPTHS)),
        description="depths of needles A-D, e.g. 0.1,0.4,0.6,0.9",
    )
    model: str | None = Field(None, description="served model name (URL targets)")
    capability: tuple[str, ...] = Field(
        (), description="declare retrieval / vision (URL targets; repeatable)"
    )
    seed: str = Field(
        "servekit", min_length=1, max_length=200, description="picks the needle codes"
    )
    timeout_s: float = Field(
        600.0,
        gt=0,
        le=86400,
        allow_inf_nan=False,
        description="seconds per request",
        json_schema_extra={"flag": "--timeout"},
    )
    concurrency: int = Field(
        4, ge=2, le=1024, description="requests sent at once by the invariant check (2 or more)"
    )
    out: Path = Field(Path("accept-out"), description="folder for result.json, accept.md, evidence")
    selfcheck: bool = Field(
        False, description="prove the checks fail on simulator faults behind the real proxy"
    )
    list_checks: bool = Field(
        False, description="list the checks and exit", json_schema_extra={"flag": "--list"}
    )
    max_tokens: int = Field(
        64,
        ge=1,
        le=65536,
        description="max_tokens of needle requests",
        json_schema_extra={"cli": False},
    )

    @field_validator("context")
    @classmethod
    def _contexts_parse(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        parse_contexts(value)  # a typo is a UsageError naming --context
        return value

    @field_validator("depths")
    @classmethod
    def _depths_parse(cls, value: str) -> str:
        parse_depths(value)  # a typo is a UsageError naming --depths
        return value

    @model_validator(mode="after")
    def _only_names_checks(self) -> Self:
        """``--only`` must name a check at these contexts, before anything is sent."""
        from servekit.accept.registry import all_checks, select

        select(all_checks(self), self.only)
        return self

    @property
    def contexts(self) -> tuple[int, ...]:
        """The needle contexts in tokens, in the order given, without repeats."""
        return parse_contexts(self.context)

    @property
    def needle_depths(self) -> tuple[float, float, float, float]:
        """Where needles A-D sit (0..1)."""
        return parse_depths(self.depths)


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
