"""What ``servekit verify`` is asked: one model, checked before anything starts.

The model is the command's options too: ``servekit verify`` is generated from
it (:func:`servekit.cliopts.command_from_model`) and docs/verify.md's options
table is rendered from it, so the flags, the code and the docs say the same.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from servekit.vocabulary import STARTABLE, Startable


class KitInputs(BaseModel):
    """What the kit release table's rows need beyond the kit itself (``--kit-*``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repo: Path | None = None
    base: str | None = None
    smoke: Path | None = None
    nonce: Path | None = None
    baseline: str | None = None

    @property
    def given(self) -> bool:
        values = (self.repo, self.base, self.smoke, self.nonce, self.baseline)
        return any(v is not None for v in values)


class VerifyOptions(BaseModel):
    """Everything ``servekit verify`` was asked, checked before anything starts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="layout name, e.g. local/1p1d or a3/1p1d")
    engine: Startable | None = Field(
        default=None,
        description="vllm: real engines; sim: simulated engines (default: vllm when started "
        "here; attached: what the engines say, and a contradicting value is refused)",
    )
    target: str | None = Field(
        default=None,
        description="attach to a running deployment instead: its entry URL, a layout run by "
        "'up', or a deployment.json",
    )
    nodes: str | None = Field(
        default=None,
        description="the cluster's node addresses in rank order (IP,IP,...): every engine's "
        "endpoint from the Plan (without --target: attach to the Plan's entry)",
    )
    logs: Path | None = Field(
        default=None,
        description="the cluster's log folder, one PROCESS.log per process (run.sh's LOG_DIR), "
        "for the error counters",
    )
    reference: str | None = Field(
        default=None,
        description="with --target/--nodes: URL of a single instance of the same model "
        "(the layout's verify.reference) for the PD == single check",
    )
    out: Path | None = Field(
        default=None, description="run folder (default .servekit/reports/<hw>__<name>/<UTC time>)"
    )
    baseline: Path | None = Field(default=None, description="a saved bench.json to compare against")
    no_baseline: bool = Field(
        default=False,
        description="do not compare with the last passing run in the ledger",
    )
    kit: Path | None = Field(
        default=None, description="image kit archive: write its release table into the report"
    )
    kit_repo: Path | None = Field(
        default=None, description="with --kit: the source repository (consistency row)"
    )
    kit_base: str | None = Field(
        default=None, description="with --kit: the base image to rebuild onto (rebuild row)"
    )
    kit_smoke: Path | None = Field(
        default=None,
        description="with --kit: the selftest.sh log from the rebuilt image (smoke row)",
    )
    kit_nonce: Path | None = Field(
        default=None,
        description="with --kit-smoke: the smoke-nonce.txt an earlier kit verify --out issued",
    )
    kit_baseline: str | None = Field(
        default=None, description="with --kit: the release's repo_rev (repo_rev row)"
    )
    quick: bool | None = Field(
        default=None,
        description="short workloads and a 2k acceptance context (default: quick on sim only)",
        json_schema_extra={"flag": "--quick/--full"},
    )
    speed: float | None = Field(
        default=None,
        gt=0,
        description="simulated time for acceptance, X times real time (--engine sim); default 1",
    )
    bench_speed: float | None = Field(
        default=None,
        gt=0,
        description="simulated time for the benchmarks (--engine sim); default 1 (real time)",
    )
    catalog: str | None = Field(
        default=None, description="catalog folder (default: SERVEKIT_CATALOG or the packaged one)"
    )
    record: bool = Field(
        default=True,
        description="append a ledger record on pass",
        json_schema_extra={"cli": False},
    )

    @field_validator("engine", mode="before")
    @classmethod
    def _known_engine(cls, value: Any) -> Any:
        if value is not None and value not in STARTABLE:
            raise ValueError(
                f"{value} is not an engine; use vllm (real engines) or sim (simulated engines)"
            )
        return value

    @property
    def engine_choice(self) -> Startable:
        """The engines to start here: ``--engine``, else real vLLM."""
        return self.engine or "vllm"

    @property
    def is_quick(self) -> bool:
        return self.engine == "sim" if self.quick is None else self.quick

    @property
    def attached(self) -> bool:
        """Nothing is started here: the run attaches to a deployment that is running."""
        return self.target is not None or self.nodes is not None

    @property
    def kit_inputs(self) -> KitInputs:
        return KitInputs(
            repo=self.kit_repo,
            base=self.kit_base,
            smoke=self.kit_smoke,
            nonce=self.kit_nonce,
            baseline=self.kit_baseline,
        )

    @property
    def accept_speed(self) -> float:
        return self.speed or 1.0

    @property
    def benchmark_speed(self) -> float:
        return self.bench_speed or 1.0


def reports_root() -> Path:
    """Where run folders go by default (``SERVEKIT_REPORTS`` overrides)."""
    return Path(os.environ.get("SERVEKIT_REPORTS", ".servekit/reports"))


def default_run_dir(name: str, started: dt.datetime) -> Path:
    return reports_root() / name.replace("/", "__") / started.strftime("%Y%m%dT%H%M%SZ")
