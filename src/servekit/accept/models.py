"""Typed results of an acceptance run, serialisable to JSON.

A release report is rebuilt from these files alone, so every verdict carries its
reason, its timings and the sha256 of the request and response it was judged on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from servekit.errors import UsageError
from servekit.vocabulary import StrictModel, atomic_write_text

Verdict = Literal["pass", "fail", "skip"]
SCHEMA_VERSION = 1


class EvidenceFile(StrictModel):
    """One file written beside the result: a request or a response body."""

    path: str = Field(description="path relative to the result's folder")
    sha256: str
    kind: Literal["request", "response"]


class CheckResult(StrictModel):
    """The verdict of one check, with why and what it looked at."""

    id: str
    group: str
    verdict: Verdict
    reason: str
    started_at: str = ""
    duration_s: float = 0.0
    timings: dict[str, float] = Field(default_factory=dict)
    measurements: dict[str, str | int | float | bool] = Field(default_factory=dict)
    evidence: tuple[EvidenceFile, ...] = ()


class Counts(StrictModel):
    """How many checks passed, failed and were skipped; skipped never counts as passed."""

    passed: int
    failed: int
    skipped: int

    @property
    def ran(self) -> int:
        return self.passed + self.failed


class AcceptResult(StrictModel):
    """A whole acceptance run against one deployment."""

    schema_version: int = SCHEMA_VERSION
    target: str
    model: str | None
    simulated: bool
    started_at: str
    duration_s: float
    contexts: tuple[int, ...] = ()
    sim_speed: float | None = Field(
        default=None, description="simulated runs: virtual seconds per wall second"
    )
    checks: tuple[CheckResult, ...]

    @property
    def counts(self) -> Counts:
        verdicts = [c.verdict for c in self.checks]
        return Counts(
            passed=verdicts.count("pass"),
            failed=verdicts.count("fail"),
            skipped=verdicts.count("skip"),
        )

    @property
    def ok(self) -> bool:
        """True when nothing failed and at least one check ran."""
        counts = self.counts
        return counts.failed == 0 and counts.passed > 0

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


def write_result(result: AcceptResult, path: Path) -> None:
    """Write ``result`` as indented JSON, atomically."""
    atomic_write_text(path, result.model_dump_json(indent=2) + "\n")


def read_result(path: Path) -> AcceptResult:
    """Read a result written by :func:`write_result`; a bad file is a usage error."""
    try:
        return AcceptResult.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise UsageError(f"accept result {path}: file not found; run 'servekit accept'") from exc
    except ValueError as exc:
        first = str(exc).splitlines()[0]
        raise UsageError(f"accept result {path}: not a valid result ({first})") from exc
