"""The synthesizer on recorded facts: every imported layout's Plan equals its source.json.

``layouts/<hw>/<model>/<topology>/source.json`` holds the facts recorded by running
that folder of xuopoj/ma-vllm-samples@64fc020 on the fake platform. Here each
imported layout's Plan is compared with them (0 differences but the recorded
deviations), every deviation must name a real difference, importing again must
write the very same bytes, and edited facts must come back as exactly those edits.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.fakeplatform.compare import compare
from tests.fakeplatform.normalize import ProcessFacts, keyed, process_facts
from tests.render.test_fidelity import plan_env, plan_placeholders, without_deviations

from servekit.catalog.loader import layout_names, load, packaged_catalog
from servekit.importer.synthesize import synthesize
from servekit.importer.write import SOURCE_FILE, write_layout
from servekit.render.plan import build_plan
from servekit.render.rules import check_layout

CATALOG = packaged_catalog()
IMPORTED = [n for n in layout_names(CATALOG) if (CATALOG / n / SOURCE_FILE).is_file()]


def _doc(name: str, catalog: Path = CATALOG) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((catalog / name / SOURCE_FILE).read_text())
    return data


def _source(doc: dict[str, Any]) -> list[ProcessFacts]:
    return [ProcessFacts.from_json(p) for p in doc["processes"]]


def _plan_facts(name: str, catalog: Path) -> tuple[list[ProcessFacts], dict[str, str]]:
    plan = build_plan(load(name, catalog).layout)
    holders = plan_placeholders(plan)
    facts = [
        process_facts(
            node=p.node, kind=p.kind, argv=p.argv, env=plan_env(p), cwd=p.cwd, placeholders=holders
        )
        for p in plan.processes
    ]
    return facts, {f.key: p.engine or "" for f, p in zip(facts, plan.processes, strict=True)}


def _unrecorded(name: str, catalog: Path, doc: dict[str, Any]) -> Any:
    recorded = load(name, catalog).layout.provenance.deviations
    plan, engine_of = _plan_facts(name, catalog)
    return compare(
        without_deviations(_source(doc), recorded, engine_of),
        without_deviations(plan, recorded, engine_of),
    )


def test_the_source_folders_are_all_imported() -> None:
    folders = {_doc(n)["source"]["folder"] for n in IMPORTED}
    assert len(folders) == len(IMPORTED) == 25
    assert {_doc(n)["source"]["commit"][:7] for n in IMPORTED} == {"64fc020"}


@pytest.mark.parametrize("name", IMPORTED)
def test_plan_equals_the_recorded_source(name: str) -> None:
    diff = _unrecorded(name, CATALOG, _doc(name))
    assert diff.clean, f"{name} differs from its source:\n{diff.text}"
    assert diff.matched == len(_doc(name)["processes"])


@pytest.mark.parametrize("name", IMPORTED)
def test_every_deviation_names_a_real_difference(name: str) -> None:
    source = keyed(_source(_doc(name)))
    plan = keyed(_plan_facts(name, CATALOG)[0])
    for d in load(name, CATALOG).layout.provenance.deviations:
        if d.process == "proxy":
            assert any(
                source[k].program != plan[k].program for k in source if source[k].kind == "proxy"
            )
        elif d.flag:
            assert any(
                source[k].flag_values().get(d.flag) != plan[k].flag_values().get(d.flag)
                for k in source
            ), d.flag
        elif d.env:
            assert any(
                (d.env in source[k].env, source[k].env.get(d.env))
                != (d.env in plan[k].env, plan[k].env.get(d.env))
                for k in source
            ), d.env


def test_importing_again_writes_the_same_bytes(tmp_path: Path) -> None:
    shutil.copytree(CATALOG, tmp_path / "cat")
    for name in IMPORTED:
        doc = _doc(name)
        assert write_layout(tmp_path / "cat", synthesize(doc, name), doc) == [], name


def test_a_positive_control_an_unrecorded_change_is_caught(tmp_path: Path) -> None:
    """The comparison is not vacuous: a changed value in the facts is a difference."""
    name = "a2/glm5.2/2nodes"
    doc = copy.deepcopy(_doc(name))
    doc["processes"][0]["env"]["HCCL_BUFFSIZE"] = "7"
    assert not _unrecorded(name, CATALOG, doc).clean


def _edited(doc: dict[str, Any]) -> dict[str, Any]:
    """A user's edits on every process: a value changed, a flag and an export added, a rename."""
    out = copy.deepcopy(doc)
    for p in out["processes"]:
        if p["kind"] != "engine":
            continue
        edits = {"--max-num-seqs": "7", "--served-model-name": "renamed-model"}
        flags = [[f[0], edits[f[0]]] if f[0] in edits else f for f in p["flags"]]
        p["flags"] = [*flags, ["--disable-log-stats", None]]
        p["env"] = {**p["env"], "HCCL_USER_ADDED": "1"}
    return out


@pytest.mark.parametrize(
    "name", ["a2/glm5.2/2nodes", "a3/glm5.1/1x2p1x4d", "a3/deepseekv4-flash/1p1d"]
)
def test_an_edited_folder_imports_to_exactly_its_edits(tmp_path: Path, name: str) -> None:
    catalog = tmp_path / "cat"
    edited = _edited(_doc(name))
    synth = synthesize(edited, name)
    assert synth.unexpressed == []
    write_layout(catalog, synth, edited)
    assert _unrecorded(name, catalog, edited).clean
    assert not _unrecorded(name, catalog, _doc(name)).clean
    assert load(name, catalog).layout.model.served_name == "renamed-model"


def test_a_name_that_says_another_topology_is_refused(tmp_path: Path) -> None:
    """The source's own example: 1x2p1x2d engines named 2p2d."""
    catalog = tmp_path / "cat"
    shutil.copytree(CATALOG / "a3" / "profiles", catalog / "a3" / "profiles")
    wrong = catalog / "a3" / "glm5.2" / "2p2d"
    wrong.mkdir(parents=True)
    text = (CATALOG / "a3/glm5.2/1x2p1x2d/layout.yaml").read_text()
    (wrong / "layout.yaml").write_text(text.replace("a3/glm5.2/1x2p1x2d", "a3/glm5.2/2p2d", 1))
    findings = check_layout(load("a3/glm5.2/2p2d", catalog).layout)
    errors = [f.message for f in findings if f.level == "error"]
    assert any("says 2p2d but its engines make 1x2p1x2d" in m for m in errors), errors
    right = [f for f in check_layout(load("a3/glm5.2/1x2p1x2d").layout) if f.field == "name"]
    assert right == []


@pytest.mark.parametrize("name", IMPORTED)
def test_host_tuning_is_recorded_and_each_write_named_by_a_deviation(name: str) -> None:
    """Host writes are a layout fact, not applied: none is dropped silently."""
    layout = load(name).layout
    recorded = _doc(name).get("host_tuning") or []
    assert [(t.node, t.path, t.value) for t in layout.host_tuning] == [
        (t["node"], t["path"], t["value"]) for t in recorded
    ]
    named = [d.what for d in layout.provenance.deviations if d.what.startswith("host tuning")]
    assert len(named) == len(recorded)
    assert all(t.path in what for t, what in zip(layout.host_tuning, named, strict=True))


def test_the_host_tuning_folder_has_its_four_writes() -> None:
    layout = load("a3/qwen3.5-397b-a17b/1node").layout
    assert {t.path.rsplit("/", 1)[-1] for t in layout.host_tuning} == {
        "numa_balancing",
        "sched_migration_cost_ns",
        "swappiness",
        "scaling_governor",
    }


def test_every_imported_layout_names_its_source_and_the_source_claim() -> None:
    for name in IMPORTED:
        layout = load(name).layout
        ref = layout.provenance.source_ref
        assert ref is not None and ref.repo == "xuopoj/ma-vllm-samples", name
        assert ref.folder == _doc(name)["source"]["folder"]
        claim = _doc(name)["meta"]["source_verified"]
        assert layout.provenance.verification.verified is (claim is True)
        assert "the source's claim" in (layout.provenance.verification.note or "")


@pytest.mark.parametrize("topology", ["1node", "2nodes", "1p1d", "2p1x2d", "2p2d", "3p1d", "1p3d"])
def test_the_importer_reproduces_the_hand_made_a3_layouts(topology: str) -> None:
    """Imported a3/deepseekv4-flash/<t> and hand-made a3/<t>: the same processes and commands.

    Flag order may differ (the fidelity comparison is by flag name); every word,
    variable, working directory and process name must be the same.
    """
    made = build_plan(load(f"a3/{topology}").layout)
    imported = build_plan(load(f"a3/deepseekv4-flash/{topology}").layout)
    assert [p.name for p in made.processes] == [p.name for p in imported.processes]
    for a, b in zip(made.processes, imported.processes, strict=True):
        assert sorted(a.argv) == sorted(b.argv), a.name
        assert (a.env, a.cwd, a.devices, a.api_port, a.kv_port) == (
            b.env,
            b.cwd,
            b.devices,
            b.api_port,
            b.kv_port,
        ), a.name
