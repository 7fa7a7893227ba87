"""PNG plots: throughput against load, and latency distributions.

matplotlib with the Agg backend (no display); each plot is rendered to bytes
and written atomically. Plots exist only for workloads that were measured.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from servekit.bench.report import grouped
from servekit.bench.schema import BenchResult, Point
from servekit.vocabulary import atomic_write_bytes


def _pyplot() -> Any:
    """pyplot on the Agg backend, imported only when a plot is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: object, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")  # type: ignore[attr-defined]
    atomic_write_bytes(path, buf.getvalue())
    _pyplot().close(fig)
    return path


SPREAD = "points: median over runs; bars: min to max over runs"
"""What a throughput plot's bars show, written on the plot. Rates cannot be negative,
so the spread is the runs' own range, never a symmetric +/- that crosses zero."""


def _series(
    points: list[Point], x: str, y: str
) -> tuple[list[float], list[float], list[list[float]]]:
    """(loads, medians, [below, above]): each bar runs from the runs' min to their max."""
    xs, ys, below, above = [], [], [], []
    for p in points:
        fig = p.figures.get(y)
        if fig is None or fig.median is None:
            continue
        low = fig.median if fig.min is None else min(fig.min, fig.median)
        high = fig.median if fig.max is None else max(fig.max, fig.median)
        xs.append(float(p.params[x]))
        ys.append(fig.median)
        below.append(fig.median - low)
        above.append(high - fig.median)
    return xs, ys, [below, above]


def integer_ticks(ax: Any, xs: list[float]) -> None:
    """Counts (streams, concurrency) on the axis as the integers measured, not 1.0/1.5/2.0."""
    if xs and all(v.is_integer() for v in xs):
        ticks = sorted(set(xs))
        ax.set_xticks(ticks, [str(int(v)) for v in ticks])


def throughput_plot(points: list[Point], x: str, ys: tuple[str, ...], path: Path) -> Path:
    """Figures (medians, with bars from the runs' min to max) against the load parameter ``x``."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in ys:
        xs, vals, err = _series(points, x, name)
        if xs:
            ax.errorbar(xs, vals, yerr=err, marker="o", capsize=3, label=name)
    ax.set_xlabel(x)
    integer_ticks(ax, [float(p.params[x]) for p in points if x in p.params])
    ax.set_ylabel(points[0].figures[ys[0]].unit if ys[0] in points[0].figures else "")
    ax.set_title(f"{points[0].workload}: throughput vs {x}\n{SPREAD}", fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def latency_plot(points: list[Point], path: Path) -> Path:
    """Box plots of per-request TTFT, TPOT and E2EL for each sweep point."""
    plt = _pyplot()
    metrics = ("ttft_ms", "tpot_ms", "e2el_ms")
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    for ax, metric in zip(axes, metrics, strict=True):
        data = [
            [v for run in p.evidence.get("per_request", []) for v in run.get(metric, [])]
            for p in points
        ]
        ax.boxplot([d or [0.0] for d in data], tick_labels=[p.label for p in points])
        ax.set_title(metric)
        ax.tick_params(axis="x", rotation=30)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{points[0].workload}: latency distributions")
    return _save(fig, path)


def goodput_plot(points: list[Point], path: Path) -> Path:
    """Request throughput beside goodput (requests meeting every SLO) for each point."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = list(range(len(points)))
    for shift, name in ((-0.2, "request_throughput"), (0.2, "goodput")):
        vals = [(p.figures[name].median or 0.0) if name in p.figures else 0.0 for p in points]
        ax.bar([x + shift for x in xs], vals, width=0.4, label=name)
    ax.set_xticks(xs, [p.label for p in points], rotation=30)
    ax.set_ylabel("req/s")
    slo = points[0].evidence.get("slo_ms") or {}
    limits = ", ".join(f"{k}<={v:g}ms" for k, v in slo.items())
    ax.set_title(f"{points[0].workload}: goodput ({limits})")
    ax.grid(alpha=0.3, axis="y")
    ax.legend()
    return _save(fig, path)


def _has_goodput(points: list[Point]) -> bool:
    return any(p.figures.get("goodput") and p.figures["goodput"].median is not None for p in points)


def write_plots(result: BenchResult, out_dir: Path) -> list[Path]:
    """Every plot that applies to the measured workloads."""
    groups = grouped(result)
    written: list[Path] = []
    if pts := groups.get("multi_stream"):
        ys: tuple[str, ...] = ("total_tok_per_s", "per_stream_tok_per_s")
        written.append(throughput_plot(pts, "streams", ys, out_dir / "multi_stream.png"))
    if pts := groups.get("prefill"):
        ys = ("prefill_tok_per_s",)
        written.append(throughput_plot(pts, "streams", ys, out_dir / "prefill.png"))
    for workload, x in (("concurrency_sweep", "concurrency"), ("rate_sweep", "rate")):
        if pts := groups.get(workload):
            ys = ("output_throughput", "total_token_throughput")
            written.append(throughput_plot(pts, x, ys, out_dir / f"{workload}.png"))
            written.append(latency_plot(pts, out_dir / f"{workload}_latency.png"))
    if pts := groups.get("trace"):
        written.append(latency_plot(pts, out_dir / "trace_latency.png"))
    for workload in ("concurrency_sweep", "rate_sweep", "trace"):
        if (pts := groups.get(workload)) and _has_goodput(pts):
            written.append(goodput_plot(pts, out_dir / f"{workload}_goodput.png"))
    return written
