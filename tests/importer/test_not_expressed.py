"""Every difference an import cannot express stays in the layout, and is shown.

Before (issue 45): an edited folder whose decode engine serves another model name
than its prefill imported with "1 not expressed", but ``layouts show`` and
``render`` never mentioned it: the rendered decode served the prefill's name
without a word. Now each such line is a caveat of the layout
(``provenance.caveats``, ``not expressed: ...``), which ``layouts show`` prints
and ``render`` prints in its summary, beside render's warnings.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from tests.helpers.cli import servekit_inproc

from servekit.catalog import LayoutsImportOptions, load, packaged_catalog
from servekit.importer.api import import_layout

GLM = "a3/glm5.1/1x2p1x4d"


def _flat(text: str) -> str:
    return " ".join(text.split())


def _renamed_decode(tmp_path: Path) -> Path:
    """The layout's recorded facts, its decode engine serving the model as 'renamed'."""
    doc = json.loads((packaged_catalog() / GLM / "source.json").read_text())
    for proc in doc["processes"]:
        kv = next((f[1] for f in proc["flags"] if f[0] == "--kv-transfer-config"), {})
        if proc["kind"] == "engine" and kv.get("kv_role") == "kv_consumer":
            proc["flags"] = [
                ["--served-model-name", "renamed"] if f[0] == "--served-model-name" else f
                for f in proc["flags"]
            ]
    facts = tmp_path / "source.json"
    facts.write_text(json.dumps(doc))
    return facts


def test_what_the_import_cannot_express_is_recorded_and_shown(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    facts = _renamed_decode(tmp_path)
    opts = LayoutsImportOptions(folder=tmp_path, facts=facts, name=GLM, catalog=catalog)
    _name, _changed, unexpressed = import_layout(opts)
    assert len(unexpressed) == 1 and "a served model name of its own ('renamed')" in unexpressed[0]
    said = "not expressed: " + unexpressed[0]
    assert "; rendered with the model's 'glm-5" in said
    written = yaml.safe_load((catalog / GLM / "layout.yaml").read_text())
    assert said in written["provenance"]["caveats"]
    assert said in load(GLM, catalog).layout.provenance.caveats

    shown = servekit_inproc("layouts", "show", GLM, "--catalog", str(catalog))
    assert shown.returncode == 0, shown.stderr
    assert _flat(f"caveat: {said}") in _flat(shown.stdout)  # wrapped to 80 columns
    out = tmp_path / "rendered"
    rendered = servekit_inproc("render", GLM, "--catalog", str(catalog), "--out", str(out))
    assert rendered.returncode == 0, rendered.stderr
    assert _flat(f"caveat: {said}") in _flat(rendered.stdout)
    # the positive side: the packaged layout, fully expressed, says none of it
    plain = servekit_inproc("render", GLM, "--out", str(tmp_path / "plain"))
    assert "not expressed" not in plain.stdout


def test_importing_the_same_facts_again_writes_the_same_bytes(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    opts = LayoutsImportOptions(
        folder=tmp_path, facts=_renamed_decode(tmp_path), name=GLM, catalog=catalog
    )
    import_layout(opts)
    first = (catalog / GLM / "layout.yaml").read_bytes()
    _name, changed, _unexpressed = import_layout(opts)
    assert changed == [] and (catalog / GLM / "layout.yaml").read_bytes() == first
