"""What ``servekit verify`` is asked: one model, checked before anything starts."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from servekit.verify.components import EngineChoice


class VerifyOptions(BaseModel):
    """Everything ``servekit verify`` was asked, checked before anything starts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="layout name, e.g. local/1p1d")
    engine: EngineChoice = Field(default="vllm", description="--engine vllm|sim")
    target: str | None = Field(default=None, description="--target URL|NAME: attach instead")
    out: Path | None = Field(default=None, description="--out DIR: the run folder")
    baseline: Path | None = Field(default=None, description="--baseline FILE: a bench.json")
    kit: Path | None = Field(default=None, description="--kit ARCHIVE: self-check this kit")
    quick: bool | None = Field(default=None, description="short workloads; default: sim only")
    catalog: str | None = None
    record: bool = Field(default=True, description="append a ledger record on pass")
    no_baseline: bool = Field(
        default=False, description="do not compare with the last passing run in the ledger"
    )

    @property
    def is_quick(self) -> bool:
        return self.engine == "sim" if self.quick is None else self.quick


def reports_root() -> Path:
    """Where run folders go by default (``SERVEKIT_REPORTS`` overrides)."""
    return Path(os.environ.get("SERVEKIT_REPORTS", ".servekit/reports"))


def default_run_dir(name: str, started: dt.datetime) -> Path:
    return reports_root() / name.replace("/", "__") / started.strftime("%Y%m%dT%H%M%SZ")
