"""Tables fitted to the terminal: nothing is cut, whatever the width."""

from __future__ import annotations

import io

from hypothesis import given, settings, strategies as st
from rich.console import Console

from servekit.termtable import fit_tables, natural_width, transpose

WORD = st.text(alphabet="abcdefghij_[]/=.0123456789", min_size=1, max_size=14)


def shown(width: int, header: list[str], rows: list[list[str]]) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    for table in fit_tables(console, header, rows):
        console.print(table)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert all(len(line) <= width for line in out.splitlines())
    return out


def test_a_wide_grid_of_few_rows_is_transposed_to_fit() -> None:
    header = ["point", *(f"figure_{i}_tok_per_s [tok/s]" for i in range(8))]
    rows = [["rate=4/s", *(f"{i}.25 (1.0-9.5)" for i in range(8))]]
    out = shown(80, header, rows)
    assert "…" not in out
    for cell in header[1:] + rows[0][1:]:
        assert cell in out


def test_a_narrow_enough_grid_stays_as_it_is() -> None:
    out = shown(80, ["point", "tok/s"], [["N=1", "12.5"], ["N=4", "40.0"]])
    assert out.index("N=1") < out.index("N=4")
    assert out.count("point") == 1


def test_markup_like_units_are_shown_verbatim() -> None:
    out = shown(80, ["point", "request_throughput [req/s]"], [["a", "[bold]x[/bold]"]])
    assert "request_throughput [req/s]" in out and "[bold]x[/bold]" in out


def test_transpose_swaps_rows_and_columns() -> None:
    header, rows = transpose(["p", "a", "b"], [["r1", "1", "2"], ["r2", "3", "4"]])
    assert header == ["p", "r1", "r2"]
    assert rows == [["a", "1", "3"], ["b", "2", "4"]]


@settings(max_examples=60, deadline=None)
@given(
    width=st.integers(min_value=40, max_value=160),
    columns=st.integers(min_value=2, max_value=12),
    data=st.data(),
)
def test_every_cell_survives_at_any_width(width: int, columns: int, data: st.DataObject) -> None:
    header = data.draw(st.lists(WORD, min_size=columns, max_size=columns, unique=True))
    n_rows = data.draw(st.integers(min_value=1, max_value=6))
    rows = [data.draw(st.lists(WORD, min_size=columns, max_size=columns)) for _ in range(n_rows)]
    out = shown(width, header, rows)
    assert "…" not in out
    flat = "".join(out.split())
    for cell in [*header, *(c for r in rows for c in r)]:
        assert all(ch in flat for ch in cell)


def test_natural_width_measures_without_wrapping() -> None:
    console = Console(width=40, file=io.StringIO())
    (table,) = fit_tables(console, ["a", "b"], [["x" * 10, "y" * 10]], width=200)
    assert natural_width(console, table) > 20
