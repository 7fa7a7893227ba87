"""'What changed': this run against a baseline benchmark result, before -> after.

The baseline is a saved ``bench.json`` (``--baseline FILE``), copied into the
run folder so the comparison can be rebuilt. Image and engine versions are
compared too, because a figure moved by an image change is the usual story.
"""

from __future__ import annotations

from servekit.bench import BenchResult, compare as bench_compare
from servekit.numbers import delta, fmt
from servekit.report.figures import PointFiles
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
    for d in bench_compare(before, after):  # the bench's own rule for what is comparable
        point = after.point(d.workload, d.label)
        unit = f" {d.unit}" if d.unit else ""
        changes.append(
            Change(
                item=f"{d.workload} {d.label} {d.figure}",
                before=fmt(d.before, d.unit) + unit + sim_before,
                after=fmt(d.after, d.unit) + unit + sim_after,
                delta=delta(d.before, d.after),
                href=files.get(point.key) if point is not None else None,
                baseline_href=baseline_href,
            )
        )
    return tuple(changes)
