"""The proxy's wiring (issue 46): references in the Plan, one emitter, one URL function.

The proxy's command of every catalog layout is parsed by the proxy's own parser
into exactly the backends the Plan refers to; the same references, emitted with
another address map (IPv6 nodes, a pod per engine), give that map's URLs and
nothing else; a field the proxy has no flag for is refused by the emitter.
"""

from __future__ import annotations

import functools

import pytest

from servekit.catalog import load, load_all
from servekit.platforms.k8s.build import K8sOptions, decide
from servekit.proxy.config import option_words, parse_args
from servekit.render import Address, NodeRef, Plan, PlanOptions, build_plan, url
from servekit.render.wiring import METASERVER_PATH, proxy_command

WITH_PROXY = sorted(x.layout.name for x in load_all() if x.layout.proxy is not None)


def _parsed(plan: Plan) -> tuple[dict[str, tuple[str, ...]], str | None]:
    """What the proxy's parser makes of the Plan's proxy command: pools, bootstrap, events."""
    proxy = plan.process("proxy")
    config = parse_args(list(proxy.argv[2:]), read_keys=False)  # after python and the zipapp
    pools = {
        "prefill": config.prefill,
        "decode": config.decode,
        "replica": config.replica,
        "prefill_bootstrap": config.prefill_bootstrap,
        "kv_events": config.kv_events,
    }
    return pools, config.metaserver_url


def _referred(plan: Plan) -> dict[str, tuple[str, ...]]:
    """The same, from the Plan's references through the one URL function."""
    wiring = plan.process("proxy").proxy
    assert wiring is not None
    host_of = plan.host_of
    return {
        "prefill": tuple(url(a, host_of) for a in wiring.prefill),
        "decode": tuple(url(a, host_of) for a in wiring.decode),
        "replica": tuple(url(a, host_of) for a in wiring.replica),
        "prefill_bootstrap": tuple(
            f"{b.engine_id}={url(b.server, host_of)}" for b in wiring.bootstrap
        ),
        "kv_events": tuple(
            f"{url(p.engine, host_of)}={url(p.events, host_of)}" for p in wiring.kv_events
        ),
    }


@pytest.mark.parametrize("name", WITH_PROXY)
def test_the_proxy_parses_its_command_into_the_backends_the_plan_refers_to(name: str) -> None:
    layout = load(name).layout
    hosts = tuple(f"10.0.0.{i + 1}" for i in range(layout.nodes))
    plan = build_plan(layout, PlanOptions(hosts=hosts))
    pools, _ = _parsed(plan)
    assert pools == _referred(plan)
    assert pools["prefill"] or pools["replica"]  # not vacuous


def test_ipv6_node_addresses_are_bracketed_in_every_backend() -> None:
    layout = load("a3/deepseekv4-flash/1p1d").layout
    plan = build_plan(layout, PlanOptions(hosts=("fd00::1", "fd00::2")))
    pools, _ = _parsed(plan)
    assert pools == _referred(plan)
    assert pools["decode"][0].startswith("http://[fd00::2]:")
    # the control: the same Plan on IPv4 nodes has no brackets
    plain = _parsed(build_plan(layout, PlanOptions(hosts=("10.0.0.1", "10.0.0.2"))))[0]
    assert "[" not in " ".join(plain["prefill"] + plain["decode"])


def test_a_layerwise_proxy_advertises_its_own_reference_on_each_map() -> None:
    layout = load("a3/qwen3.5-397b-a17b/1p1x2d").layout
    hosts = tuple(f"10.0.0.{i + 1}" for i in range(layout.nodes))
    plan = build_plan(layout, PlanOptions(hosts=hosts))
    wiring = plan.process("proxy").proxy
    assert wiring is not None and wiring.mode == "layerwise"
    _, metaserver = _parsed(plan)
    proxy_host = hosts[plan.process("proxy").node]
    assert metaserver == f"http://{proxy_host}:{wiring.port}{METASERVER_PATH}"
    pods = decide(build_plan(layout), layout, K8sOptions(accelerator=None)).processes["proxy"]
    argv = list(pods.argv)
    assert (
        argv[argv.index("--metaserver-url") + 1] == f"http://sk-proxy:{wiring.port}/v1/metaserver"
    )


def test_a_pod_per_engine_changes_addresses_and_nothing_else() -> None:
    layout = load("a3/deepseekv4-flash/2p2d").layout
    plan = build_plan(layout)
    k8s = decide(plan, layout, K8sOptions(accelerator=None))
    before, after = plan.process("proxy").command, k8s.processes["proxy"].command
    assert len(before) == len(after)
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert changed and all(isinstance(a, str) or a.when is not None for _, a in changed[1:])
    wiring = plan.process("proxy").proxy
    assert wiring is not None
    named = len(wiring.backends()) + len(wiring.failure_domains)  # each names a pod now
    assert len(changed) == len(k8s.changes) == 1 + named
    assert {c.reason for c in k8s.changes if c.process == "proxy"} == {"listen", "backend"}


def test_the_emitter_spells_only_the_proxys_own_flags() -> None:
    assert option_words("kv_lease_s", 480) == ["--kv-lease", "480"]
    assert option_words("admin", True) == ["--admin"] and option_words("admin", False) == []
    assert option_words("api_key_file", "-k") == ["--api-key-file=-k"]  # not taken for a flag
    with pytest.raises(ValueError, match="kv_leas"):
        option_words("kv_leas", 480)
    with pytest.raises(ValueError, match="api_key"):
        option_words("api_key", "secret")  # a key never goes in argv


def test_a_wiring_emits_the_plans_own_command() -> None:
    """One emitter: the Plan's proxy command is its wiring emitted with the Plan's map."""
    for name in WITH_PROXY:
        plan = build_plan(load(name).layout)
        proxy = plan.process("proxy")
        assert proxy.proxy is not None
        again = proxy_command(proxy.proxy, functools.partial(_node_ref, plan))
        assert again == proxy.command, name


def _node_ref(plan: Plan, address: Address) -> NodeRef:
    return NodeRef.of(address.node, plan.host_of(address))
