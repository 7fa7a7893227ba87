"""Check results: the rows of the pass/fail tables verify and rebuild print.

A row carries a one-line ``detail`` for the table; rows that count things
(promises kept, files equal) also carry ``passed``/``total`` and, for the
evidence files, every problem and every item checked.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servekit.vocabulary import StrictModel

Status = Literal["pass", "fail", "skip"]


class CheckResult(StrictModel):
    """One named check with its outcome and a one-line detail."""

    name: str
    status: Status
    detail: str
    passed: int | None = Field(None, description="Items that passed (with total: N/N)")
    total: int | None = Field(None, description="Items checked")
    problems: list[str] = Field(default_factory=list, description="Every problem found")
    items: list[str] = Field(default_factory=list, description="One line per item checked")

    @property
    def ratio(self) -> str:
        """``N/N`` when the row counts items, else empty."""
        return f"{self.passed}/{self.total}" if self.total is not None else ""


class CheckReport(StrictModel):
    """All checks of one verify or rebuild run."""

    subject: str
    checks: list[CheckResult]

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def get(self, name: str) -> CheckResult | None:
        """The row called ``name``, if the run made one."""
        return next((c for c in self.checks if c.name == name), None)


def passed(name: str, detail: str) -> CheckResult:
    return CheckResult(name=name, status="pass", detail=detail)


def skipped(name: str, detail: str) -> CheckResult:
    return CheckResult(name=name, status="skip", detail=detail)


def _shown(problems: list[str], limit: int) -> str:
    """The first ``limit`` problems and how many more there were."""
    more = f" (+{len(problems) - limit} more)" if len(problems) > limit else ""
    return "; ".join(problems[:limit]) + more


def failed(name: str, problems: list[str], limit: int = 3) -> CheckResult:
    """A failure naming the first problems and how many there were."""
    return CheckResult(name=name, status="fail", detail=_shown(problems, limit), problems=problems)


def outcome(name: str, problems: list[str], ok_detail: str) -> CheckResult:
    return failed(name, problems) if problems else passed(name, ok_detail)


def counted(
    name: str,
    passed_count: int,
    total: int,
    problems: list[str],
    items: list[str],
    *,
    what: str,
) -> CheckResult:
    """A row that counts items: ``N/N what``, every problem named (up to 12 in the detail)."""
    ratio = f"{passed_count}/{total} {what}"
    return CheckResult(
        name=name,
        status="fail" if problems else "pass",
        detail=f"{ratio}: {_shown(problems, 12)}" if problems else ratio,
        passed=passed_count,
        total=total,
        problems=problems,
        items=items,
    )
