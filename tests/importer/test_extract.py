"""The contained runner on the project's own folders, one per shape the source has.

Each folder (tests/importer/folders.py) is run by ``extract_folder`` exactly as an
import runs it (every node rank, bubblewrap, recording vllm and proxy); the facts
must say what the scripts started, node by node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.importer import folders

from servekit.importer import FolderFacts, extract_folder
from servekit.importer.platform.normalize import ProcessFacts, keyed


def _run(make: Any, tmp_path_factory: pytest.TempPathFactory) -> FolderFacts:
    return extract_folder(make(tmp_path_factory.mktemp(make.__name__)))


def _value(p: ProcessFacts, flag: str) -> Any:
    (values,) = p.flag_values()[flag]
    return values[0] if values else None


@pytest.fixture(scope="module")
def a2(tmp_path_factory: pytest.TempPathFactory) -> FolderFacts:
    return _run(folders.a2_two_nodes, tmp_path_factory)


@pytest.fixture(scope="module")
def pd(tmp_path_factory: pytest.TempPathFactory) -> FolderFacts:
    return _run(folders.pd_spanning, tmp_path_factory)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> FolderFacts:
    return _run(folders.tuned_single, tmp_path_factory)


def test_a2_two_nodes_runs_both_ranks_with_8_npus_per_server(a2: FolderFacts) -> None:
    doc = a2.document()
    assert (doc["nodes"], doc["devices_per_node"], doc["group0_size"]) == (2, 8, 1)
    assert doc["nodes_from"].startswith("run.sh:")
    leader, worker = keyed(a2.process_facts()).values()
    assert (leader.key, worker.key) == ("n0/engine/dp0", "n1/engine/dp1")
    assert _value(leader, "--tensor-parallel-size") == "8"
    assert "--headless" in worker.flag_values()
    assert _value(worker, "--data-parallel-address") == "{NODE0_IP}"
    assert worker.env["HCCL_IF_IP"] == "{NODE1_IP}"
    assert worker.env["GLOO_SOCKET_IFNAME"] == "{NODE1_NIC}"
    assert worker.cwd == "/root/kernel_cache"
    assert doc["meta"]["vllm_ascend"] == "quay.io/example/vllm-ascend:test"


def test_instances_spanning_nodes_on_both_sides_run_on_all_six(pd: FolderFacts) -> None:
    found = keyed(pd.process_facts())
    prefill = [p for p in found.values() if p.kind == "engine" and p.node < 2]
    decode = [p for p in found.values() if p.kind == "engine" and p.node >= 2]
    assert pd.nodes == 6
    assert [(p.node, _value(p, "--data-parallel-rank")) for p in prefill] == [(0, "0"), (1, "1")]
    assert sorted((p.node, int(_value(p, "--data-parallel-rank"))) for p in decode) == [
        (2 + r // 2, r) for r in range(8)
    ]
    assert {_value(p, "--data-parallel-address") for p in decode} == {"{NODE2_IP}"}
    assert {_value(p, "--kv-transfer-config")["kv_role"] for p in decode} == {"kv_consumer"}
    (proxy,) = [p for p in found.values() if p.kind == "proxy"]
    assert proxy.node == 0
    # the folder calls a proxy it does not ship: recorded from its command line
    assert proxy.program == ("python3", "/opt/official/pd_proxy.py")
    assert _value(proxy, "--decoder-hosts") == "{NODE2_IP}"


def test_master_dispatch_gives_each_node_its_api_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    facts = _run(folders.master_dispatch, tmp_path_factory)
    assert facts.nodes_from == "folder name '2nodes' (naming grammar)"
    engines = facts.process_facts()
    assert [(p.node, _value(p, "--port"), _value(p, "--data-parallel-rank")) for p in engines] == [
        (0, "8080", "0"),
        (1, "8080", "1"),
    ]


def test_one_shared_headless_script_serves_ranks_1_to_3(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    facts = _run(folders.shared_headless, tmp_path_factory)
    headless = [p for p in facts.process_facts() if "--headless" in p.flag_values()]
    assert [(p.node, _value(p, "--data-parallel-start-rank")) for p in headless] == [
        (1, "1"),
        (2, "2"),
        (3, "3"),
    ]


def test_a_proxy_is_recorded_whatever_its_script_is_named(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The vendored router is not named proxy and is run by path: the recorder stands in."""
    facts = _run(folders.layerwise_proxy, tmp_path_factory)
    (proxy,) = [p for p in facts.process_facts() if p.kind == "proxy"]
    assert proxy.program == ("python3", "/root/script/lw_router.py")
    assert proxy.flag_values()["--decoder-hosts"] == [("{NODE1_IP}", "{NODE2_IP}")]
    assert any("lw_router.py" in a for a in facts.assumptions)
    assert facts.meta.vllm_ascend == "not given"


def test_host_tuning_is_recorded_with_file_and_line_and_not_applied(
    tuned: FolderFacts,
) -> None:
    writes = {(t.path, t.value, t.file, t.line) for t in tuned.host_tuning}
    assert writes == {
        ("/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor", "performance", "run.sh", 5),
        ("/proc/sys/vm/swappiness", "0", "run.sh", 6),
        ("/proc/sys/kernel/sched_migration_cost_ns", "50000", "run.sh", 7),
        ("/proc/sys/kernel/numa_balancing", "1", "run.sh", 8),
    }
    (engine,) = tuned.process_facts()
    assert _value(engine, "--served-model-name") == "tuned"


def test_host_proc_sys_is_unchanged_by_the_tuning(tmp_path: Path) -> None:
    """Positive control inside: the fake got the write; outside, the host's value stayed."""
    host = Path("/proc/sys/vm/swappiness")
    before = host.read_text()
    wanted = "1" if before.strip() != "1" else "2"
    folder = folders.write(
        tmp_path / "x-a3" / "1node",
        {"run.sh": f"#!/bin/sh\nset -e\nsysctl -w vm.swappiness={wanted}\nexec vllm serve /m\n"},
    )
    facts = extract_folder(folder)
    assert [(t.path, t.value) for t in facts.host_tuning] == [("/proc/sys/vm/swappiness", wanted)]
    assert host.read_text() == before


def test_a_variable_exported_twice_keeps_its_final_value_and_is_named(
    tuned: FolderFacts,
) -> None:
    (engine,) = tuned.process_facts()
    assert engine.env["LD_LIBRARY_PATH"] == "/opt/second/lib:/opt/first/lib:{INHERITED}"
    (note,) = tuned.unexpressed
    assert (note.file, note.line) == ("run.sh", 9)
    assert "LD_LIBRARY_PATH exported twice (lines 3 and 9)" in note.what


def test_todo_image_tag_is_not_given_and_verified_is_the_sources_claim(
    tuned: FolderFacts,
) -> None:
    meta = tuned.document()["meta"]
    assert meta["vllm_ascend"] == "not given"
    assert meta["source_verified"] is True
    assert meta["derived"] == "2026-06-01"


def test_document_has_the_fixture_fields_and_the_new_ones(tuned: FolderFacts) -> None:
    doc = tuned.document()
    assert list(doc) == [
        "source",
        "entry",
        "shell",
        "nodes",
        "nodes_from",
        "devices_per_node",
        "group0_size",
        "assumptions",
        "placeholders",
        "processes",
        "host_tuning",
        "meta",
        "unexpressed",
    ]
    assert doc["source"] == {"repo": None, "commit": None, "folder": "1node"}
    assert ProcessFacts.from_json(doc["processes"][0]).to_json() == doc["processes"][0]
