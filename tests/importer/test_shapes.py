"""Any folder that runs on the platform imports, and renders back to its own commands.

Five folders in shapes none of the source's 25 has (tests/importer/shapes.py: other
script names, a single flat run.sh, a ``case`` on the rank with inline ``vllm
serve`` and a proxy the folder does not ship, a Python launcher, another entry
name; none has a meta.yaml), each imported with ``servekit layouts import`` into an
empty catalog of its own (one sandboxed run per folder, shared by the module), then
its Plan compared with the facts the run recorded: 0 differences but the recorded
deviations, and render's rules find no error.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.importer import shapes
from tests.importer.test_synthesize import _doc, _unrecorded

from servekit.catalog import LayoutsImportOptions, load
from servekit.errors import UsageError
from servekit.importer.api import import_layout
from servekit.render import check_layout

# (writer, layout name, --nodes, --entry, node count, where the count came from)
SHAPES: dict[str, tuple[Callable[[Path], Path], str, int | None, str, int, str]] = {
    "renamed": (shapes.renamed, "a3/shapeone/1p1d", None, "run.sh", 2, "naming grammar"),
    "flat": (shapes.flat, "a2/shapetwo/my-flat-layout", None, "run.sh", 2, "ran run.sh"),
    "case-inline": (shapes.case_inline, "a3/shapethree/pd-inline", 2, "run.sh", 2, "--nodes"),
    "python-launcher": (
        shapes.python_launcher,
        "a3/shapefour/py-launched",
        2,
        "run.sh",
        2,
        "--nodes",
    ),
    "other-entry": (shapes.other_entry, "a3/shapefive/solo", 1, "start.sh", 1, "--nodes"),
}


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    """Each shape imported once into its own empty catalog: (catalog, import's answer)."""
    out = {}
    for key, (write, _name, nodes, entry, _count, _said) in SHAPES.items():
        base = tmp_path_factory.mktemp(key)
        catalog = base / "catalog"
        catalog.mkdir()
        folder = write(base / "models")
        opts = LayoutsImportOptions(folder=folder, nodes=nodes, entry=entry, catalog=catalog)
        out[key] = (catalog, import_layout(opts))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("key", SHAPES)
def test_the_folder_imports_without_meta_with_its_node_count(
    key: str, imported: dict[str, tuple[Path, Any]]
) -> None:
    catalog, (name, _changed, unexpressed) = imported[key]
    _write, expected, _nodes, _entry, count, said = SHAPES[key]
    assert name == expected
    assert unexpressed == []
    doc = _doc(name, catalog)
    assert doc["nodes"] == count
    assert said in doc["nodes_from"]
    assert doc["meta"]["file"] == "meta.yaml (absent)"
    assert doc["source"]["repo"] is None and doc["source"]["commit"] is None


@pytest.mark.parametrize("key", SHAPES)
def test_the_layout_renders_back_to_its_own_commands(
    key: str, imported: dict[str, tuple[Path, Any]]
) -> None:
    catalog, (name, _changed, _unexpressed) = imported[key]
    diff = _unrecorded(name, catalog, _doc(name, catalog))
    assert diff.clean, f"{name} differs from its folder:\n{diff.text}"
    assert diff.matched == len(_doc(name, catalog)["processes"])
    errors = [f for f in check_layout(load(name, catalog).layout) if f.level == "error"]
    assert errors == []


def test_a_proxy_the_folder_does_not_ship_is_recorded_from_its_command_line(
    imported: dict[str, tuple[Path, Any]],
) -> None:
    catalog, (name, _changed, _unexpressed) = imported["case-inline"]
    (proxy,) = [p for p in _doc(name, catalog)["processes"] if p["kind"] == "proxy"]
    assert proxy["program"][1].startswith("/vllm-workspace/vllm-ascend/examples/")
    assert load(name, catalog).layout.proxy is not None


def test_a_python_launcher_runs_for_real(imported: dict[str, tuple[Path, Any]]) -> None:
    catalog, (name, _changed, _unexpressed) = imported["python-launcher"]
    engines = [p for p in _doc(name, catalog)["processes"] if p["kind"] == "engine"]
    assert sorted(p["node"] for p in engines) == [0, 1]


def test_a_folder_any_node_count_fits_asks_for_nodes(tmp_path: Path) -> None:
    """Positive control of the probe: a launcher that starts on every rank says no count."""
    folder = shapes.python_launcher(tmp_path / "models")
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    with pytest.raises(UsageError, match="give --nodes N") as refused:
        import_layout(LayoutsImportOptions(folder=folder, catalog=catalog))
    assert str(folder) in str(refused.value)
    assert "\n" not in str(refused.value)
