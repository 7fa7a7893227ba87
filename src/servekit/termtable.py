"""Tables that fit the terminal: as they are, transposed, or split, never cut to ``re…``.

rich shrinks a table wider than the terminal by cutting every column, which
turned ``bench --workload rate`` at 80 columns into ``re…``, ``ou…``. Here a
grid (a header and rows of strings, first column the row label) is shown:

1. as is, when its natural width fits;
2. as is with its cells wrapped, when it has at least as many rows as value
   columns (turning it would only make it wider);
3. transposed (one row per column of the grid, one column per row), when that
   fits: a benchmark has many figures and few points, so this is the usual case;
4. transposed and split into several tables of as many point columns as fit,
   the label column repeated in each.

Cells never lose characters: a cell wider than its share wraps (``fold``), and
cells are plain text (a unit such as ``[req/s]`` is not read as rich markup).
The full grid stays in the Markdown and JSON outputs; this is only the view.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

Grid = tuple[Sequence[str], Sequence[Sequence[str]]]


def _table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    title: str | None,
    wrap_label: bool = False,
) -> Table:
    table = Table(title=None if title is None else Text(title), title_justify="left")
    for i, name in enumerate(header):
        table.add_column(Text(name), overflow="fold", no_wrap=i == 0 and not wrap_label)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


def natural_width(console: Console, table: Table) -> int:
    """The width ``table`` takes when nothing wraps."""
    options = console.options.update_width(10**6)
    return Measurement.get(console, options, table).maximum


def transpose(header: Sequence[str], rows: Sequence[Sequence[str]]) -> Grid:
    """Rows become columns: the first header cell stays the corner label."""
    new_header = [header[0], *(row[0] for row in rows)]
    new_rows = [[name, *(row[i] for row in rows)] for i, name in enumerate(header) if i > 0]
    return new_header, new_rows


def _split(header: Sequence[str], rows: Sequence[Sequence[str]], per: int) -> list[Grid]:
    """Column groups of at most ``per`` value columns, each with the label column."""
    groups: list[Grid] = []
    for start in range(1, len(header), per):
        cols = [0, *range(start, min(start + per, len(header)))]
        groups.append(([header[c] for c in cols], [[row[c] for c in cols] for row in rows]))
    return groups


def fit_tables(
    console: Console,
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    title: str | None = None,
    width: int | None = None,
) -> list[Table]:
    """The grid as tables that fit ``width`` (the console's width by default)."""
    width = width or console.width
    plain = _table(header, rows, title)
    if not rows or natural_width(console, plain) <= width:
        return [plain]
    if len(rows) >= len(header) - 1:  # taller than wide: turning it would only widen it
        return [_table(header, rows, title, wrap_label=True)]
    t_header, t_rows = transpose(header, rows)
    for per in range(len(t_header) - 1, 0, -1):
        groups = _split(t_header, t_rows, per)
        tables = [_table(h, r, title if i == 0 else None) for i, (h, r) in enumerate(groups)]
        if all(natural_width(console, t) <= width for t in tables) or per == 1:
            return tables
    return [plain]
