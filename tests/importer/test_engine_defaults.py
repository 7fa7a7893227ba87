"""A folder whose ``vllm serve`` passes no ``--max-model-len`` imports as the engine's default.

Before (issue 45): such a folder was refused by servekit's own schema, "field
'model.max_model_len': Input should be greater than 0", naming the scratch copy's
layout.yaml, which no longer existed. Now ``model.max_model_len: null`` is the
engine's default: no flag is rendered (the Plan equals the folder's facts), an
engine that passes one of its own keeps it, and every consumer of the value
(``layouts show``, plan.md, the verify contexts, the simulator's spec) says or
does what the engine will.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.cli import servekit_inproc
from tests.importer import shapes
from tests.importer.test_synthesize import _doc, _unrecorded

from servekit.catalog import LayoutsImportOptions, load, packaged_catalog
from servekit.errors import UsageError
from servekit.importer import api
from servekit.local.simrun import sim_spec_doc
from servekit.render import build_plan, check_layout
from servekit.verify.workloads import contexts_for

MML = " --max-model-len 8192"
GLM = "a3/glm5.1/1x2p1x4d"


def _one_p_one_d(base: Path, *, drop_from: tuple[str, ...]) -> Path:
    """tests/importer/shapes.py's 1P1D (two A3 nodes), without --max-model-len in the
    engine scripts named."""
    folder = shapes.renamed(base / "models")
    for script in drop_from:
        text = (folder / script).read_text()
        assert MML in text
        (folder / script).write_text(text.replace(MML, ""))
    return folder


def _import(base: Path, folder: Path) -> tuple[Path, str]:
    catalog = base / "catalog"
    catalog.mkdir()
    name, _changed, unexpressed = api.import_layout(
        LayoutsImportOptions(folder=folder, catalog=catalog)
    )
    assert unexpressed == []
    return catalog, name


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    base = tmp_path_factory.mktemp("nomml")
    return _import(base, _one_p_one_d(base, drop_from=("serve_p.sh", "serve_d.sh")))


def test_the_layout_says_the_engines_default_and_renders_no_flag(
    imported: tuple[Path, str],
) -> None:
    catalog, name = imported
    layout = load(name, catalog).layout
    assert layout.model.max_model_len is None
    assert "max_model_len: null" in (catalog / name / "layout.yaml").read_text()
    diff = _unrecorded(name, catalog, _doc(name, catalog))
    assert diff.clean, diff.text
    assert all("--max-model-len" not in p.argv for p in build_plan(layout).processes)
    assert [f for f in check_layout(layout) if f.level == "error"] == []


def test_every_consumer_says_or_does_what_the_engine_will(
    imported: tuple[Path, str], tmp_path: Path
) -> None:
    catalog, name = imported
    layout = load(name, catalog).layout
    shown = servekit_inproc("layouts", "show", name, "--catalog", str(catalog))
    assert shown.returncode == 0, shown.stderr
    assert "(max_model_len the engine's default)" in shown.stdout
    out = tmp_path / "r"
    done = servekit_inproc("render", name, "--catalog", str(catalog), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "max_model_len the engine's default" in (out / "plan.md").read_text()
    # verify tries every context and the acceptance check skips those the engine's
    # /v1/models says do not fit, naming it
    assert contexts_for(layout, quick=False) == ("2k", "144k", "1m")
    assert all("max_model_len" not in e for e in sim_spec_doc(build_plan(layout))["endpoints"])


def _facts_without_mml(tmp_path: Path, role_kv: str) -> Path:
    """a3/glm5.1/1x2p1x4d's recorded facts with no --max-model-len on one side's engines."""
    doc = json.loads((packaged_catalog() / GLM / "source.json").read_text())
    for proc in doc["processes"]:
        kv = next((f[1] for f in proc["flags"] if f[0] == "--kv-transfer-config"), {})
        if proc["kind"] == "engine" and kv.get("kv_role") == role_kv:
            proc["flags"] = [f for f in proc["flags"] if f[0] != "--max-model-len"]
    facts = tmp_path / "source.json"
    facts.write_text(json.dumps(doc))
    return facts


def test_an_engine_passing_its_own_keeps_it_beside_one_passing_none(tmp_path: Path) -> None:
    """The prefill passes --max-model-len, the decode none: the model is the engine's
    default and the prefill engine states its own (the Plan equals the facts)."""
    facts = _facts_without_mml(tmp_path, "kv_consumer")
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    opts = LayoutsImportOptions(folder=tmp_path, facts=facts, name=GLM, catalog=catalog)
    api.import_layout(opts)
    layout = load(GLM, catalog).layout
    assert layout.model.max_model_len is None
    assert {e.role: e.max_model_len for e in layout.engines} == {"prefill": 131072, "decode": None}
    diff = _unrecorded(GLM, catalog, _doc(GLM, catalog))
    assert diff.clean, diff.text
    contexts = {
        p.role: p.argv[p.argv.index("--max-model-len") + 1] if "--max-model-len" in p.argv else None
        for p in build_plan(layout).processes
        if p.kind == "engine"
    }
    assert contexts == {"prefill": "131072", "decode": None}


def test_a_layout_that_would_not_load_is_refused_naming_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal names the folder and the file as the catalog would hold it, not the
    scratch copy the check wrote (gone when the message is read)."""
    real = api.synthesize

    def broken(doc: dict[str, Any], name: str) -> Any:
        synth = real(doc, name)
        synth.layout["model"]["max_model_len"] = 0
        return synth

    monkeypatch.setattr(api, "synthesize", broken)
    facts = packaged_catalog() / GLM / "source.json"
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    opts = LayoutsImportOptions(folder=tmp_path, facts=facts, name=GLM, catalog=catalog)
    with pytest.raises(UsageError) as refused:
        api.import_layout(opts)
    message = str(refused.value)
    assert message.startswith(f"{facts}: the imported layout would not load (")
    assert f"{GLM}/layout.yaml:" in message and "servekit-import-" not in message
    assert not any(catalog.iterdir())
