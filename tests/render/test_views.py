"""The catalog's tables read whole in an 80-column terminal: nothing cut to ``re…``.

``layouts list``, ``layouts show``, ``defaults`` and ``kit`` tables go
through :mod:`servekit.termtable` (or move long text below the table), so at
80 columns every cell is shown whole: no line is wider than the terminal, no
cell ends in an ellipsis, and the short cells (names, states, numbers) stay on
one line.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from servekit.catalog.ledger import verification_status
from servekit.catalog.loader import layout_names, load, load_all
from servekit.render import views
from servekit.render.plan import build_plan

WIDTHS = [80, 100]


def console(width: int) -> Console:
    return Console(width=width, file=io.StringIO(), color_system=None)


def text_of(con: Console) -> str:
    out: str = con.file.getvalue()  # type: ignore[attr-defined]
    assert all(len(line) <= con.width for line in out.splitlines()), out
    assert "…" not in out, out
    return out


def squashed(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


@pytest.mark.parametrize("width", WIDTHS)
def test_layouts_list_shows_every_cell_whole(width: int) -> None:
    con = console(width)
    views.print_list(None, con)
    out = text_of(con)
    lines = out.splitlines()
    for loaded in load_all():
        lay = loaded.layout
        status = verification_status(loaded)
        row = next(line for line in lines if f" {lay.name} " in line)
        assert lay.hardware.accelerator in row and status.state in row
        assert views.topology(lay) in row
        assert squashed(status.reason) in squashed(out)


def test_layouts_list_loses_nothing_even_at_60_columns() -> None:
    con = console(60)
    views.print_list(None, con)
    out = squashed(text_of(con))
    for loaded in load_all():
        assert loaded.layout.name in out
        assert squashed(verification_status(loaded).reason) in out


def test_layouts_list_is_one_table_when_the_terminal_is_wide_enough() -> None:
    con = console(400)
    views.print_list(None, con)
    out = text_of(con)
    assert out.count("┏") == 1
    assert "why" in out


@pytest.mark.parametrize("name", layout_names(load_all()[0].path.parents[2]))
def test_layouts_show_fits_80_columns(name: str) -> None:
    con = console(80)
    views.print_show(name, None, con)
    out = squashed(text_of(con))
    for p in build_plan(load(name).layout).processes:
        assert f" {p.name} " in f" {out} "


def test_defaults_fit_80_columns() -> None:
    con = console(80)
    views.print_defaults(None, None, con)
    out = squashed(text_of(con))
    assert "gpu_memory_utilization" in out and "DecodeGuardMiddleware" in out.replace(" ", "")
