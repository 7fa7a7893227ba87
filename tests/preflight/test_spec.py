"""What the preflight checks on each unit comes from the Plan: devices, ports, model, peers."""

from __future__ import annotations

import json

import pytest
import yaml
from tests.preflight.helpers import plan_of, spec_of

import servekit.preflight.spec as spec_module
from servekit.catalog import load_all
from servekit.platforms import render_target
from servekit.preflight import node_units, peers, spec_doc
from servekit.preflight.node import servekit_preflight as entry
from servekit.preflight.spec import PORT_BASE, exchange_port, unit_ports
from servekit.render import build_plan, port_bindings, reserved_ports

NAMES = [x.layout.name for x in load_all()]


@pytest.mark.parametrize("name", NAMES)
def test_every_layouts_spec_is_read_by_the_node_program(name: str) -> None:
    """The spec servekit renders is one the shipped program accepts, unit for node."""
    plan = build_plan(plan_of(name))
    spec = entry.parse_spec(json.dumps(spec_doc(plan, node_units(plan))).encode())
    assert [u["name"] for u in spec["units"]] == [f"node{n.index}" for n in plan.nodes]
    for unit, node in zip(spec["units"], plan.nodes, strict=True):
        bound = {(port, owner) for port, owner in port_bindings(plan).get(node.index, [])}
        assert set(unit["ports"]) == bound  # the table `layouts check` reads, whole
        assert unit["devices"] == sorted({d for p in node.processes for d in p.devices})
        assert unit["model"] == any(p.kind == "engine" for p in node.processes)
    taken = {p for u in spec["units"] for p, _ in u["ports"]}
    assert spec["port"] not in taken
    span = reserved_ports(plan_of(name).hardware)
    assert span is None or not span[0] <= spec["port"] < span[1]


def test_peers_are_dp_groups_across_nodes_and_prefill_decode_pairs() -> None:
    spec = spec_of("a2/glm5.2/1x4p1x4d")  # prefill0 on nodes 0-3, decode0 on nodes 4-7
    peers_of = {u["name"]: dict(u["peers"]) for u in spec["units"]}
    assert peers_of["node0"]["node3"] == "collectives of prefill0"
    assert peers_of["node5"]["node7"] == "collectives of decode0"
    assert peers_of["node2"]["node6"] == "KV prefill0 -> decode0"
    assert all(len(p) == 7 for p in peers_of.values())
    spec = spec_of("a3/deepseekv4-flash/2p2d")  # four single-node engines
    peers_of = {u["name"]: dict(u["peers"]) for u in spec["units"]}
    assert peers_of["node0"] == {
        "node2": "KV prefill0 -> decode0",
        "node3": "KV prefill0 -> decode1",
    }
    assert "node1" not in peers_of["node0"]  # two prefills exchange nothing
    assert spec_of("a3/deepseekv4-flash/1node")["units"][0]["peers"] == []


def test_a_mixed_layout_has_collective_peers_only() -> None:
    plan = build_plan(plan_of("a3/deepseekv4-flash/2nodes"))  # one DP engine on 2 nodes
    assert peers(plan, node_units(plan)) == {
        "node0": [("node1", "collectives of mixed")],
        "node1": [("node0", "collectives of mixed")],
    }


def test_the_exchange_port_skips_the_layouts_own_ports_and_the_reserved_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = build_plan(plan_of("a3/deepseekv4-flash/1p1d"))
    units = node_units(plan)
    assert exchange_port(plan, units) == PORT_BASE
    monkeypatch.setattr(spec_module, "PORT_BASE", 36000)  # the prefill's KV side channel
    assert exchange_port(plan, units) == 36001
    monkeypatch.setattr(spec_module, "PORT_BASE", 20000)  # A3's reserved [20000, 36000)
    assert exchange_port(plan, units) == 36001


def test_unit_ports_of_a_pod_are_its_processes_only() -> None:
    plan = build_plan(plan_of("a3/deepseekv4-flash/1p1d"))
    node0 = node_units(plan)[0]
    engine_only = node0.__class__(
        name="pod",
        label="pod",
        node=0,
        processes=tuple(p for p in node0.processes if p.kind == "engine"),
        devices=(),
    )
    assert (8080, "proxy API") in unit_ports(plan, node0)
    assert (8080, "proxy API") not in unit_ports(plan, engine_only)


def test_kubernetes_units_are_the_engine_pods_reached_by_name() -> None:
    for kind, address in (
        ("leaderworkerset", "sk-prefill-0.sk-prefill"),
        ("disaggregatedset", "sk-prefill-0"),
    ):
        _, files = render_target("a3/deepseekv4-flash/1p1d", "k8s", [], None, {"kind": kind})
        configmaps = files["configmaps.yaml"]
        assert isinstance(configmaps, str)
        bundle = [o for o in yaml.safe_load_all(configmaps) if o["metadata"]["name"] == "sk-bundle"]
        data = bundle[0]["data"]  # the engines' bundle, mounted by every engine pod
        spec = entry.parse_spec(data["servekit_preflight.json"].encode())
        units = {u["name"]: u for u in spec["units"]}
        assert set(units) == {"sk-prefill-0", "sk-decode-0"}  # no unit for the proxy's pod
        assert units["sk-prefill-0"]["address"] == address
        assert units["sk-prefill-0"]["device_ids"] == "visible"
        assert units["sk-prefill-0"]["devices"] == list(range(16))
        assert dict(units["sk-decode-0"]["peers"]) == {"sk-prefill-0": "KV prefill0 -> decode0"}
        for name in entry.FILES:
            assert name in data
