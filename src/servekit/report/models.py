"""What a verify run leaves behind, as typed records: ``run.json`` and its parts.

The release report is rebuilt from files alone (``servekit.report.build_report``),
so everything the report says must be in these records or in the files they
name: the acceptance result, the benchmark result, the kit check, the plan.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import Field

from servekit.vocabulary import RunEngine, StrictModel

RUN_SCHEMA: Literal["servekit.verify/1"] = "servekit.verify/1"

StepName = Literal["up", "accept", "bench", "kit", "report", "ledger", "down"]
StepStatus = Literal["ok", "fail", "skipped"]


class StepOutcome(StrictModel):
    """One lifecycle step: did it run, did it work, and the one-line why."""

    name: StepName
    status: StepStatus
    detail: str = ""
    duration_s: float = 0.0


class KitCheck(StrictModel):
    """The image kit self-check, when ``--kit`` was given."""

    archive: str = Field(description="kit archive path as given")
    archive_sha256: str | None = None
    ok: bool
    summary: str = Field(description="one line, e.g. '89 payload files byte-identical'")
    evidence: str | None = Field(default=None, description="result file, relative to the run")
    table: str | None = Field(
        default=None, description="the kit's release table (kit-table.json), relative to the run"
    )


class Files(StrictModel):
    """Evidence files of the run, relative to the run folder (None: not produced)."""

    deployment: str | None = None
    plan: str | None = None
    accept: str | None = None
    bench: str | None = None
    baseline: str | None = None
    kit: str | None = None
    preflight: str | None = None


class Interruption(StrictModel):
    """A run stopped by Ctrl-C or SIGTERM: where it was and what had finished."""

    signal: str = Field(description="SIGINT or SIGTERM")
    step: StepName | None = Field(default=None, description="the step that was running")
    finished: tuple[str, ...] = Field(default=(), description="steps that had ended ok")
    detail: str = Field(default="", description="how far the running step got")


class VerifyRun(StrictModel):
    """``run.json``: the record of one ``servekit verify`` run."""

    schema_version: Literal["servekit.verify/1"] = RUN_SCHEMA
    layout: str
    title: str
    engine: RunEngine
    target: str | None = Field(default=None, description="--target URL when attached")
    quick: bool = Field(default=False, description="short workloads (simulated dry runs)")
    image: str = Field(description="the image as observed, or 'not observed'")
    versions: dict[str, str] = Field(default_factory=dict, description="as the engines reported")
    observed: dict[str, str] | None = Field(
        default=None,
        description="how each fact was observed: engine, image, each version ('not observed')",
    )
    servekit_version: str
    started: dt.datetime
    finished: dt.datetime
    steps: tuple[StepOutcome, ...] = ()
    files: Files = Files()
    baseline_source: str | None = Field(
        default=None, description="where baseline.json came from (--baseline or the ledger)"
    )
    declared_workloads: tuple[str, ...] = ()
    derived_from: str | None = None
    accept_speed: float | None = Field(
        default=None, description="simulated engines: the speed acceptance ran at"
    )
    bench_speed: float | None = Field(
        default=None, description="simulated engines: the speed the benchmarks ran at"
    )
    interrupted: Interruption | None = Field(
        default=None, description="set when Ctrl-C or SIGTERM stopped the run"
    )

    @property
    def simulated(self) -> bool:
        return self.engine == "sim"

    @property
    def verdict(self) -> str:
        if self.interrupted is not None:
            return "INTERRUPTED"
        return "PASS" if self.passed else "FAIL"

    def step(self, name: StepName) -> StepOutcome | None:
        return next((s for s in self.steps if s.name == name), None)

    @property
    def passed(self) -> bool:
        """Pass when up, accept and bench worked and a given kit checked out.

        Teardown is reported but does not judge the measurements.
        """
        if self.interrupted is not None:
            return False
        judged = ("up", "accept", "bench", "kit")
        if any(s.status == "fail" for s in self.steps if s.name in judged):
            return False
        needed: tuple[StepName, ...] = ("up", "accept", "bench")
        return all((s := self.step(n)) is not None and s.status == "ok" for n in needed)
