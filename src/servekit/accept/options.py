"""What an acceptance run is asked to do: one options model, validated once.

:class:`AcceptOptions` is ``servekit accept``'s options model (the typer command
and the docs table are generated from it) and what the Python API takes.
``--context 144k,1m`` and ``--depths`` are checked here so that a typo is one
line naming the flag and the fix (exit 2), before any request is sent; ``--only``
is checked where the runner selects the checks (:func:`servekit.accept.registry.select`),
so options never load the checks that read them.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from servekit.accept.context import DEFAULT_CONTEXTS, parse_contexts, parse_depths
from servekit.accept.needles import DEFAULT_DEPTHS
from servekit.vocabulary import StrictModel


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

    @property
    def contexts(self) -> tuple[int, ...]:
        """The needle contexts in tokens, in the order given, without repeats."""
        return parse_contexts(self.context)

    @property
    def needle_depths(self) -> tuple[float, float, float, float]:
        """Where needles A-D sit (0..1)."""
        return parse_depths(self.depths)
