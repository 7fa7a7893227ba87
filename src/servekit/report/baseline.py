"""'What changed': this run against a baseline benchmark result, before -> after.

The baseline is a saved ``bench.json`` (``--baseline FILE``), copied into the
run folder so the comparison can be rebuilt. Image and engine versions are
compared too, because a figure moved by an image change is the usual story.
"""

from __future__ import annotations

from servekit.bench.schema import BenchResult
from servekit.report.figures import PointFiles
from servekit.report.numbers import delta, fmt
from servekit.report.view import Change


def _inputs_changes(before: BenchResult, after: BenchResult, href: str | None) -> list[Change]:
    changes: list[Change] = []
    b, a = before.inputs, after.inputs
    if (b.image or "") != (a.image or ""):
        changes.append(Change("image", b.image or "-", a.image or "-", "changed", None, href))
    for key in sorted(set(b.versions) | set(a.versions)):
        old, new = b.versions.get(key, "-"), a.versions.get(key, "-")
        if old != new:
            changes.append(Change(key, old, new, "changed", None, href))
    return changes


def compare(
    before: BenchResult,
    after: BenchResult,
    files: PointFiles,
    baseline_href: str | None,
) -> tuple[Change, ...]:
    """Every figure measured in both runs, before -> after with the relative delta."""
    changes = _inputs_changes(before, after, baseline_href)
    sim_before = " (simulated)" if before.inputs.engine == "sim" else ""
    sim_after = " (simulated)" if after.inputs.engine == "sim" else ""
    for point in after.points:
        old = before.point(point.workload, point.label)
        if old is None:
            continue
        for name, fig in point.figures.items():
            prev = old.figures.get(name)
            if prev is None or (prev.median is None and fig.median is None):
                continue
            unit = f" {fig.unit}" if fig.unit else ""
            changes.append(
                Change(
                    item=f"{point.workload} {point.label} {name}",
                    before=fmt(prev.median, prev.unit) + unit + sim_before,
                    after=fmt(fig.median, fig.unit) + unit + sim_after,
                    delta=delta(prev.median, fig.median),
                    href=files.get(point.key),
                    baseline_href=baseline_href,
                )
            )
    return tuple(changes)
