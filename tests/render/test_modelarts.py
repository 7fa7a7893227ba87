"""The rendered ModelArts entry, run the way the platform runs it.

Every node of every A3 layout runs the same rendered ``run.sh`` under ``dash``
on the fake platform (a real rank table, a fake NIC, a recording ``vllm`` on
PATH and a recording stand-in for the bundled proxy); the argv, environment and
working directory of every process each node starts must equal the Plan's. The
entry's own checks (rank table wait, node count, group 0, hostile values, a
rank dying) are driven the same way. The entry's preflight, servekit's recorded
addition, is turned off at launch here (``PREFLIGHT=0``): what is compared is
what the source starts (the preflight on a fake NPU fabric is tests/preflight).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests.helpers.waiting import wait_for_text

from servekit.catalog.loader import layout_names, load, packaged_catalog
from servekit.importer.platform.compare import compare
from servekit.importer.platform.harness import (
    RECORDER,
    FakePlatform,
    create_platform,
    platform_placeholders,
    record_facts,
    run_node,
    start_node,
    write_rank_table,
)
from servekit.importer.platform.normalize import Placeholders, ProcessFacts, process_facts
from servekit.platforms import write_rendering
from servekit.render.bundle import PROXY_FILE
from servekit.render.envvalues import resolve_env
from servekit.render.plan import Plan, PlanOptions, build_plan

A3 = ("1node", "2nodes", "1p1d", "2p1x2d", "2p2d", "3p1d", "1p3d")
IMPORTED = [n for n in layout_names(packaged_catalog()) if n.count("/") == 2]
NO_PREFLIGHT = {"PREFLIGHT": "0"}


def render(name: str, tmp_path: Path) -> Path:
    out = tmp_path / "script"
    write_rendering(build_plan(load(name).layout), out, "modelarts")
    return out / "run.sh"


def fake_bundle(tmp_path: Path) -> Path:
    """A bundle folder whose proxy is the recorder (the real zipapp is tested elsewhere)."""
    folder = tmp_path / "bundle"
    folder.mkdir()
    body = RECORDER.read_text()
    (folder / PROXY_FILE).write_text(body)
    return folder


def plan_for(name: str, platform: FakePlatform, bundle: Path, work: Path) -> Plan:
    return build_plan(
        load(name).layout,
        PlanOptions(
            hosts=tuple(n.ip for n in platform.nodes),
            bundle_dir=str(bundle),
            work_dir=str(work),
        ),
    )


def plan_facts(plan: Plan, platform: FakePlatform, node: int) -> list[ProcessFacts]:
    placeholders = platform_placeholders(platform)
    facts = []
    for p in plan.nodes[node].processes:
        env = resolve_env(
            p.env, node_ip=p.host, node_nic=platform.nodes[node].nic, inherited=platform.inherited
        )
        facts.append(
            process_facts(
                node=node, kind=p.kind, argv=p.argv, env=env, cwd=p.cwd, placeholders=placeholders
            )
        )
    return facts


def wait_for_records(platform: FakePlatform, node: int, count: int, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if len(platform.records(node)) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"node {node}: {len(platform.records(node))} of {count} processes started")


def _every_node_starts_the_plans_processes(name: str, tmp_path: Path) -> None:
    layout = load(name).layout
    platform = create_platform(tmp_path / "platform", layout.nodes)
    entry = render(name, tmp_path)
    bundle, work = fake_bundle(tmp_path), tmp_path / "kernel_cache"
    plan = plan_for(name, platform, bundle, work)
    extra = {
        "BUNDLE_DIR": str(bundle),
        "WORK_DIR": str(work),
        "FAKEPLATFORM_STAY": "1",
        **NO_PREFLIGHT,
    }
    nodes = range(layout.nodes)
    running = [start_node(platform, node, entry, extra_env=extra) for node in nodes]
    for node in nodes:
        wait_for_records(platform, node, len(plan.nodes[node].processes))
    for process in running:
        process.terminate()
    for node, process in zip(nodes, running, strict=True):
        run = process.wait(30)
        recorded = [record_facts(platform, r, base=run.env) for r in run.records]
        diff = compare(plan_facts(plan, platform, node), recorded)
        assert diff.clean, f"{name} node {node}:\n{diff.text}\n{run.stderr[-2000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("name", A3)
def test_every_node_starts_exactly_the_plans_processes(name: str, tmp_path: Path) -> None:
    _every_node_starts_the_plans_processes(f"a3/{name}", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", IMPORTED)
def test_every_node_of_every_imported_layout_runs_under_dash(name: str, tmp_path: Path) -> None:
    """The 25 layouts of the source catalog: rendered entry, every node, on the fake platform."""
    _every_node_starts_the_plans_processes(name, tmp_path)


def test_a_dying_rank_stops_the_nodes_other_processes(tmp_path: Path) -> None:
    """Upstream's online-DP launcher leaves the other ranks running; servekit's entry stops them."""
    platform = create_platform(tmp_path / "platform", 2)
    entry = render("a3/1p1d", tmp_path)
    extra = {
        "BUNDLE_DIR": str(fake_bundle(tmp_path)),
        "WORK_DIR": str(tmp_path / "work"),
        "FAKEPLATFORM_STAY": "1",
        "FAKEPLATFORM_FAIL_PORT": "7102",
        **NO_PREFLIGHT,
    }
    run = run_node(platform, 0, entry, extra_env=extra, timeout=60)
    assert run.returncode == 3, run.stderr
    assert "prefill0.dp2 exited with status 3; stopping this node's other processes" in run.stdout
    stopped = {e["pid"] for e in platform.exits()}
    others = {r.pid for r in run.records if "7102" not in r.argv}
    assert others and others <= stopped


def test_entry_waits_for_the_rank_table_to_complete(tmp_path: Path) -> None:
    platform = create_platform(tmp_path / "platform", 2, status="initializing")
    entry = render("a3/2nodes", tmp_path)
    extra = {"RANK_TABLE_TIMEOUT": "600", "DRY_RUN": "1", "NODE_NIC": "fakenic0"}
    running = start_node(platform, 0, entry, extra_env=extra)
    wait_for_text(platform.node_dir(0) / "stdout", "status: initializing")
    write_rank_table(platform, "completed")
    run = running.wait(30)
    assert run.returncode == 0, run.stderr
    assert "waiting for" in run.stdout and "status: initializing" in run.stdout
    assert "# mixed.n0" in run.stdout and "--api-server-count" in run.stdout


@pytest.mark.slow
def test_entry_times_out_on_a_rank_table_that_never_completes(tmp_path: Path) -> None:
    platform = create_platform(tmp_path / "platform", 2, status="initializing")
    run = run_node(platform, 0, render("a3/1p1d", tmp_path), extra_env={"RANK_TABLE_TIMEOUT": "2"})
    assert run.returncode == 1
    assert "timed out after 2s waiting for" in run.stderr
    assert not run.records


def test_wrong_node_count_is_refused_with_the_fix(tmp_path: Path) -> None:
    platform = create_platform(tmp_path / "platform", 3)
    run = run_node(platform, 0, render("a3/1p1d", tmp_path))
    assert run.returncode == 1 and not run.records
    assert "needs 2 nodes but the rank table lists 3" in run.stderr


def test_two_group0_nodes_are_refused_for_a_pd_layout(tmp_path: Path) -> None:
    platform = create_platform(tmp_path / "platform", 2, group_sizes=(2,))
    run = run_node(platform, 1, render("a3/1p1d", tmp_path))
    assert run.returncode == 1 and not run.records
    assert "group 0 has 2 nodes (want exactly 1)" in run.stderr
    assert "second proxy" in run.stderr


@pytest.mark.parametrize(
    "bad",
    [
        {"server_ip": "$(touch {canary})", "pod_name": "fake-pod-1"},
        {"server_ip": "10.88.0.2; touch {canary}", "pod_name": "fake-pod-1"},
        {"server_ip": "10.88.0.2", "pod_name": "x'$(touch {canary})'"},
        {"server_ip": "10.88.0.2", "pod_name": "`touch {canary}`"},
    ],
)
def test_hostile_rank_table_values_are_refused_never_run(
    bad: dict[str, str], tmp_path: Path
) -> None:
    platform = create_platform(tmp_path / "platform", 2)
    canary = tmp_path / "PWNED"
    doc = json.loads(platform.rank_table.read_text())
    entry_of = {k: v.format(canary=canary) for k, v in bad.items()}
    doc["server_group_list"][1]["server_list"][0].update(entry_of)
    platform.rank_table.write_text(json.dumps(doc))
    run = run_node(platform, 0, render("a3/1p1d", tmp_path))
    assert run.returncode == 1, run.stdout
    assert "server 1:" in run.stderr
    assert not canary.exists() and not run.records


def test_a_node_missing_from_the_rank_table_says_how_to_fix_it(tmp_path: Path) -> None:
    platform = create_platform(tmp_path / "platform", 2)
    run = run_node(
        platform,
        0,
        render("a3/1p1d", tmp_path),
        extra_env={"FAKEPLATFORM_POD": "stranger", "FAKEPLATFORM_IP": "10.1.1.1"},
    )
    assert run.returncode == 1 and not run.records
    assert "is not in the rank table; set NODE_POD_NAME" in run.stderr


def test_node_pod_name_picks_the_entry(tmp_path: Path) -> None:
    """All nodes of a dry run on one machine share a hostname: NODE_POD_NAME says which."""
    platform = create_platform(tmp_path / "platform", 2)
    extra = {"NODE_POD_NAME": "fake-pod-1", "DRY_RUN": "1", "NODE_NIC": "fakenic1"}
    run = run_node(platform, 0, render("a3/1p1d", tmp_path), extra_env=extra)
    assert run.returncode == 0, run.stderr
    assert "node 1 runs: decode0.dp0" in run.stdout
    assert "<- this node" in run.stdout.split("node 1:", 1)[1].splitlines()[0]


def test_one_node_layout_needs_no_rank_table(tmp_path: Path) -> None:
    platform = create_platform(tmp_path / "platform", 1)
    platform.rank_table.unlink()
    run = run_node(platform, 0, render("a3/1node", tmp_path), extra_env={"DRY_RUN": "1"})
    assert run.returncode == 0, run.stderr
    assert "# mixed.n0" in run.stdout


def test_placeholders_cover_every_machine_value(tmp_path: Path) -> None:
    """Sanity for the comparison itself: a fake IP never survives normalization."""
    platform = create_platform(tmp_path / "platform", 2)
    holders: Placeholders = platform_placeholders(platform)
    facts = process_facts(
        node=0,
        kind="engine",
        argv=("vllm", "serve", "/m", "--data-parallel-address", platform.nodes[0].ip),
        env={"HCCL_IF_IP": platform.nodes[0].ip},
        cwd=None,
        placeholders=holders,
    )
    assert facts.env["HCCL_IF_IP"] == "{NODE0_IP}"
    assert ("--data-parallel-address", ("{NODE0_IP}",)) in facts.flags
