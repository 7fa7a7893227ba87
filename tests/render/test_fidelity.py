"""Fidelity: servekit's Plan of each A3 layout against the source's own commands.

The fixtures (tests/render/fidelity/a3/<layout>.json) hold the normalized facts of
every process that the source layout starts, taken by running its scripts on the
fake platform (see the README there). The layout is loaded by its old name
``a3/<layout>``, an alias of the imported ``a3/deepseekv4-flash/<layout>``. Here each Plan process is normalized the
same way (``${NODE<k>_IP}`` -> ``{NODE<k>_IP}``, a reference to the variable
itself -> ``{INHERITED}``) and compared process by process; a failure prints the
readable diff. A difference passes only when the layout records it as a
deviation (flag or variable named, with its reason); the proxy, which servekit
replaces, is compared by its fan-out.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from servekit.catalog.loader import load
from servekit.catalog.schema import Deviation
from servekit.importer.platform import fixture
from servekit.importer.platform.compare import compare
from servekit.importer.platform.normalize import (
    JSONValue,
    Placeholders,
    ProcessFacts,
    keyed,
    node_placeholders,
    process_facts,
)
from servekit.render.envvalues import template_value
from servekit.render.plan import Plan, PlanOptions, ProcessPlan, build_plan

FIXTURES = Path(__file__).parent / "fidelity" / "a3"
LAYOUTS = ("1node", "2nodes", "1p1d", "2p1x2d", "2p2d", "3p1d", "1p3d")


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


def plan_env(p: ProcessPlan) -> dict[str, str]:
    """A process's typed environment as the scripts expand it, this node's refs made explicit."""
    env = {name: template_value(name, value) for name, value in p.env.items()}
    mine = {"${NODE_IP}": f"${{NODE{p.node}_IP}}", "${NODE_NIC}": f"${{NODE{p.node}_NIC}}"}
    for ref, node_ref in mine.items():
        env = {name: value.replace(ref, node_ref) for name, value in env.items()}
    return env


def plan_facts(name: str) -> list[ProcessFacts]:
    """Every process of servekit's Plan of ``a3/<name>``, normalized."""
    plan = build_plan(load(f"a3/{name}").layout, PlanOptions())
    placeholders = plan_placeholders(plan)
    return [
        process_facts(
            node=p.node,
            kind=p.kind,
            argv=p.argv,
            env=plan_env(p),
            cwd=p.cwd,
            placeholders=placeholders,
        )
        for p in plan.processes
    ]


def source_facts(name: str) -> list[ProcessFacts]:
    return fixture.read(FIXTURES / f"{name}.json")[1]


def deviations(name: str) -> tuple[Deviation, ...]:
    return load(f"a3/{name}").layout.provenance.deviations


def _proxy_fanout(p: ProcessFacts) -> ProcessFacts:
    """A proxy's facts as its fan-out: listen address, port, prefill and decode endpoints.

    The vendored proxy spells them as host and port lists, servekit's as URLs; the
    program itself is a recorded deviation, the fan-out must still be equal.
    """
    values = p.flag_values()

    def one(flag: str) -> JSONValue:
        return values[flag][0][0]

    def pairs(hosts: str, ports: str) -> list[str]:
        return [f"{h}:{q}" for h, q in zip(values[hosts][0], values[ports][0], strict=True)]

    def urls(flag: str) -> list[str]:
        return sorted(str(u).removeprefix("http://") for u in values.get(flag, [()])[0])

    if "--prefiller-hosts" in values:
        prefill = sorted(pairs("--prefiller-hosts", "--prefiller-ports"))
        decode = sorted(pairs("--decoder-hosts", "--decoder-ports"))
    else:
        prefill, decode = urls("--prefill"), urls("--decode")
    flags = (
        ("--host", (one("--host"),)),
        ("--port", (one("--port"),)),
        ("--prefill", tuple(prefill)),
        ("--decode", tuple(decode)),
    )
    return replace(p, program=("proxy",), flags=flags, env={}, cwd=None)


def without_deviations(
    facts: list[ProcessFacts], recorded: tuple[Deviation, ...], engine_of: dict[str, str]
) -> list[ProcessFacts]:
    """Facts with every recorded deviation taken out, so only unrecorded differences remain."""
    out = []
    for p in facts:
        engine = engine_of.get(p.key, "")
        mine = [d for d in recorded if not d.engines or engine in d.engines]
        if p.kind == "proxy" and any(d.process == "proxy" for d in recorded):
            out.append(_proxy_fanout(p))
            continue
        flags = {d.flag for d in mine if d.flag}
        env = {d.env for d in mine if d.env}
        out.append(
            replace(
                p,
                flags=tuple(f for f in p.flags if f[0] not in flags),
                env={k: v for k, v in p.env.items() if k not in env},
            )
        )
    return out


def engines_by_key(name: str) -> dict[str, str]:
    plan = build_plan(load(f"a3/{name}").layout, PlanOptions())
    return {
        key: p.engine or ""
        for key, p in zip((f.key for f in plan_facts(name)), plan.processes, strict=True)
    }


@pytest.mark.parametrize("name", LAYOUTS)
def test_plan_equals_the_source_command_of_every_process(name: str) -> None:
    """0 flag and 0 env differences, but for the layout's recorded deviations."""
    recorded, engine_of = deviations(name), engines_by_key(name)
    diff = compare(
        without_deviations(source_facts(name), recorded, engine_of),
        without_deviations(plan_facts(name), recorded, engine_of),
    )
    assert diff.clean, f"a3/{name} differs from its source:\n{diff.text}"


@pytest.mark.parametrize("name", LAYOUTS)
def test_every_recorded_deviation_is_a_real_difference(name: str) -> None:
    """A deviation that names nothing that differs would hide a future regression."""
    source, plan = keyed(source_facts(name)), keyed(plan_facts(name))
    for d in deviations(name):
        assert d.reason.strip(), d
        if d.process == "proxy":
            proxies = [(source[k], plan[k]) for k in source if source[k].kind == "proxy"]
            assert proxies and all(a.program != b.program for a, b in proxies), d
            continue
        if d.flag:
            assert any(
                source[k].flag_values().get(d.flag) != plan[k].flag_values().get(d.flag)
                for k in source
            ), f"{d.flag} does not differ anywhere"
        if d.env:
            assert any(source[k].env.get(d.env) != plan[k].env.get(d.env) for k in source), (
                f"{d.env} does not differ anywhere"
            )


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


# The re-derivation of these facts from a source checkout (SERVEKIT_SOURCE_CHECKOUT)
# is tests/importer/test_source_facts.py, which runs the product's contained extractor.
