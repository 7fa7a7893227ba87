"""Each of the 25 source folders, imported alone into an empty catalog, renders back to
its own commands (0 unrecorded differences), as a local copy without a commit (no
source_ref: render's rules then hold it unless the import recorded the source's own
values as caveats). From the recorded facts: no sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.importer.test_synthesize import IMPORTED, _doc, _unrecorded

from servekit.catalog import LayoutsImportOptions, load
from servekit.catalog.loader import packaged_catalog
from servekit.errors import UsageError
from servekit.importer.api import import_layout
from servekit.render import check_layout

CATALOG = packaged_catalog()


@pytest.mark.parametrize("name", IMPORTED)
def test_imported_alone_it_renders_back_to_its_source(name: str, tmp_path: Path) -> None:
    """As a local copy (no commit, so no source_ref): the harder case; with its commit
    the packaged catalog's own tests (test_synthesize) hold it."""
    facts = json.loads((CATALOG / name / "source.json").read_text())
    facts["source"] = {**facts["source"], "commit": None}
    given = tmp_path / "source.json"
    given.write_text(json.dumps(facts))
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    import_layout(LayoutsImportOptions(folder=tmp_path, facts=given, name=name, catalog=catalog))
    layout = load(name, catalog).layout
    assert [f.line() for f in check_layout(layout) if f.level == "error"] == []
    diff = _unrecorded(name, catalog, _doc(name, catalog))
    assert diff.clean, f"{name} alone differs from its source:\n{diff.text}"
    for profile in (catalog / name.split("/", maxsplit=1)[0] / "profiles").glob("*.yaml"):
        assert "None" not in profile.read_text()


def test_a_folder_already_in_the_catalog_under_another_name_is_named(tmp_path: Path) -> None:
    """The same Plan under a new name is refused, naming the layout it already is."""
    name = "a3/glm5.1/1x2p1x4d"
    facts = CATALOG / name / "source.json"
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    import_layout(LayoutsImportOptions(folder=tmp_path, facts=facts, name=name, catalog=catalog))
    with pytest.raises(UsageError, match=f"already in the catalog as {name}") as refused:
        import_layout(
            LayoutsImportOptions(
                folder=tmp_path, facts=facts, name="a3/glm5.1/mine", catalog=catalog
            )
        )
    assert "\n" not in str(refused.value)
    assert not (catalog / "a3/glm5.1/mine").exists()
    # positive control: the same name again updates it (nothing changes)
    again = import_layout(
        LayoutsImportOptions(folder=tmp_path, facts=facts, name=name, catalog=catalog)
    )
    assert again[1] == []
