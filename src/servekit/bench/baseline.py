"""Compare a result with a baseline: the seeds' "before -> after (delta)" rows.

Points match by (workload, label) and figures by name; only figures present
on both sides with a median are compared. Whether a change is better depends
on the unit: times (ms) improve downwards, everything else upwards. Figures
about the harness itself (``harness_*``) are not compared.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from servekit.bench.schema import BenchResult


class Delta(BaseModel):
    """One compared figure."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: str
    label: str
    figure: str
    unit: str
    before: float
    after: float

    @property
    def change(self) -> float | None:
        """Relative change after/before - 1; None when before is 0."""
        return self.after / self.before - 1.0 if self.before else None

    @property
    def better(self) -> bool | None:
        """True if the change is an improvement, None if unchanged or unknown."""
        if self.after == self.before:
            return None
        lower_is_better = self.unit == "ms"
        return (self.after < self.before) == lower_is_better


def compare(before: BenchResult, after: BenchResult) -> list[Delta]:
    """Every figure measured in both results, in the order of ``after``."""
    rows: list[Delta] = []
    for point in after.points:
        old = before.point(point.workload, point.label)
        if old is None:
            continue
        for name, fig in point.figures.items():
            if name.startswith("harness_"):
                continue  # the harness's own health, not the deployment's
            prev = old.figures.get(name)
            if prev is None or prev.median is None or fig.median is None:
                continue
            rows.append(
                Delta(
                    workload=point.workload,
                    label=point.label,
                    figure=name,
                    unit=fig.unit,
                    before=prev.median,
                    after=fig.median,
                )
            )
    return rows
