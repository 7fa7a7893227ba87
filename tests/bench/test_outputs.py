"""Result files: JSON round trip, baseline deltas, Markdown, plots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servekit.bench import (
    SCHEMA_VERSION,
    BenchResult,
    ConcurrencySweep,
    MultiStream,
    RunSettings,
    compare,
    render_section,
    run_workloads,
    write_outputs,
)
from servekit.bench.records import RECORDS_FILE, read_rows
from servekit.bench.report import cell
from servekit.bench.schema import BenchInputs, Figure, Point
from servekit.deployment import Deployment
from servekit.errors import UsageError
from servekit.numbers import fmt

from .conftest import Engine


def _result(tok_s: float, ms: float) -> BenchResult:
    figures = {
        "tok_per_s": Figure(
            unit="tok/s", median=tok_s, min=tok_s - 1, max=tok_s + 1, runs=(tok_s,)
        ),
        "ms_per_step": Figure(unit="ms", median=ms, min=ms, max=ms, runs=(ms,)),
    }
    point = Point(workload="single_stream", label="ISL=1024", figures=figures, requests=3)
    inputs = BenchInputs(target="t", entry_url="http://127.0.0.1:1")
    return BenchResult(created="2026-10-05T00:00:00+00:00", inputs=inputs, points=(point,))


def test_baseline_rows_are_before_after_with_delta_and_direction() -> None:
    rows = compare(_result(113.4, 25.28), _result(116.4, 24.84))
    by_name = {r.figure: r for r in rows}
    assert by_name["tok_per_s"].change == pytest.approx(116.4 / 113.4 - 1)
    assert by_name["tok_per_s"].better is True
    assert by_name["ms_per_step"].better is True  # lower is better for times
    text = render_section(_result(116.4, 24.84), baseline=_result(113.4, 25.28))
    assert "113.4 -> 116.4 (+2.6%) better" in text
    assert "25.28 -> 24.84 (-1.7%) better" in text


def test_cells_show_median_and_range_like_the_seeds() -> None:
    assert fmt(2_987_727, "tokens") == "2,987,727"
    assert fmt(7135.2) == "7,135" and fmt(116.44) == "116.4" and fmt(24.844) == "24.84"
    assert (
        cell(Figure(unit="tok/s", median=5.0, min=4.0, max=6.0, runs=(4, 5, 6)))
        == "5.00 (4.00-6.00)"
    )
    assert cell(Figure(unit="ms", median=None)) == "n/a"


@pytest.mark.slow
def test_written_result_reads_back_identically_and_is_a_baseline(
    engine: Engine, tmp_path: Path
) -> None:
    workloads = [
        MultiStream(streams=(1, 2), input_tokens=16, output_tokens=4),
        ConcurrencySweep(concurrencies=(1, 2), requests=4, input_tokens=16, output_tokens=4),
    ]
    result = run_workloads(Deployment(entry_url=engine.url), workloads, RunSettings(runs=2))
    paths = write_outputs(result, tmp_path / "out")
    names = sorted(p.name for p in paths)
    assert names == sorted(
        [
            "bench.json",
            "bench.md",
            "requests.jsonl",
            "multi_stream.png",
            "concurrency_sweep.png",
            "concurrency_sweep_latency.png",
        ]
    )
    for p in paths:
        assert p.stat().st_size > 0
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    raw = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert raw["schema_version"] == SCHEMA_VERSION
    assert raw["inputs"]["workloads"][0]["kind"] == "multi_stream"
    again = BenchResult.read(tmp_path / "out" / "bench.json")
    rows = read_rows(tmp_path / "out" / RECORDS_FILE)
    assert len(rows) == 2 * (4 + 4)  # two runs of two sweep points of four requests
    assert again.with_requests(rows) == result
    rows = compare(again, result)
    assert rows and all(r.change == 0.0 for r in rows if r.before)
    md = (tmp_path / "out" / "bench.md").read_text()
    assert "## Benchmarks" in md and "| N=2 |" in md and "| C=2 |" in md
    assert "\n\n## Benchmarks" in md
    # No SLO was given, so no goodput column is printed.
    assert "goodput" not in md


def test_a_file_that_is_not_a_result_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"schema_version": "other/9"}')
    with pytest.raises(UsageError, match=r"not a servekit\.bench/1 result"):
        BenchResult.read(bad)
    with pytest.raises(UsageError, match="no such file"):
        BenchResult.read(tmp_path / "missing.json")
