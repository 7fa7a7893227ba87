"""Markdown for a BenchResult: summary tables, the baseline table, a report section.

Every cell is "median (min-max)" over the runs, so spread is never hidden;
errors and invalid runs get their own columns. :func:`render_section` is what
the release report embeds; :func:`render_markdown` is the standalone file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from servekit.bench.baseline import Delta, compare, not_compared
from servekit.bench.config import SLOName
from servekit.bench.schema import BenchResult, Figure, Point
from servekit.numbers import fmt, signed_percent
from servekit.vocabulary import markdown_cell

KEY_FIGURES: dict[str, tuple[str, ...]] = {
    "single_stream": ("tok_per_s", "ms_per_step", "acceptance_length", "ttft_ms"),
    "multi_stream": (
        "total_tok_per_s",
        "per_stream_tok_per_s",
        "ms_per_step",
        "acceptance_length",
        "ttft_p50_ms",
    ),
    "prefill": ("prefill_tok_per_s", "ttft_p50_ms"),
    "rate_sweep": (
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "goodput",
        "ttft_p50_ms",
        "ttft_p99_ms",
        "tpot_p50_ms",
        "itl_p50_ms",
        "itl_p99_ms",
        "e2el_p50_ms",
        "e2el_p99_ms",
        "harness_loop_lag_p99_ms",
    ),
    "kv_capacity": ("kv_cache_tokens",),
}
KEY_FIGURES["concurrency_sweep"] = KEY_FIGURES["rate_sweep"]
KEY_FIGURES["trace"] = (
    *KEY_FIGURES["rate_sweep"][:-1],
    "lateness_p50_ms",
    "lateness_p99_ms",
    "lateness_max_ms",
    "prefix_cache_hit_rate",
    "prefix_cache_hits",
    "harness_loop_lag_p99_ms",
)

TITLES = {
    "single_stream": "Single-stream decode",
    "multi_stream": "Multi-stream decode",
    "prefill": "Prefill (cold prefix)",
    "rate_sweep": "Request-rate sweep",
    "concurrency_sweep": "Concurrency sweep",
    "trace": "Trace replay",
    "kv_capacity": "KV cache capacity",
}


def cell(fig: Figure | None) -> str:
    """'median (min-max)'; a single run shows just the value."""
    if fig is None or fig.median is None:
        return "n/a"
    if len(fig.runs) <= 1 or fig.min == fig.max:
        return fmt(fig.median, fig.unit)
    return f"{fmt(fig.median, fig.unit)} ({fmt(fig.min, fig.unit)}-{fmt(fig.max, fig.unit)})"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table; every cell escaped (a point label may hold a ``|``)."""
    lines = ["| " + " | ".join(map(markdown_cell, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(markdown_cell, r)) + " |" for r in rows]
    return "\n".join(lines)


def _has(point: Point, name: str) -> bool:
    fig = point.figures.get(name)
    return fig is not None and fig.median is not None


def workload_table(points: Sequence[Point]) -> str:
    """One table for the points of one workload (columns nobody measured are left out)."""
    return _table(*workload_grid(points))


def workload_grid(points: Sequence[Point]) -> tuple[list[str], list[list[str]]]:
    """The header and rows of :func:`workload_table` (the terminal view fits these)."""
    names = KEY_FIGURES.get(points[0].workload) or tuple(points[0].figures)
    measured = tuple(n for n in names if any(_has(p, n) for p in points))
    names = measured or names
    units = {n: next((p.figures[n].unit for p in points if n in p.figures), "") for n in names}
    header = ["point", *(f"{n} [{units[n]}]" for n in names), "requests", "errors", "invalid"]
    rows = [
        [
            p.label,
            *(cell(p.figures.get(n)) for n in names),
            str(p.requests),
            str(p.errors),
            str(p.invalid_runs),
        ]
        for p in points
    ]
    return header, rows


def delta_table(rows: Sequence[Delta]) -> str:
    """The seeds' table: before -> after (delta), marked better or worse."""
    return _table(*delta_grid(rows))


def delta_grid(rows: Sequence[Delta]) -> tuple[list[str], list[list[str]]]:
    """The header and rows of :func:`delta_table`."""
    body = []
    for d in rows:
        change = signed_percent(d.change)
        mark = {True: " better", False: " worse", None: ""}[d.better]
        body.append(
            [
                f"{d.workload} {d.label}",
                f"{d.figure} [{d.unit}]",
                f"{fmt(d.before, d.unit)} -> {fmt(d.after, d.unit)} ({change}){mark}",
            ]
        )
    return ["point", "figure", "before -> after (delta)"], body


def grouped(result: BenchResult) -> dict[str, list[Point]]:
    groups: dict[str, list[Point]] = {}
    for p in result.points:
        groups.setdefault(p.workload, []).append(p)
    return groups


def speed_line(speed: float) -> str:
    """What the simulated speed of a run means for its figures."""
    if speed == 1.0:
        return "Simulated engines at real time (speed 1): wall-clock figures are comparable."
    return (
        f"Simulated engines at {speed:g}x speed: figures timed by the client's clock are "
        f"about {speed:g}x faster than the simulated hardware; /metrics figures are not."
    )


def render_section(result: BenchResult, baseline: BenchResult | None = None, level: int = 2) -> str:
    """The benchmark section of a release report (Markdown, heading at ``level``)."""
    h = "#" * level
    inp = result.inputs
    parts = [
        f"{h} Benchmarks",
        "",
        f"Target `{inp.target}` ({inp.engine}, model `{inp.model}`), "
        f"{inp.settings.runs} runs per figure, median (min-max); measured {result.created} "
        f"by {inp.harness}. Definitions: docs/bench.md.",
    ]
    if inp.note:
        parts += ["", f"Note: {inp.note}"]
    if inp.sim_speed is not None:
        parts += ["", speed_line(inp.sim_speed)]
    if inp.settings.slo_ms:
        parts += ["", goodput_line(inp.settings.slo_ms)]
    for workload, points in grouped(result).items():
        parts += ["", f"{h}# {TITLES.get(workload, workload)}", "", workload_table(points)]
        parts += [trace_line(p) for p in points if p.workload == "trace"]
    if baseline is not None:
        rows = compare(baseline, result)
        parts += ["", f"{h}# Against the baseline ({baseline.created})", ""]
        parts.append(delta_table(rows) if rows else "No figure in common with the baseline.")
        parts += [f"\nNot compared (definitions differ): {why}." for why in not_compared(baseline)]
    return "\n".join(parts) + "\n"


def goodput_line(slo_ms: Mapping[SLOName, float]) -> str:
    """What goodput counts: requests meeting every SLO, per second."""
    limits = ", ".join(f"{name} <= {ms:g} ms" for name, ms in slo_ms.items())
    return f"Goodput: requests per second meeting every SLO ({limits}), as vllm bench serve."


def trace_line(point: Point) -> str:
    """The replay's shape and the prefix reuse the trace itself implies, under its table."""
    p, ev = point.params, point.evidence
    rate = ev.get("trace_hit_rate")
    implied = f"{rate:.1%}" if isinstance(rate, float) else "n/a"
    return (
        f"\n{point.label}: {p.get('trace_requests')} requests over "
        f"{float(p.get('trace_span_s', 0)):g} s of trace time at {float(p.get('clock_factor', 1)):g}x; "
        f"{ev.get('trace_blocks')} blocks, {ev.get('trace_distinct_blocks')} distinct "
        f"(a perfect prefix cache would hit {implied}); lateness in the "
        f"{ev.get('lateness_clock', 'wall')} clock."
    )


def render_markdown(result: BenchResult, baseline: BenchResult | None = None) -> str:
    """A standalone Markdown report with the inputs spelled out."""
    inp = result.inputs
    versions = ", ".join(f"{k} {v}" for k, v in sorted(inp.versions.items())) or "unknown"
    head = [
        f"# servekit bench: {inp.target}",
        "",
        f"- entry: {inp.entry_url}",
        f"- layout: {inp.layout or 'n/a'}; engine: {inp.engine}; image: {inp.image or 'n/a'}"
        + (f"; simulated speed {inp.sim_speed:g}x" if inp.sim_speed is not None else ""),
        f"- versions: {versions}",
        f"- schema: {result.schema_version}; duration {result.duration_s:.1f} s",
        "",
    ]
    return "\n".join(head) + "\n" + render_section(result, baseline, level=2)
