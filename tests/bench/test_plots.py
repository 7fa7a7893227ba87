"""Throughput plots draw the spread of a rate as the runs' min to max, never below zero.

The release report of a fresh ``make demo`` drew per-stream decode at about
94 tok/s with a bar down to about -180: the bar was the larger distance to the
min or the max, drawn on both sides. A skewed sample (one slow run far above the
rest) is where that shows; the bars drawn on the figure are read back from
matplotlib, and the figure must say what they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servekit.bench import plots
from servekit.bench.schema import BenchInputs, BenchResult, Figure, Point
from servekit.bench.stats import figure


def _point(streams: int, runs: list[float]) -> Point:
    rate = figure(runs, "tok/s")
    return Point(
        workload="multi_stream",
        label=f"N={streams}",
        params={"streams": streams},
        figures={"total_tok_per_s": rate, "per_stream_tok_per_s": rate},
    )


SKEWED = [_point(1, [10.0, 12.0, 400.0]), _point(2, [0.0, 30.0, 31.0]), _point(4, [5.0, 5.0, 5.0])]


def _drawn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """The matplotlib figure the throughput plot draws, kept open for reading."""
    kept: list[Any] = []

    def keep(fig: Any, path: Path) -> Path:
        kept.append(fig)
        return path

    monkeypatch.setattr(plots, "_save", keep)
    plots.throughput_plot(SKEWED, "streams", ("total_tok_per_s",), tmp_path / "p.png")
    return kept[0]


def test_no_bar_goes_below_zero_for_a_skewed_sample(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fig = _drawn(monkeypatch, tmp_path)
    (ax,) = fig.axes
    (bars,) = ax.containers
    _line, _caps, (segments,) = bars.lines
    spans = [(seg[0][1], seg[1][1]) for seg in segments.get_segments()]
    # Each bar is exactly the runs' range: [10, 400], [0, 31], [5, 5].
    assert spans == [(10.0, 400.0), (0.0, 31.0), (5.0, 5.0)]
    assert min(low for low, _ in spans) >= 0
    assert plots.SPREAD in ax.get_title()
    plots._pyplot().close(fig)


def test_the_series_keeps_a_min_of_zero_and_a_figure_without_runs() -> None:
    bare = Point(
        workload="multi_stream",
        label="N=8",
        params={"streams": 8},
        figures={"total_tok_per_s": Figure(unit="tok/s", median=3.0)},
    )
    xs, ys, (below, above) = plots._series([SKEWED[1], bare], "streams", "total_tok_per_s")
    assert (xs, ys, below, above) == ([2.0, 8.0], [30.0, 3.0], [30.0, 0.0], [1.0, 0.0])


def test_the_rendered_plot_is_written(tmp_path: Path) -> None:
    result = BenchResult(
        created="2026-01-01T00:00:00Z",
        inputs=BenchInputs(target="sim", entry_url="http://127.0.0.1:1"),
        points=tuple(SKEWED),
    )
    (path,) = plots.write_plots(result, tmp_path)
    assert path.read_bytes().startswith(b"\x89PNG")
