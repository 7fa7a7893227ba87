"""Markdown cells (issue 25): one escape, used by every table servekit writes."""

from __future__ import annotations

from hypothesis import given, strategies as st

from servekit.bench.report import workload_grid, workload_table
from servekit.bench.schema import Figure, Point
from servekit.vocabulary import markdown_cell


def _columns(row: str) -> int:
    """Cells of a Markdown table row: ``|`` separators not escaped by a backslash."""
    return row.replace("\\|", "").count("|") - 1


def test_the_bench_table_escapes_a_pipe_in_a_point_label() -> None:
    """The bug of issue 25: bench/report.py wrote cells as they came, so ``a|b`` split one."""
    figures = {"ttft_p50_ms": Figure(unit="ms", median=5.0, runs=(5.0,))}
    point = Point(workload="trace", label="trace a|b.jsonl", figures=figures)
    header, rows = workload_grid([point])
    lines = workload_table([point]).splitlines()
    assert "trace a\\|b.jsonl" in lines[2]
    assert _columns(lines[2]) == _columns(lines[0]) == len(header) == len(rows[0])
    assert rows[0][0] == "trace a|b.jsonl"  # the terminal view keeps the text as it is


@given(st.text(max_size=40))
def test_a_cell_never_splits_a_row_or_ends_it(text: str) -> None:
    cell = markdown_cell(text)
    assert "\n" not in cell and "\r\n" not in cell
    assert _columns(f"| {cell} |") == 1
    assert cell.replace("\\|", "|").replace(" ", "") == text.replace("\r\n", "").replace(
        "\n", ""
    ).replace(" ", "")


def test_a_cell_takes_any_object() -> None:
    assert markdown_cell(3) == "3" and markdown_cell("a|b\nc") == "a\\|b c"
