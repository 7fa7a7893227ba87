"""The result file: a documented, versioned JSON schema (``servekit.bench/1``).

A :class:`BenchResult` holds its inputs (target, layout, versions, workloads,
settings) and one :class:`Point` per measured point, each with named
:class:`Figure` values (median of R runs, min-max, every run's value) and the
evidence they were computed from. A saved result is a baseline for the next
run, so reading it back must be exact: models are frozen and forbid extras.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError

from servekit.bench.config import RunSettings, Workload
from servekit.bench.records import RequestRow
from servekit.errors import UsageError, first_error
from servekit.vocabulary import StrictModel, atomic_write_text

SCHEMA_VERSION = "servekit.bench/1"


class Figure(StrictModel):
    """One reported number: the median of its runs, with min-max and provenance."""

    unit: str
    median: float | None = Field(description="median over valid runs; None if none")
    min: float | None = None
    max: float | None = None
    runs: tuple[float, ...] = Field(default=(), description="each run's value, in run order")
    method: str = Field("", description="how each run's value is computed (see docs/bench.md)")


class Point(StrictModel):
    """One measured point of a workload (for example multi_stream at N=8)."""

    workload: str
    label: str = Field(description="point label, unique within the workload, e.g. 'N=8'")
    params: dict[str, float | int | str] = Field(default_factory=dict)
    figures: dict[str, Figure] = Field(default_factory=dict)
    requests: int = Field(0, description="measured requests (warm-up excluded)")
    errors: int = Field(0, description="failed measured requests, never dropped silently")
    error_kinds: dict[str, int] = Field(default_factory=dict)
    invalid_runs: int = Field(0, description="runs discarded for another request running")
    evidence: dict[str, Any] = Field(
        default_factory=dict, description="per-run raw inputs: windows, metric deltas, samples"
    )

    @property
    def key(self) -> tuple[str, str]:
        return (self.workload, self.label)


class BenchInputs(StrictModel):
    """What was measured, where, with what."""

    target: str
    entry_url: str
    layout: str | None = None
    engine: str = "external"
    model: str | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    image: str | None = None
    workloads: tuple[Workload, ...] = ()
    settings: RunSettings = Field(default_factory=RunSettings)
    harness: str = Field("", description="servekit version that measured")
    note: str | None = None
    sim_speed: float | None = Field(
        None,
        gt=0,
        description="simulated engines: virtual seconds per wall second while measuring "
        "(wall-clock figures at a speed above 1 are that much too fast)",
    )


class BenchResult(StrictModel):
    """A whole benchmark run; ``write``/``read`` keep it as JSON."""

    schema_version: Literal["servekit.bench/1"] = "servekit.bench/1"
    created: str = Field(description="UTC ISO-8601 time the run started")
    inputs: BenchInputs
    points: tuple[Point, ...] = ()
    duration_s: float = 0.0
    _requests: tuple[RequestRow, ...] = PrivateAttr(default=())

    @property
    def requests(self) -> tuple[RequestRow, ...]:
        """The measured requests behind the figures (``requests.jsonl``; not in bench.json)."""
        return self._requests

    def with_requests(self, rows: Sequence[RequestRow]) -> BenchResult:
        """This result carrying its per-request rows (written beside bench.json)."""
        self._requests = tuple(rows)
        return self

    def point(self, workload: str, label: str) -> Point | None:
        """The point with that key, if measured."""
        return next((p for p in self.points if p.key == (workload, label)), None)

    def write(self, path: Path) -> None:
        """Write atomically as indented JSON."""
        atomic_write_text(path, self.model_dump_json(indent=2) + "\n")

    @classmethod
    def read(cls, path: Path) -> BenchResult:
        """Read a saved result (a baseline); bad files are a usage error."""
        if not path.is_file():
            raise UsageError(f"--baseline {path}: no such file; pass a saved bench.json")
        try:
            return cls.model_validate_json(path.read_text())
        except ValidationError as exc:
            where, msg = first_error(exc, "")
            raise UsageError(
                f"--baseline {path}: not a {SCHEMA_VERSION} result ({where}: {msg})"
            ) from exc
