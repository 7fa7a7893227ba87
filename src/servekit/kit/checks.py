"""Check results: the rows of the pass/fail tables verify and rebuild print."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Status = Literal["pass", "fail", "skip"]


class CheckResult(BaseModel):
    """One named check with its outcome and a one-line detail."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    status: Status
    detail: str


class CheckReport(BaseModel):
    """All checks of one verify or rebuild run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    subject: str
    checks: list[CheckResult]

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)


def passed(name: str, detail: str) -> CheckResult:
    return CheckResult(name=name, status="pass", detail=detail)


def failed(name: str, problems: list[str], limit: int = 3) -> CheckResult:
    """A failure naming the first problems and how many there were."""
    more = f" (+{len(problems) - limit} more)" if len(problems) > limit else ""
    return CheckResult(name=name, status="fail", detail="; ".join(problems[:limit]) + more)


def outcome(name: str, problems: list[str], ok_detail: str) -> CheckResult:
    return failed(name, problems) if problems else passed(name, ok_detail)
