"""A cluster started from rendered scripts, as a Deployment: from --nodes or from the proxy's relay."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from servekit.catalog.loader import load
from servekit.errors import UsageError
from servekit.render.plan import PlanOptions, build_plan
from servekit.render.wiring import url
from servekit.verify.cluster import (
    RelayMismatch,
    cluster_deployment,
    nodes_from_relay,
    parse_nodes,
    relay_backends,
    relay_deployment,
    single_entry_nodes,
)

A3 = load("a3/1p1d").layout
NODES = ("10.0.0.1", "10.0.0.2")


def relay_page(layout_name: str, nodes: tuple[str, ...], order: str = "plan") -> str:
    """What the proxy's /metrics/engines lists for the layout running on ``nodes``."""
    layout = load(layout_name).layout
    plan = build_plan(layout, PlanOptions(hosts=nodes))
    proxy = plan.process(plan.entry).proxy
    assert proxy is not None
    pools = (("prefill", proxy.prefill), ("decode", proxy.decode), ("replica", proxy.replica))
    pairs = [(url(a, plan.host_of), role) for role, addresses in pools for a in addresses]
    if order == "reversed":
        pairs.reverse()
    lines = [
        "# HELP servekit_proxy_engine_scrape_ok ok",
        "# TYPE servekit_proxy_engine_scrape_ok gauge",
    ]
    lines += [
        f'servekit_proxy_engine_scrape_ok{{engine_role="{r}",engine_url="{u}"}} 1.0'
        for u, r in pairs
    ]
    return "\n".join(lines) + "\n"


def test_every_engine_endpoint_comes_from_the_plan_and_the_addresses(tmp_path: Path) -> None:
    dep = cluster_deployment(A3, NODES, logs=tmp_path)
    engines = [e for e in dep.endpoints if e.role != "proxy"]
    assert len(engines) == 20 and dep.entry_url == "http://10.0.0.1:8080"
    decode3 = next(e for e in engines if e.name == "decode0.dp3")
    assert decode3.url == "http://10.0.0.2:7103" and decode3.role == "decode"
    assert (decode3.engine_id, decode3.dp_rank, decode3.node) == ("1", 3, 1)
    assert decode3.metrics_url == "http://10.0.0.2:7103/metrics"
    assert decode3.log == tmp_path / "decode0.dp3.log"
    proxy = next(e for e in dep.endpoints if e.role == "proxy")
    assert (
        proxy.url == dep.entry_url and proxy.metrics_url == "http://10.0.0.1:8080/metrics/engines"
    )
    assert dep.capabilities == ("retrieval",) and dep.model == "deepseek_v4"
    assert dep.metrics_relay == "http://10.0.0.1:8080/metrics/engines" and dep.direct
    assert set(dep.process_logs) == {p.name for p in build_plan(A3).processes}


def test_an_entry_in_front_of_the_proxy_replaces_its_url() -> None:
    dep = cluster_deployment(A3, NODES, entry="http://lb.example:80/")
    assert dep.entry_url == "http://lb.example:80"
    assert next(e for e in dep.endpoints if e.role == "proxy").url == "http://lb.example:80"


def test_relay_access_reads_every_engine_through_the_proxy() -> None:
    dep = cluster_deployment(A3, NODES, access="relay")
    assert not dep.direct
    assert {e.metrics_url for e in dep.endpoints if e.role != "proxy"} == {
        "http://10.0.0.1:8080/metrics/engines"
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("10.0.0.1", "runs on 2 node(s), 1 address(es) given"),
        ("10.0.0.1,10.0.0.2,10.0.0.3", "3 address(es) given"),
        ("10.0.0.1,10.0.0.1", "repeated"),
        ("10.0.0.1,$(touch x)", "is not an IPv4 address or a host name"),
        ("10.0.0.1,999.1.1.1", "is not an IPv4 address"),
        ("10.0.0.1,::1", "is not an IPv4 address"),
    ],
)
def test_bad_node_lists_are_one_line_naming_the_fix(text: str, says: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_nodes(text, A3)
    assert says in str(err.value) and str(err.value).startswith(f"--nodes {text}")


def test_host_names_are_addresses_too() -> None:
    assert parse_nodes(" node-a.cluster , node-b ", A3) == ("node-a.cluster", "node-b")


@pytest.mark.parametrize("name", ["a3/1p1d", "a3/1p3d", "a3/2p2d", "a3/3p1d", "a3/2p1x2d"])
def test_the_relay_gives_back_every_node_address(name: str) -> None:
    layout = load(name).layout
    nodes = tuple(f"10.1.0.{i + 1}" for i in range(layout.nodes))
    found = nodes_from_relay(layout, relay_page(name, nodes))
    fronted = {p.node for p in build_plan(layout).api_processes() if p.kind == "engine"}
    assert all(found[i] == nodes[i] for i in fronted)


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 254), min_size=4, max_size=4, unique=True))
def test_1p3d_addresses_come_back_in_rank_order(octets: list[int]) -> None:
    nodes = tuple(f"192.168.7.{o}" for o in octets)
    assert nodes_from_relay(load("a3/1p3d").layout, relay_page("a3/1p3d", nodes)) == nodes


def test_a_proxy_that_fronts_other_engines_is_a_mismatch_with_the_reason() -> None:
    with pytest.raises(RelayMismatch, match="fronts 8 prefill instance"):
        nodes_from_relay(
            A3, relay_page("a3/2p2d", ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"))
        )
    page = relay_page("a3/1p1d", NODES).replace(":7101", ":9999")
    with pytest.raises(RelayMismatch, match="where the Plan has port 7101"):
        nodes_from_relay(A3, page)
    page = relay_page("a3/1p1d", NODES).replace("10.0.0.2:7105", "10.0.0.9:7105")
    with pytest.raises(RelayMismatch, match="node 1 appears at two addresses"):
        nodes_from_relay(A3, page)
    with pytest.raises(RelayMismatch, match="lists no backend"):
        relay_backends("# nothing\n")


def test_relay_deployment_asks_the_entry_and_reads_through_it() -> None:
    asked: list[str] = []

    def fetch(url: str) -> str:
        asked.append(url)
        return relay_page("a3/1p1d", NODES)

    dep = relay_deployment(A3, "http://10.0.0.1:8080/", fetch)
    assert asked == ["http://10.0.0.1:8080/metrics/engines"]
    assert not dep.direct and dep.entry_url == "http://10.0.0.1:8080"
    assert next(e for e in dep.endpoints if e.name == "decode0.dp15").url == "http://10.0.0.2:7115"


def test_an_unreachable_relay_is_a_mismatch_not_a_crash() -> None:
    def fetch(url: str) -> str:
        raise OSError("connection refused")

    with pytest.raises(RelayMismatch, match="cannot read http://x:1/metrics/engines"):
        relay_deployment(A3, "http://x:1", fetch)


def test_a_layout_without_proxy_is_its_entry() -> None:
    one = load("a3/1node").layout
    assert single_entry_nodes(one, "http://10.9.9.9:8080") == ("10.9.9.9",)
    dep = cluster_deployment(one, ("10.9.9.9",))
    assert [e.url for e in dep.endpoints] == ["http://10.9.9.9:8080"]
    assert dep.metrics_relay is None
