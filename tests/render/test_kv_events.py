"""KV events in the Plan: who publishes, on which port, and what the proxy is told.

Every engine a layout's proxy routes to publishes its KV cache events (vLLM's
``--kv-events-config``, ZMQ ``tcp://*:PORT``) when it can feed the proxy's
kv-events policy: one API server per DP rank, prefix caching on. Each publisher
has its own port (vLLM adds the DP rank to the configured one), no other planned
port on its node is the same, and the proxy lists every publisher by its
engine's URL and routes the stages whose engines publish with ``kv-events``.
``kv_events: false`` (or ``KV_EVENTS=0`` at launch) takes all of it away.
"""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from servekit.catalog.loader import layout_names, load, packaged_catalog
from servekit.catalog.schema import Layout
from servekit.defaults import prefix_caching
from servekit.platforms import write_rendering
from servekit.render.overrides import apply_overrides
from servekit.render.plan import Plan, PlanOptions, ProcessPlan, build_plan, engine_settings
from servekit.render.rules import check_layout
from servekit.vocabulary import PD_ROLES

CATALOG = packaged_catalog()
WITH_PROXY = [n for n in layout_names(CATALOG) if load(n).layout.proxy is not None]
# The layouts whose engines publish (the decision, pinned): every one whose engines
# can. The others' PD engines all run without prefix caching (checked below).
PUBLISHING = {
    "a2/glm5.2/1x4p1x4d",
    "a3/dsv41-ced-pd",
    "a3/glm5.1/1x2p1x2d",
    "a3/glm5.1/1x2p1x4d",
    "a3/glm5.2/1x2p1x2d",
    "local/1p1d",
    "local/1p1d-example",
    "local/1p1d-mooncake",
    "local/dp2",
}
OFF = "engines.*.settings.kv_events=false"


def _routed(plan: Plan) -> list[ProcessPlan]:
    """The API processes the proxy routes to, in its --prefill/--decode/--replica order."""
    proxy = plan.process("proxy").proxy
    assert proxy is not None
    return [plan.process(address.process) for address in proxy.backends()]


def _config(p: ProcessPlan) -> dict[str, object] | None:
    argv = list(p.argv)
    if "--kv-events-config" not in argv:
        return None
    doc: dict[str, object] = json.loads(argv[argv.index("--kv-events-config") + 1])
    return doc


def test_the_layouts_that_publish_are_those_whose_engines_can() -> None:
    publishing = set()
    for name in WITH_PROXY:
        layout = load(name).layout
        if any(p.kv_events_port for p in build_plan(layout).processes):
            publishing.add(name)
            continue
        for e in layout.engines:  # why not: no prefix caching on any PD engine
            if e.role in PD_ROLES:
                assert not prefix_caching(engine_settings(layout, e), e.engine_args), (name, e)
    assert publishing == PUBLISHING
    assert "a3/deepseekv4-flash/1p1d" in set(WITH_PROXY) - publishing  # not vacuous


@pytest.mark.parametrize("name", sorted(PUBLISHING))
def test_every_routed_engine_publishes_on_its_own_port_and_the_proxy_lists_it(name: str) -> None:
    plan = build_plan(load(name).layout)
    routed = _routed(plan)
    ports = [(p.node, p.kv_events_port) for p in routed]
    assert all(port is not None for _, port in ports), name
    assert len(set(ports)) == len(ports), name  # one endpoint per API server
    for p in routed:
        config = _config(p)
        # vLLM publishes on the configured port + the global DP rank
        assert config == {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": f"tcp://*:{(p.kv_events_port or 0) - (p.dp_rank or 0)}",
        }, p.name
    proxy = plan.process("proxy")
    listed = [f"{p.url}=tcp://{p.host}:{p.kv_events_port}" for p in routed]
    assert proxy.proxy is not None
    publishers = [(x.engine, x.events) for x in proxy.proxy.kv_events]
    assert publishers == [(p.address(), p.address("kv-events")) for p in routed]
    argv = list(proxy.argv)
    start = argv.index("--kv-events") + 1
    assert argv[start : start + len(listed)] == listed
    roles = {p.role for p in routed}
    stages = {
        "--prefill-policy": "prefill" in roles,
        "--decode-policy": roles & {"decode", "mixed"},
    }
    for flag, wanted in stages.items():
        assert (argv[argv.index(flag) + 1] == "kv-events") if wanted else flag not in argv


def test_external_dp_ranks_share_one_config_and_publish_on_port_plus_rank() -> None:
    plan = build_plan(load("a3/glm5.1/1x2p1x4d").layout)
    decode = [p for p in plan.processes if p.engine == "decode0"]
    assert len(decode) == 16 and len({json.dumps(_config(p)) for p in decode}) == 1
    assert [p.kv_events_port for p in decode] == [
        5557 + p.dp_rank for p in decode if p.dp_rank is not None
    ]


def _taken(plan: Plan, layout: Layout) -> dict[int, list[int]]:
    """Every port each node binds: the processes' own, and each KV side-channel window."""
    found: dict[int, list[int]] = defaultdict(list)
    for p in plan.processes:
        found[p.node] += [q for q in (p.api_port, p.rpc_port, p.kv_events_port) if q]
    for e in layout.engines:
        if e.kv_port is not None:
            for j, node in enumerate(e.nodes):
                ranks = range(j * e.dp_size_per_node, (j + 1) * e.dp_size_per_node)
                found[node] += [e.kv_port + r * e.tp for r in ranks]
    return found


@pytest.mark.parametrize("name", sorted(PUBLISHING))
def test_publisher_ports_collide_with_no_other_planned_port(name: str) -> None:
    layout = load(name).layout
    plan = build_plan(layout)
    for node, ports in _taken(plan, layout).items():
        events = [p.kv_events_port for p in plan.processes if p.node == node and p.kv_events_port]
        others = [q for q in ports if q not in events]
        assert not set(events) & set(others), (name, node)
        assert len(events) == len(set(events)), (name, node)
    assert not [f for f in check_layout(layout) if "collides" in f.message]


def test_a_planned_port_in_the_way_moves_the_publishers_up() -> None:
    """Positive control of the placement: an API port on 5557 pushes the events to 5558+."""
    moved = ["engines.prefill.api_port=5557", "proxy.prefill=[{node: 0, ports: 5557}]"]
    layout = apply_overrides(load("local/1p1d").layout, moved)
    plan = build_plan(layout)
    assert (plan.process("prefill").kv_events_port, plan.process("decode").kv_events_port) == (
        5558,
        5559,
    )


def test_a_port_map_reaches_config_and_proxy_less_the_rank() -> None:
    layout = load("a3/glm5.1/1x2p1x4d").layout
    plan = build_plan(layout)
    mapping = {(p.node, p.kv_events_port): 41000 + i for i, p in enumerate(plan.processes)
               if p.kv_events_port}  # fmt: skip
    mapped = build_plan(layout, PlanOptions(port_map=mapping))
    for p in mapped.processes:
        if p.kv_events_port is None:
            continue
        assert 41000 <= p.kv_events_port < 41100
        endpoint = f"tcp://*:{p.kv_events_port - (p.dp_rank or 0)}"
        assert _config(p) == {**(_config(p) or {}), "endpoint": endpoint}
        assert any(e.endswith(f":{p.kv_events_port}") for e in mapped.process("proxy").argv)


@pytest.mark.parametrize("name", ["local/1p1d", "local/dp2", "a3/glm5.1/1x2p1x4d"])
def test_kv_events_false_drops_flags_ports_and_the_policy(name: str) -> None:
    on = build_plan(load(name).layout)
    off = build_plan(apply_overrides(load(name).layout, [OFF]))
    words = ("--kv-events-config", "--kv-events", "--prefill-policy", "--decode-policy")
    assert any(w in p.argv for p in on.processes for w in words)  # positive control
    for p in off.processes:
        assert not set(words) & set(p.argv), (name, p.name)
        assert p.kv_events_port is None and "KV_EVENTS" not in p.settings
    proxy_on, proxy_off = on.process("proxy"), off.process("proxy")
    assert proxy_off.proxy is not None and proxy_off.proxy.kv_events == ()
    # what remains is the layout's own proxy command: the default policies
    dropped = [a for a in proxy_on.argv if "=tcp://" not in a and a not in (*words, "kv-events")]
    assert list(proxy_off.argv) == dropped


def _dry(script: Path, env: dict[str, str]) -> list[str]:
    out = subprocess.run(
        ["dash", str(script)],
        env={"PATH": "/usr/bin:/bin", "DRY_RUN": "1", "NODE0_IP": "10.0.0.1", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.splitlines()


def test_kv_events_0_at_launch_turns_it_off_in_engine_and_proxy_scripts(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_rendering(build_plan(load("local/1p1d").layout), out, "modelarts")
    plan = build_plan(load("local/1p1d").layout, PlanOptions(hosts=("10.0.0.1",)))
    for name in ("prefill", "proxy"):
        argv = [line for line in _dry(out / f"{name}.sh", {}) if not line.startswith("env ")]
        assert argv[2:] == list(plan.process(name).argv)[2:], name  # the script = the Plan
        assert {"--kv-events-config", "--kv-events"} & set(argv), name
        off = _dry(out / f"{name}.sh", {"KV_EVENTS": "0"})
        assert not {"--kv-events-config", "--kv-events", "kv-events"} & set(off), name


def test_layouts_check_says_why_an_engine_asked_to_publish_cannot() -> None:
    on = "engines.*.settings.kv_events=true"
    builtin = apply_overrides(load("a3/deepseekv4-flash/2p1x2d").layout, [on])
    assert not any(p.kv_events_port for p in build_plan(builtin).processes)
    warned = [f.message for f in check_layout(builtin) if "settings.kv_events" in f.field]
    assert len(warned) == 3 and all("16 DP ranks itself" in m or "32 DP ranks" in m for m in warned)
    uncached = apply_overrides(load("a3/deepseekv4-flash/1p1d").layout, [on])
    warned = [f.message for f in check_layout(uncached) if "settings.kv_events" in f.field]
    assert len(warned) == 2 and all("prefix caching is off" in m for m in warned)
    own = apply_overrides(
        load("local/1p1d").layout,
        ['engines.prefill.engine_args.kv_events_config={"enable_kv_cache_events": true}'],
    )
    errors = [f for f in check_layout(own) if f.level == "error"]
    assert [f.field for f in errors] == ["engines[0].engine_args.kv_events_config (prefill)"]
    assert not [f for f in check_layout(load("local/1p1d").layout) if "kv_events" in f.field]
