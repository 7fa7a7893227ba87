"""Compare a result with a baseline: the seeds' "before -> after (delta)" rows.

Points match by (workload, label) and figures by name; only figures present
on both sides with a median are compared. Whether a change is better depends
on the unit: times (ms) improve downwards, everything else upwards. Figures
about the harness itself (``harness_*``) are not compared. A baseline another
tool wrote (:mod:`servekit.bench.foreign`) is one point, compared with every
point that has serving metrics.
"""

from __future__ import annotations

from servekit.bench.schema import BenchResult, Point
from servekit.vocabulary import StrictModel


class Delta(StrictModel):
    """One compared figure."""

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


FOREIGN = "foreign"
"""The workload of a baseline another tool wrote (servekit.bench.foreign)."""
SERVING_WORKLOADS = ("rate_sweep", "concurrency_sweep", "trace")
"""Points with vLLM-style serving metrics: what a foreign baseline is compared with."""


def _counterpart(before: BenchResult, point: Point) -> Point | None:
    """The baseline point a point is compared with: same key, or a foreign file's one point."""
    foreign = [p for p in before.points if p.workload == FOREIGN]
    if foreign:
        return foreign[0] if point.workload in SERVING_WORKLOADS else None
    return before.point(point.workload, point.label)


def compare(before: BenchResult, after: BenchResult) -> list[Delta]:
    """Every figure measured in both results, in the order of ``after``."""
    rows: list[Delta] = []
    for point in after.points:
        old = _counterpart(before, point)
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


def not_compared(baseline: BenchResult) -> list[str]:
    """What a foreign baseline holds but servekit refuses to compare (definitions differ)."""
    return [
        str(why)
        for p in baseline.points
        if p.workload == FOREIGN
        for why in p.evidence.get("not_compared", [])
    ]
