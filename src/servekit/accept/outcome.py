"""What a check function returns: a verdict, why, and what it measured."""

from __future__ import annotations

from pydantic import Field

from servekit.accept.models import Verdict
from servekit.vocabulary import StrictModel

Measure = str | int | float | bool


class Outcome(StrictModel):
    """A check's own finding; the runner adds timings and evidence."""

    verdict: Verdict
    reason: str
    measurements: dict[str, Measure] = Field(default_factory=dict)
    timings: dict[str, float] = Field(default_factory=dict)


def passed(reason: str, **measurements: Measure) -> Outcome:
    return Outcome(verdict="pass", reason=reason, measurements=measurements)


def failed(reason: str, **measurements: Measure) -> Outcome:
    return Outcome(verdict="fail", reason=reason, measurements=measurements)


def skipped(reason: str) -> Outcome:
    return Outcome(verdict="skip", reason=reason)
