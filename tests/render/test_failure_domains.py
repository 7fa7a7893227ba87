"""The Plan tells the proxy which backends share an engine and a node (--failure-domains)."""

from __future__ import annotations

import pytest

from servekit.catalog.loader import load
from servekit.proxy.config import parse_args
from servekit.render import build_plan


@pytest.mark.parametrize("name", ["a3/deepseekv4-flash/2p2d", "a3/deepseekv4-flash/1p3d"])
def test_every_backend_is_named_with_its_engine_and_node(name: str) -> None:
    plan = build_plan(load(name).layout)
    (proxy,) = [p for p in plan.api_processes() if p.kind == "proxy"]
    config = parse_args(list(proxy.argv[2:]), read_keys=False)  # the proxy accepts them
    engines = {p.url: (p.engine, str(p.node)) for p in plan.api_processes() if p.kind == "engine"}
    backends = {*config.prefill, *config.decode}
    assert config.domains() == {url: engines[url] for url in backends}
    assert len({engine for engine, _ in config.domains().values()}) > 1
