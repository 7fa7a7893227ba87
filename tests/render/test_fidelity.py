"""Fidelity: servekit's Plan of each A3 layout against the source's own commands.

The fixtures (tests/render/fidelity/a3/<layout>.json) hold the normalized facts of
every process that the source layout starts, taken by running its scripts on the
fake platform (see the README there). Here each Plan process is normalized the
same way (``${NODE<k>_IP}`` -> ``{NODE<k>_IP}``, a reference to the variable
itself -> ``{INHERITED}``) and compared process by process; a failure prints the
readable diff. The catalog is not yet faithful (issue 12): the per-layout
equality is a strict xfail until it is, while the topology (the same processes
on the same nodes) must already match.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.fakeplatform import fixture
from tests.fakeplatform.compare import compare
from tests.fakeplatform.normalize import (
    Placeholders,
    ProcessFacts,
    node_placeholders,
    process_facts,
)

from servekit.catalog.loader import load
from servekit.render.plan import Plan, PlanOptions, build_plan

FIXTURES = Path(__file__).parent / "fidelity" / "a3"
LAYOUTS = ("1node", "2nodes", "1p1d", "2p1x2d", "2p2d", "3p1d", "1p3d")
NOT_YET = pytest.mark.xfail(strict=True, reason="issue 12: catalog not yet faithful")


def plan_placeholders(plan: Plan) -> Placeholders:
    """The Plan's run-time references as the fixtures' placeholders."""
    count = len(plan.nodes)
    names = {name for p in plan.processes for name in p.env}
    return Placeholders(
        literals=node_placeholders(
            [f"${{NODE{k}_IP}}" for k in range(count)],
            [f"${{NODE{k}_NIC}}" for k in range(count)],
        ),
        inherited={name: (f"${{{name}:-}}", f"${{{name}}}") for name in names},
    )


def plan_facts(name: str) -> list[ProcessFacts]:
    """Every process of servekit's Plan of ``a3/<name>``, normalized."""
    plan = build_plan(load(f"a3/{name}").layout, PlanOptions())
    placeholders = plan_placeholders(plan)
    return [
        process_facts(
            node=p.node,
            kind=p.kind,
            argv=p.argv,
            env=p.env,
            cwd=getattr(p, "cwd", None),
            placeholders=placeholders,
        )
        for p in plan.processes
    ]


def source_facts(name: str) -> list[ProcessFacts]:
    return fixture.read(FIXTURES / f"{name}.json")[1]


@pytest.mark.parametrize("name", [pytest.param(n, marks=NOT_YET) for n in LAYOUTS])
def test_plan_equals_the_source_command_of_every_process(name: str) -> None:
    diff = compare(source_facts(name), plan_facts(name))
    assert diff.clean, f"a3/{name} differs from its source:\n{diff.text}"


@pytest.mark.parametrize("name", LAYOUTS)
def test_plan_starts_the_same_processes_as_the_source(name: str) -> None:
    diff = compare(source_facts(name), plan_facts(name))
    assert (diff.missing, diff.extra) == ([], []), diff.text
    assert diff.matched == len(source_facts(name))


@pytest.mark.parametrize("name", LAYOUTS)
def test_fixture_names_its_source_and_matches_the_catalog_node_count(name: str) -> None:
    meta, processes = fixture.read(FIXTURES / f"{name}.json")
    assert meta["source"]["repo"] == "xuopoj/ma-vllm-samples"
    assert meta["source"]["folder"] == f"models/deepseekv4-flash-a3/{name}"
    assert len(meta["source"]["commit"]) == 40
    assert meta["nodes"] == load(f"a3/{name}").layout.nodes
    assert {p.node for p in processes} == set(range(meta["nodes"]))
    assert meta["group0_size"] == 1


def _engines(name: str, kv_role: str | None = None) -> list[ProcessFacts]:
    found = []
    for p in source_facts(name):
        kv = p.flag_values().get("--kv-transfer-config", [({},)])[0][0]
        if p.kind == "engine" and (kv_role is None or kv.get("kv_role") == kv_role):
            found.append(p)
    return found


def _value(p: ProcessFacts, flag: str) -> object:
    values = p.flag_values()[flag]
    assert len(values) == 1, f"{flag} given {len(values)} times"
    return values[0][0] if values[0] else None


@pytest.mark.parametrize("name", ["1p1d", "2p1x2d", "2p2d", "3p1d", "1p3d"])
def test_fixtures_hold_the_facts_the_issue_names(name: str) -> None:
    """Sanity against issue 12's text: prefix caching off in every PD role, decode batch sizes."""
    decode = _engines(name, "kv_consumer")
    assert decode
    assert _engines(name, "kv_producer")
    for p in _engines(name, "kv_producer") + decode:
        assert "--no-enable-prefix-caching" in p.flag_values()
        assert "--no-disable-hybrid-kv-cache-manager" in p.flag_values()
        assert p.cwd == ("/root/kernel_cache" if name != "2p1x2d" else None)
    if name == "2p1x2d":
        assert {_value(p, "--max-num-batched-tokens") for p in decode} == {"144"}
    else:
        assert {_value(p, "--max-num-seqs") for p in decode} == {"60"}


def test_fixtures_hold_the_run_time_values_as_placeholders() -> None:
    (prefill, *_rest) = _engines("1p1d", "kv_producer")
    assert prefill.env["HCCL_IF_IP"] == "{NODE0_IP}"
    assert prefill.env["GLOO_SOCKET_IFNAME"] == "{NODE0_NIC}"
    assert prefill.env["LD_LIBRARY_PATH"] == "/usr/local/lib:{INHERITED}"
    assert _value(prefill, "--additional-config") == {
        "enable_cpu_binding": True,
        "enable_shared_expert_dp": True,
        "enable_dsa_cp": True,
    }
    leader, headless = _engines("2nodes")
    assert "--api-server-count" in leader.flag_values()
    assert "--api-server-count" not in headless.flag_values()
    assert _value(headless, "--data-parallel-address") == "{NODE0_IP}"


SOURCE_GIT = Path(
    os.environ.get("SERVEKIT_FIDELITY_SOURCE", "/work/.mirror/xuopoj+ma-vllm-samples/repo")
)


def _source_tree(commit: str, folder: str, into: Path) -> Path | None:
    """The source folder at ``commit`` from a local git copy, or None without one."""
    git = shutil.which("git")
    if git is None or not SOURCE_GIT.exists():
        return None
    archive = subprocess.run(
        [git, "-C", str(SOURCE_GIT), "archive", commit, folder],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        return None
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / folder


@pytest.mark.slow
def test_fixtures_are_what_running_the_source_gives(tmp_path: Path) -> None:
    """Re-run the extraction on the fixtures' commit: the checked-in facts come back."""
    from tests.fakeplatform.extract import Source, extract_layouts

    meta, _ = fixture.read(FIXTURES / "1p1d.json")
    commit = meta["source"]["commit"]
    parent = "models/deepseekv4-flash-a3"
    tree = _source_tree(commit, parent, tmp_path)
    if tree is None:
        pytest.skip(f"no git copy of the source with {commit} at {SOURCE_GIT}")
    source = Source(repo=meta["source"]["repo"], commit=commit, folder=parent)
    layouts = {name: fixture.read(FIXTURES / f"{name}.json")[0]["nodes"] for name in LAYOUTS}
    for name, doc in extract_layouts(tree, layouts, source):
        assert fixture.dumps(doc) == (FIXTURES / f"{name}.json").read_text(), name
