"""An old name is an alias (aliases.yaml): it loads its layout, and the catalog lists one name.

Commands take the old name and write under the layout's own folder; ``layouts list``
shows the layout once with its aliases; ``layouts show OLD`` says it is an alias.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from servekit.catalog.loader import layout_names, load, packaged_catalog
from servekit.render.views import list_json, print_show

CANONICAL = "a3/deepseekv4-flash/1p1d"


def _catalog(tmp_path: Path) -> Path:
    root = tmp_path / "catalog"
    shutil.copytree(packaged_catalog(), root)
    (root / "aliases.yaml").write_text(f"a3/old-1p1d: {CANONICAL}\n", encoding="utf-8")
    return root


def test_an_alias_loads_its_layouts_folder_and_names_itself(tmp_path: Path) -> None:
    root = _catalog(tmp_path)
    loaded = load("a3/old-1p1d", root)
    assert loaded.layout.name == CANONICAL
    assert loaded.folder == root / CANONICAL  # what a command writes goes here
    assert loaded.alias == "a3/old-1p1d"
    assert loaded.aliases == ["a3/old-1p1d"]
    assert load(CANONICAL, root).alias is None


def test_list_shows_a_layout_once_with_its_aliases(tmp_path: Path) -> None:
    root = _catalog(tmp_path)
    items = json.loads(list_json(root))
    names = [i["name"] for i in items]
    assert "a3/old-1p1d" not in names and names.count(CANONICAL) == 1
    assert "a3/old-1p1d" not in layout_names(root)
    by_name = {i["name"]: i["aliases"] for i in items}
    assert by_name[CANONICAL] == ["a3/old-1p1d"]
    assert by_name["a3/dsv41-tp8"] == []  # positive control: no alias, none shown


def test_show_by_alias_says_it_is_an_alias(tmp_path: Path) -> None:
    root = _catalog(tmp_path)
    console = Console(width=200, file=io.StringIO(), color_system=None)
    print_show("a3/old-1p1d", root, console)
    out: str = console.file.getvalue()  # type: ignore[attr-defined]
    assert out.startswith(f"{CANONICAL}: ")
    assert f"a3/old-1p1d is an alias of {CANONICAL}" in out


def test_a_ledger_record_made_under_an_alias_counts_for_the_layout(tmp_path: Path) -> None:
    from tests.catalog.test_ledger import record

    from servekit.catalog.ledger import ledger_path, ledger_records, verification_status

    root = _catalog(tmp_path)
    loaded = load(CANONICAL, root)
    assert ledger_path(load("a3/old-1p1d", root)) == root / CANONICAL / "verification.jsonl"
    old = record(loaded, layout="a3/old-1p1d")
    other = record(loaded, layout="a3/someone-else")
    (root / CANONICAL / "verification.jsonl").write_text(
        old.model_dump_json() + "\n" + other.model_dump_json() + "\n", encoding="utf-8"
    )
    names = [r.layout for r in ledger_records(loaded)]
    assert names == [CANONICAL, "a3/someone-else"]  # an unrelated name stays unrelated
    status = verification_status(load("a3/old-1p1d", root))
    assert status.record is not None and status.record.layout == CANONICAL


def _same_plans(root: Path) -> list[tuple[str, str]]:
    """(name, earlier name) for each listed layout whose Plan an earlier one has."""
    from servekit.importer.api import plan_signature

    seen: dict[str, str] = {}
    same = []
    for name in layout_names(root):
        lay = load(name, root).layout
        key = repr((lay.nodes, lay.hardware, plan_signature(lay)))
        if key in seen:
            same.append((name, seen[key]))
        seen.setdefault(key, name)
    return same


@pytest.mark.slow
def test_no_two_listed_names_have_equal_plans(tmp_path: Path) -> None:
    """One name per layout: every listed layout's Plan differs from every other's."""
    assert _same_plans(packaged_catalog()) == []
    # positive control: a layout copied under another name (as a3/1p1d was) is caught
    root = tmp_path / "catalog"
    shutil.copytree(packaged_catalog(), root)
    twin = root / "a3" / "twin-1p1d"
    twin.mkdir()
    text = (root / CANONICAL / "layout.yaml").read_text(encoding="utf-8")
    (twin / "layout.yaml").write_text(
        text.replace(f"name: {CANONICAL}\n", "name: a3/twin-1p1d\n", 1), encoding="utf-8"
    )
    assert _same_plans(root) == [("a3/twin-1p1d", CANONICAL)]  # names are listed sorted
