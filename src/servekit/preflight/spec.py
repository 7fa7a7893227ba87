"""What the preflight checks on each unit of a Plan: the spec shipped beside the scripts.

A unit is what one preflight run checks: a node of the Plan (ModelArts, plain
nodes) or a pod (Kubernetes, where two engines sharing a node are two pods).
Everything in the spec comes from the Plan, never from the node:

- the devices its processes use (by id on a node; by count in a pod, whose
  device plugin picks them);
- the ports its processes bind (:func:`servekit.render.port_bindings`, the same
  table ``layouts check`` reads) and the range AscendDirectTransport reserves
  (:func:`servekit.render.reserved_ports`);
- the model path, on units that run an engine;
- its peers: the units it exchanges collectives with (one engine's DP ranks on
  several units) or KV with (every prefill unit and every decode unit of a PD
  layout), each with the reason.

:func:`preflight_files` gives the spec (``servekit_preflight.json``) and the
node-side program (:mod:`servekit.preflight.node`) that every platform ships.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from servekit.preflight.node import servekit_preflight as entry
from servekit.render import Plan, ProcessPlan, port_bindings, reserved_ports

SPEC_FILE = "servekit_preflight.json"
ENTRY_FILE = "servekit_preflight.py"
PORT_BASE = 18900
"""First port the units exchange their results on (below every reserved range, above
the layouts' API ports); the first one no unit binds and no range reserves is taken."""
PLATFORM_OF = {"ascend-a2": "a2", "ascend-a3": "a3", "nvidia": "nvidia", "cpu": "cpu"}
DeviceIds = Literal["exact", "visible"]


@dataclass(frozen=True)
class Unit:
    """One preflight run's share of the Plan: a node, or a pod."""

    name: str
    label: str
    node: int
    processes: tuple[ProcessPlan, ...]
    devices: tuple[int, ...]
    device_ids: DeviceIds = "exact"
    address: str | None = None

    @property
    def engines(self) -> set[str]:
        return {p.engine for p in self.processes if p.engine is not None}


def node_units(plan: Plan) -> list[Unit]:
    """One unit per node of the Plan (its address comes from the platform at launch)."""
    return [
        Unit(
            name=f"node{n.index}",
            label=f"node {n.index}",
            node=n.index,
            processes=n.processes,
            devices=tuple(sorted({d for p in n.processes for d in p.devices})),
        )
        for n in plan.nodes
    ]


def unit_ports(plan: Plan, unit: Unit) -> list[tuple[int, str]]:
    """The (port, owner) its processes bind, from the bindings ``layouts check`` reads."""
    owners = {p.name for p in unit.processes} | unit.engines
    found = port_bindings(plan).get(unit.node, [])
    return sorted({(port, owner) for port, owner in found if owner.split(" ", 1)[0] in owners})


def peers(plan: Plan, units: Sequence[Unit]) -> dict[str, list[tuple[str, str]]]:
    """Unit -> (peer, why): one engine's DP ranks across units, and prefill -> decode KV."""
    found: dict[str, dict[str, str]] = {u.name: {} for u in units}

    def link(a: Unit, b: Unit, why: str) -> None:
        if a.name != b.name:
            found[a.name].setdefault(b.name, why)
            found[b.name].setdefault(a.name, why)

    for engine in dict.fromkeys(p.engine for p in plan.processes if p.engine is not None):
        holders = [u for u in units if engine in u.engines]
        for i, a in enumerate(holders):
            for b in holders[i + 1 :]:
                link(a, b, f"collectives of {engine}")
    kv = [p for p in plan.processes if p.kv_connector is not None and p.engine is not None]
    prefill = dict.fromkeys(p.engine for p in kv if p.role == "prefill")
    decode = dict.fromkeys(p.engine for p in kv if p.role == "decode")
    for p_engine in prefill:
        for d_engine in decode:
            for a in (u for u in units if p_engine in u.engines):
                for b in (u for u in units if d_engine in u.engines):
                    link(a, b, f"KV {p_engine} -> {d_engine}")
    return {name: sorted(by.items()) for name, by in found.items()}


def exchange_port(plan: Plan, units: Sequence[Unit]) -> int:
    """The first port from :data:`PORT_BASE` no unit binds and no reserved range holds."""
    taken = {port for u in units for port, _ in unit_ports(plan, u)}
    reserved = reserved_ports(plan.hardware) if plan.hardware is not None else None
    port = PORT_BASE
    while port in taken or (reserved is not None and reserved[0] <= port < reserved[1]):
        port += 1
    return port


def spec_doc(plan: Plan, units: Sequence[Unit]) -> dict[str, Any]:
    """The spec every unit's preflight reads (``servekit_preflight.json``)."""
    hardware = plan.hardware
    accelerator = hardware.accelerator if hardware is not None else "cpu"
    reserved = reserved_ports(hardware) if hardware is not None else None
    linked = peers(plan, units)
    return {
        "schema": entry.SPEC_SCHEMA,
        "layout": plan.layout,
        "accelerator": accelerator,
        "platform": PLATFORM_OF.get(accelerator, "cpu"),
        "devices_per_node": hardware.devices_per_node if hardware is not None else 0,
        "reserved": list(reserved) if reserved is not None else None,
        "port": exchange_port(plan, units),
        "model_path": plan.model_path,
        "units": [
            {
                "name": u.name,
                "label": u.label,
                "node": u.node,
                "address": u.address,
                "devices": list(u.devices),
                "device_ids": u.device_ids,
                "ports": [list(p) for p in unit_ports(plan, u)],
                "model": any(p.kind == "engine" for p in u.processes),
                "peers": [list(p) for p in linked[u.name]],
                "processes": [p.name for p in u.processes],
            }
            for u in units
        ],
    }


def spec_text(plan: Plan, units: Sequence[Unit]) -> str:
    """The spec as JSON, one unit a line (a reader of the rendered folder sees each node)."""
    doc = spec_doc(plan, units)
    head = json.dumps({k: v for k, v in doc.items() if k != "units"})
    lines = ",\n".join(" " + json.dumps(u) for u in doc["units"])
    return head[:-1] + ', "units": [\n' + lines + "\n]}\n"


def checker_files() -> dict[str, bytes]:
    """The node-side program, byte for byte servekit's own (:mod:`servekit.preflight.node`)."""
    return {name: entry.source_bytes(name) for name in entry.FILES}


def preflight_files(plan: Plan, units: Sequence[Unit] | None = None) -> dict[str, str | bytes]:
    """The spec and the node-side program, as a platform writes them beside its scripts."""
    files: dict[str, str | bytes] = {SPEC_FILE: spec_text(plan, units or node_units(plan))}
    files.update(checker_files())
    return files
