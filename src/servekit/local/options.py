"""The options of ``servekit up|down|status|logs|demo`` and ``servekit model tiny``.

One model per command (:mod:`servekit.cliopts` generates the typer command and
the docs table from it), so each flag's default and help exist once. Light on
purpose: ``servekit --help`` imports this module, so it needs only pydantic.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator, model_validator

from servekit.catalog import catalog_field
from servekit.vocabulary import STARTABLE, Startable, StrictModel


def _seconds(value: float, flag: str) -> float:
    """A positive, finite number of seconds, or a message naming the flag and the fix."""
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{flag} {value:g}: give a positive number of seconds, e.g. {flag} 600")
    return value


ReadyTimeout = Annotated[
    float,
    Field(description="seconds to wait for readiness (positive, finite)"),
    AfterValidator(lambda value: _seconds(value, "--ready-timeout")),
]


class UpOptions(StrictModel):
    """``servekit up NAME``."""

    name: str = Field(description="layout name, e.g. local/1p1d")
    engine: Startable = Field("vllm", description="vllm: real vLLM on the CPU; sim: the simulator")
    detach: bool = Field(False, description="return once ready; a background supervisor watches")
    free_ports: bool = Field(False, description="map every planned port to a free local one")
    ready_timeout: ReadyTimeout = 600.0
    catalog: Path | None = catalog_field()
    speed: float | None = Field(
        None, gt=0, le=10000, description="--engine sim: simulated time X times faster (default 1)"
    )

    @field_validator("engine", mode="before")
    @classmethod
    def _engine(cls, value: object) -> object:
        if value not in STARTABLE:
            raise ValueError(f"--engine {value}: unknown engine; use --engine vllm or --engine sim")
        return value

    @model_validator(mode="after")
    def _speed_needs_sim(self) -> UpOptions:
        if self.speed is not None and self.engine != "sim":
            raise ValueError(
                f"--speed {self.speed:g}: give a positive number with --engine sim "
                "(real engines run at real time), e.g. --engine sim --speed 50"
            )
        return self


class DownOptions(StrictModel):
    """``servekit down [NAME]``."""

    name: str | None = Field(None, description="layout to stop (default: every run)")


class StatusOptions(StrictModel):
    """``servekit status [NAME]``."""

    name: str | None = Field(None, description="layout (default: every run)")
    as_json: bool = Field(
        False,
        description="one JSON document (a list of runs) for scripts",
        json_schema_extra={"flag": "--json"},
    )


class LogsOptions(StrictModel):
    """``servekit logs PROCESS``."""

    process: str = Field(description="process name, e.g. decode or proxy")
    layout: str | None = Field(
        None, description="which run (default: the only run with that process)"
    )
    lines: int = Field(50, description="lines to show", json_schema_extra={"short": "-n"})
    follow: bool = Field(
        False, description="keep printing as the log grows", json_schema_extra={"short": "-f"}
    )

    @field_validator("lines")
    @classmethod
    def _lines(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"--lines {value}: give 0 or more lines, e.g. -n 50")
        return value


class DemoOptions(StrictModel):
    """``servekit demo``."""

    ready_timeout: ReadyTimeout = 900.0


class TinyModelOptions(StrictModel):
    """``servekit model tiny``."""

    out: Path = Field(
        description="folder to write: new, empty, or an earlier build (replaced whole)"
    )
