"""How a layout selects the layerwise protocol: connector name and proxy mode, checked together.

A layout whose engines use MooncakeLayerwiseConnector sets ``proxy.mode:
layerwise``; the Plan then runs the proxy with ``--mode layerwise`` and gives
each decoder's guard the proxy's metaserver URL (SERVEKIT_GUARD_METASERVER)
(a literal, or built at launch on the proxy node's IP). Either half alone is
refused by the rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servekit.catalog.schema import Layout
from servekit.guard import METASERVER_ENV, metaserver_key
from servekit.kvprotocol import LAYERWISE_CONNECTOR
from servekit.render.command import shell_words
from servekit.render.envvalues import AddressUrl, resolve_value
from servekit.render.plan import PlanOptions, build_plan
from servekit.render.rules import check_layout
from servekit.render.wiring import Address


def _layerwise(data: dict[str, Any], connector: bool = True, mode: bool = True) -> Layout:
    for engine in data["engines"]:
        if connector and engine.get("kv_connector"):
            engine["kv_connector"]["name"] = LAYERWISE_CONNECTOR
    if mode:
        data["proxy"]["mode"] = "layerwise"
    return Layout.model_validate(data)


def _errors(layout: Layout) -> list[str]:
    return [f.line() for f in check_layout(layout) if f.level == "error"]


def test_the_layerwise_pair_renders_proxy_mode_and_the_decoders_trust(
    layout_data: Callable[[str], dict[str, Any]],
) -> None:
    layout = _layerwise(layout_data("a3/1p1d"))
    assert _errors(layout) == []
    hosts = ("10.0.0.1", "10.0.0.2")
    plan = build_plan(layout, PlanOptions(hosts=hosts))
    proxy = plan.process("proxy")
    i = proxy.argv.index("--mode")
    assert proxy.argv[i + 1] == "layerwise"
    url = f"http://{hosts[layout.proxy.node]}:{proxy.api_port}/v1/metaserver"  # type: ignore[union-attr]
    decoders = [p for p in plan.processes if p.role == "decode" and not p.headless]
    assert decoders
    for p in decoders:
        assert p.env[METASERVER_ENV] == url and metaserver_key(url) is not None
        assert p.kv_mode == "layerwise"
    for p in plan.processes:
        if p.role == "prefill":
            assert METASERVER_ENV not in p.env and p.kv_mode == "layerwise"


def test_without_known_addresses_the_url_is_built_at_launch_on_the_proxy_node(
    layout_data: Callable[[str], dict[str, Any]],
) -> None:
    plan = build_plan(_layerwise(layout_data("a3/1p1d")))
    proxy = plan.process("proxy")
    node = proxy.node
    port = proxy.api_port
    assert port is not None
    at = Address(process="proxy", node=node, port=port, role="proxy")
    want = AddressUrl(address=at, path="/v1/metaserver")
    decoders = [p for p in plan.processes if p.role == "decode" and not p.headless]
    assert decoders and all(p.env[METASERVER_ENV] == want for p in decoders)
    script = shell_words(proxy.command)
    i = script.index("--metaserver-url")
    assert script[i + 1] == f'http://"${{NODE{node}_IP}}":{port}/v1/metaserver'
    resolved = resolve_value(
        METASERVER_ENV, want, node_ip="x", node_nic="y", inherited={}, node_ips={node: "10.9.8.7"}
    )
    assert metaserver_key(resolved) == metaserver_key(f"http://10.9.8.7:{port}/v1/metaserver")


def test_a_wildcard_proxy_advertises_its_node_address(
    layout_data: Callable[[str], dict[str, Any]],
) -> None:
    data = layout_data("a3/1p1d")
    data["proxy"]["host"] = "0.0.0.0"
    layout = _layerwise(data)
    assert _errors(layout) == []
    hosts = ("10.0.0.1", "10.0.0.2")
    plan = build_plan(layout, PlanOptions(hosts=hosts))
    proxy = plan.process("proxy")
    url = f"http://{hosts[proxy.node]}:{proxy.api_port}/v1/metaserver"
    assert proxy.argv[proxy.argv.index("--host") + 1] == "0.0.0.0"
    assert proxy.argv[proxy.argv.index("--metaserver-url") + 1] == url
    for p in plan.processes:
        if p.role == "decode" and not p.headless:
            assert p.env[METASERVER_ENV] == url


def test_either_half_alone_is_refused(layout_data: Callable[[str], dict[str, Any]]) -> None:
    assert _errors(Layout.model_validate(layout_data("a3/1p1d"))) == []  # positive control
    only_connector = _errors(_layerwise(layout_data("a3/1p1d"), mode=False))
    assert any("set proxy mode layerwise" in e for e in only_connector), only_connector
    only_mode = _errors(_layerwise(layout_data("a3/1p1d"), connector=False))
    assert any("mode layerwise needs engines" in e for e in only_mode), only_mode
