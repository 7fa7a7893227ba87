"""``layouts diff``: 1p1d against 2p2d is engines, ports and fan-out only; any side kind works."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.helpers.cli import servekit_inproc
from tests.helpers.refusal import one_line_error

from servekit.catalog.loader import load, packaged_catalog
from servekit.layouttools.compare import diff_plans, diff_sources
from servekit.render.plan import build_plan


def test_1p1d_vs_2p2d_engines_ports_fanout_and_no_flag() -> None:
    got = diff_sources("a3/1p1d", "a3/2p2d", None).as_json()
    assert got["counts"]["flags"] == 0 and got["counts"]["env"] == 0
    assert {c["key"] for c in got["engines"]} == {"decode0.nodes", "prefill1", "decode1"}
    assert got["counts"]["processes_added"] == 20 and got["counts"]["processes_removed"] == 0
    facts = {(c["key"], c["a"], c["b"]) for p in got["processes"].values() for c in p["facts"]}
    assert facts == {("node", "1", "2")}  # decode0 moves to node 2
    added = {c["key"] for c in got["fanout"] if c["a"] is None}
    removed = {c["key"] for c in got["fanout"] if c["b"] is None}
    assert len(added) == 4 + 32 and len(removed) == 16


def test_a_changed_flag_shows_as_a_flag_change() -> None:
    """Positive control: the diff does see flags when they differ."""
    a = load("a3/deepseekv4-flash/1p1d").layout
    b = a.model_copy(
        update={
            "engines": tuple(
                e.model_copy(update={"settings": {**e.settings, "max_num_seqs": 3}})
                if e.role == "decode"
                else e
                for e in a.engines
            )
        }
    )
    got = diff_plans(build_plan(a), build_plan(b), "a", "b")
    assert got.flag_changes() == 16
    keys = {c.key for p in got.processes for c in p.flags}
    assert keys == {"--max-num-seqs"}


def test_rendered_folder_equals_its_layout(tmp_path: Path) -> None:
    out = tmp_path / "r"
    done = servekit_inproc("render", "a3/2p2d", "--out", str(out))
    assert done.returncode == 0, done.stderr
    got = diff_sources(str(out), "a3/2p2d", None).as_json()
    assert all(v == 0 for v in got["counts"].values()), got


def test_cli_text_fits_80_columns_and_json() -> None:
    text = servekit_inproc(
        "layouts", "diff", "a3/1p1d", "a3/2p2d", env={**os.environ, "COLUMNS": "80"}
    )
    assert text.returncode == 0, text.stderr
    assert max(len(line) for line in text.stdout.splitlines()) <= 80
    assert "flags 0" in text.stdout
    js = servekit_inproc("layouts", "diff", "a3/1p1d", "a3/2p2d", "--json")
    assert json.loads(js.stdout)["counts"]["flags"] == 0


def test_refusals(tmp_path: Path) -> None:
    one_line_error(
        servekit_inproc("layouts", "diff", str(tmp_path), "a3/1p1d"), "neither plan.json"
    )
    bad = tmp_path / "plan.json"
    bad.write_text("{not json")
    one_line_error(
        servekit_inproc("layouts", "diff", str(bad), "a3/1p1d"), "not a servekit plan.json"
    )
    one_line_error(servekit_inproc("layouts", "diff", "a3/nope", "a3/1p1d"), "unknown layout")


def test_recorded_facts_through_the_importer_equal_the_catalog_layout() -> None:
    """'What the source folder says vs the catalog': its source.json, imported, is the layout."""
    facts = packaged_catalog() / "a3" / "glm5.1" / "1x2p1x2d" / "source.json"
    same = diff_sources(str(facts), "a3/glm5.1/1x2p1x2d", None).as_json()
    assert all(v == 0 for v in same["counts"].values()), same
    other = diff_sources(str(facts), "a3/glm5.1/1x2p1x4d", None).as_json()
    assert other["counts"]["processes_added"] == 8
    flags = {c["key"] for p in other["processes"].values() for c in p["flags"]}
    assert flags == {"--kv-transfer-config.kv_connector_extra_config.decode.dp_size"}


def test_a_source_convention_folder_runs_contained_and_diffs(tmp_path: Path) -> None:
    """A folder (no commit: a local copy) goes through the contained runner; an edit shows."""
    from tests.importer.folders import a2_two_nodes

    folder = a2_two_nodes(tmp_path / "models")
    for script in ("run_node0.sh", "run_node1.sh"):  # a layout needs a context length
        path = folder / script
        path.write_text(
            path.read_text().replace(
                "--tensor-parallel-size 8", "--tensor-parallel-size 8 --max-model-len 4096"
            )
        )
    same = diff_sources(str(folder), str(folder), None).as_json()
    assert all(v == 0 for v in same["counts"].values()), same  # positive control
    edited = tmp_path / "edited" / "testmodel-a2" / "2nodes"
    edited.parent.mkdir(parents=True)
    import shutil

    shutil.copytree(folder, edited)
    node0 = edited / "run_node0.sh"
    node0.write_text(node0.read_text().replace("--port 8080", "--port 8090"))
    moved = diff_sources(str(folder), str(edited), None).as_json()
    assert moved["engines"] == [{"key": "mixed.api_ports", "a": "8080", "b": "8090"}], moved
