"""'Honest boundaries': what this run did not cover, and what was simulated.

The seed's release page ends with "two boundaries, stated as they are". Here
they are computed: declared workloads that did not produce a figure, checks
that were skipped, a missing kit, a simulated engine, a quick run, an attached
target, a derived layout. Silence about a gap would read as coverage.
"""

from __future__ import annotations

from servekit.accept import AcceptResult
from servekit.bench import BenchResult
from servekit.report.models import KitCheck, VerifyRun


def _interrupt_lines(run: VerifyRun) -> list[str]:
    stop = run.interrupted
    if stop is None:
        return []
    during = f" while {stop.step} was running" if stop.step else ""
    done = ", ".join(stop.finished) or "no step"
    more = f" ({stop.detail})" if stop.detail else ""
    return [
        f"Interrupted by {stop.signal}{during}{more}: only {done} finished; what ran is "
        "reported as far as it got, nothing after it was measured, and the run does not count."
    ]


def _speed_lines(run: VerifyRun) -> list[str]:
    lines = []
    if run.simulated and run.target and run.accept_speed is None:
        lines.append(
            "The attached simulators' speed is unknown (no engine could be asked and no "
            "--speed was given): figures timed by the client's clock assume real time."
        )
    if run.accept_speed not in (None, 1.0):
        lines.append(
            f"Acceptance ran on simulated time at {run.accept_speed:g}x speed: its verdicts do "
            "not depend on wall time, but its recorded wall times are that much shorter."
        )
    if run.bench_speed not in (None, 1.0):
        lines.append(
            f"The benchmarks ran on simulated time at {run.bench_speed:g}x speed: figures timed "
            "by the client's clock are that much faster than the simulated hardware."
        )
    return lines


def _engine_lines(run: VerifyRun) -> list[str]:
    lines: list[str] = _interrupt_lines(run)
    if run.simulated:
        lines.append(
            "Every figure in this report comes from simulated engines (servekit sim): it "
            "checks the flow, the proxy and the plan, not the hardware or the model. "
            "This run is recorded as simulated and never counts as hardware verification."
        )
    if run.target:
        lines.append(
            f"Attached to a running deployment at {run.target}: this run neither started "
            "nor stopped it, so its launch configuration was not checked against the Plan."
        )
    lines += _speed_lines(run)
    if run.quick:
        lines.append(
            "Quick mode: short prompts and outputs, one run per figure; the figures are a "
            "smoke test, not the seeds' 1024/256 caliber with a median of several runs."
        )
    if run.derived_from:
        lines.append(f"Layout derived from {run.derived_from}; not separately validated upstream.")
    return lines


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _accept_lines(accept: AcceptResult | None) -> list[str]:
    if accept is None:
        return ["The acceptance suite did not run."]
    by_reason: dict[str, list[str]] = {}
    for c in accept.checks:
        if c.verdict == "skip":
            by_reason.setdefault(c.reason, []).append(c.id)
    lines = [
        f"Skipped {_plural(len(ids), 'check')} ({', '.join(ids)}): {reason}; not counted as passed."
        for reason, ids in by_reason.items()
    ]
    needles = [c for c in accept.checks if c.group == "needle"]
    ran = [c for c in needles if c.verdict != "skip"]
    if needles and not ran:
        lines.append("No long-context (needle) check ran.")
    elif ran and accept.contexts:
        sizes = ", ".join(f"{n:,}" for n in accept.contexts)
        lines.append(f"Long-context acceptance ran at {sizes} tokens only.")
    return lines


def _bench_lines(run: VerifyRun, bench: BenchResult | None) -> list[str]:
    if bench is None:
        return ["No benchmark ran; no performance figure is claimed."]
    measured = {p.workload for p in bench.points}  # a layout's single-stream is single_stream
    lines = [
        f"Declared workload {w} produced no figure."
        for w in run.declared_workloads
        if w.replace("-", "_") not in measured
    ]
    for point in bench.points:
        if point.figures and all(f.median is None for f in point.figures.values()):
            lines.append(f"{point.workload} {point.label}: no valid run; no figure is claimed.")
        if point.errors:
            lines.append(f"{point.workload} {point.label}: {point.errors} failed requests.")
        if point.invalid_runs:
            lines.append(
                f"{point.workload} {point.label}: {point.invalid_runs} runs discarded "
                "(another request was running)."
            )
    return lines


def boundaries(
    run: VerifyRun,
    accept: AcceptResult | None,
    bench: BenchResult | None,
    kit: KitCheck | None,
) -> tuple[str, ...]:
    """Every boundary of this run, most important first."""
    lines = _engine_lines(run) + _accept_lines(accept) + _bench_lines(run, bench)
    if kit is None:
        lines.append("No image kit was given (--kit): the image layer was not self-checked.")
    down = run.step("down")
    if down is not None and down.status == "fail":
        lines.append(f"Teardown failed: {down.detail}")
    return tuple(lines)
