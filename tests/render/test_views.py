"""The catalog's tables read whole in an 80-column terminal: nothing cut to ``re…``.

``layouts list``, ``layouts show``, ``defaults`` and ``kit`` tables go
through :mod:`servekit.termtable` (or move long text below the table), so at
80 columns every cell is shown whole: no line is wider than the terminal, no
cell ends in an ellipsis, and the short cells (names, states, numbers) stay on
one line.
"""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from servekit.catalog.ledger import verification_status
from servekit.catalog.loader import layout_names, load, load_all, packaged_catalog
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


@pytest.mark.slow
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


@pytest.mark.parametrize("name", layout_names(packaged_catalog()))
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


def test_layouts_list_json_gives_each_imported_layout_its_source_folder() -> None:
    items = json.loads(views.list_json(None))
    imported = [i for i in items if i["name"].count("/") == 2]
    assert len(imported) == 25
    assert {(i["source"]["repo"], i["source"]["commit"][:7]) for i in imported} == {
        ("xuopoj/ma-vllm-samples", "64fc020")
    }
    assert len({i["source"]["folder"] for i in imported}) == 25
    for i in imported:
        hw, model, topology = i["name"].split("/")
        assert i["source"]["folder"] == f"models/{model}-{hw}/{topology}"
        assert i["source_claim"] in ("verified", "unverified") and i["status"]
        assert i["derived"]


def test_layouts_list_is_grouped_by_model_then_hardware_then_topology() -> None:
    items = json.loads(views.list_json(None))
    keys = [(i["model"], i["hardware"], i["name"]) for i in items]
    assert keys == sorted(keys)
    rows = [cells for cells, _ in views.list_rows(None)]
    assert [r[1] for r in rows] == [i["name"] for i in items]
    qwen = [r for r in rows if r[0] == "qwen3.5-397b-a17b"]
    assert [r[1] for r in qwen] == [
        "a2/qwen3.5-397b-a17b/2nodes",
        "a3/qwen3.5-397b-a17b/1node",
        "a3/qwen3.5-397b-a17b/1p1x2d",
    ]
