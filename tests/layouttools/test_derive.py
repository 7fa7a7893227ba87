"""``layouts new``: the authors' own derivations reproduced, Plan for Plan, and the refusals."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from tests.helpers.cli import servekit_inproc
from tests.helpers.refusal import one_line_error

from servekit.catalog.ledger import verification_status as layout_status
from servekit.catalog.loader import load, packaged_catalog, parse_layout_text, resolve_catalog
from servekit.catalog.options import LayoutsNewOptions
from servekit.catalog.schema import MAX_NODES
from servekit.errors import UsageError
from servekit.importer.write import dump_yaml
from servekit.layouttools.compare import diff_plans
from servekit.layouttools.derive import derive_layout, parse_topology, write_derived
from servekit.render.plan import Plan, build_plan
from servekit.render.rules import check_layout

DSV4 = "a3/deepseekv4-flash/1p1d"
GLM_BASE, GLM = "a3/glm5.1/1x2p1x4d", "a3/glm5.1/1x2p1x2d"
GLM_FIX = ("prefill.speculative.num_speculative_tokens=1",)


def _derived_plan(name: str, base: str, sets: tuple[str, ...] = ()) -> Plan:
    data = derive_layout(LayoutsNewOptions(name=name, base=base, set=sets))
    root = resolve_catalog(None)
    layout = parse_layout_text(dump_yaml(data), name, profiles_dir=root / "a3" / "profiles")
    assert not [f for f in check_layout(layout) if f.level == "error"]
    return build_plan(layout)


@pytest.mark.parametrize("topology", ["2p2d", "3p1d", "1p3d"])
def test_dsv4_derivations_equal_the_imported_layouts(topology: str) -> None:
    name = f"a3/deepseekv4-flash/{topology}"
    derived = _derived_plan(name, DSV4)
    imported = build_plan(load(name).layout)
    assert derived == imported  # every process: argv, env, ports, devices, fan-out
    assert diff_plans(imported, derived, name, "derived").as_json()["counts"] == {
        "engines": 0,
        "processes_added": 0,
        "processes_removed": 0,
        "flags": 0,
        "env": 0,
        "fanout": 0,
    }


def test_glm_derivation_differs_by_exactly_the_explained_set() -> None:
    derived = _derived_plan(GLM, GLM_BASE, GLM_FIX)
    got = diff_plans(build_plan(load(GLM).layout), derived, GLM, "derived").as_json()
    assert got["engines"] == [
        {"key": "decode0.engine_id", "a": "None", "b": "1"},
        {"key": "prefill0.engine_id", "a": "None", "b": "0"},
    ]
    assert got["counts"]["processes_added"] == got["counts"]["processes_removed"] == 0
    assert got["counts"]["env"] == got["counts"]["fanout"] == 0
    flags = {(c["key"], c["a"], c["b"]) for p in got["processes"].values() for c in p["flags"]}
    assert flags == {("--speculative-config.num_speculative_tokens", "3", "1")}
    facts = {(c["key"], c["a"], c["b"]) for p in got["processes"].values() for c in p["facts"]}
    assert facts == {("engine_id", "null", '"0"'), ("engine_id", "null", '"1"')}


def test_provenance_and_status_derived(tmp_path: Path) -> None:
    asked = LayoutsNewOptions(name="a3/deepseekv4-flash/2p1d", base=DSV4)
    data = derive_layout(asked, today=dt.date(2026, 12, 1))
    prov = data["provenance"]
    assert prov["derived_from"] == f"{DSV4}@64fc020e0c15048fda0bf5bfabaeba47639be044"
    assert prov["derived"] == "2026-12-01" and prov["verification"]["verified"] is False
    assert "source_ref" not in prov
    catalog = tmp_path / "cat"
    (catalog / "a3").mkdir(parents=True)
    src = resolve_catalog(None) / "a3" / "profiles"
    (catalog / "a3" / "profiles").mkdir()
    for f in src.iterdir():
        (catalog / "a3" / "profiles" / f.name).write_bytes(f.read_bytes())
    path = write_derived("a3/deepseekv4-flash/2p1d", data, catalog, force=False)
    loaded = load("a3/deepseekv4-flash/2p1d", catalog)
    assert loaded.path == path
    assert layout_status(loaded).state == "derived"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["a3/deepseekv4-flash/2p2d", "--from", DSV4, "--topology", "3p1d"], "says '2p2d'"),
        (["a3/deepseekv4-flash/2p2d", "--from", DSV4, "--hardware", "a2"], "starts with a3"),
        (["a2/deepseekv4-flash/2p2d", "--from", DSV4, "--hardware", "a2"], "8 NPUs"),
        (
            ["a3/deepseekv4-flash/2p2d", "--from", DSV4, "--set", "engines.prefill1.engine_id=0"],
            "clashes",
        ),
        (["a3/deepseekv4-flash/2p2d", "--from", DSV4, "--set", "engines.prefill0.nope=1"], "nope"),
        (["a3/deepseekv4-flash/2q2d", "--from", DSV4], "grammar"),
        (["a3/deepseekv4-flash/2p2d", "--from", "a3/nothing"], "unknown layout"),
        (["a3/deepseekv4-flash/2p2d", "--from", "a3/deepseekv4-flash/1node"], "no prefill engine"),
        ([GLM, "--from", GLM_BASE], "num_speculative_tokens"),
        (
            ["a3/deepseekv4-flash/2p2d", "--from", DSV4, "--set", "prefill.tp=8"],
            "--set prefill.tp=M",
        ),
        (
            [
                "a3/x/9p9d",
                "--from",
                DSV4,
                "--prefill",
                "64",
                "--prefill-nodes",
                "64",
                "--decode",
                "1",
            ],
            "at most 256",
        ),
        (["a3/deepseekv4-flash/2p2d", "--from", DSV4], "packaged catalog; pass --catalog"),
        (
            ["a3/deepseekv4-flash/2p2d", "--from", DSV4, "--catalog", str(packaged_catalog())],
            "exists",
        ),
    ],
)
def test_refusals_are_one_line_exit_2(args: list[str], needle: str) -> None:
    one_line_error(servekit_inproc("layouts", "new", *args), needle)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_topology_parser_takes_any_text(text: str) -> None:
    """Any --topology is a Topology whose name reads back, or one UsageError line."""
    try:
        topo = parse_topology(text)
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    assert parse_topology(topo.name) == topo
    assert 1 <= topo.nodes <= MAX_NODES
