"""The ports a layout's Plan binds, and how they are laid out on this one machine.

A layout plans ports per node. On one machine two nodes' processes cannot share
a port number, so a multi-node layout whose nodes plan the same port gets every
planned port mapped to a free local one, and ``up`` says so in one line (the
same mapping ``--free-ports`` asks for). A layout whose planned ports can all
coexist keeps them, after checking that each is free (or is mapped too, with
``--free-ports``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from servekit.catalog import Layout
from servekit.local import ports
from servekit.render import PlanOptions, PortMap, build_plan

LOOPBACK = ports.LOOPBACK
SHOWN = 4


@dataclass(frozen=True)
class PortChoice:
    """The Plan's port map (empty: planned ports as they are) and the line that explains it."""

    mapping: PortMap
    note: str | None = None


def planned(layout: Layout) -> list[tuple[int, int, str]]:
    """(node, port, process) for every port the unmapped Plan binds."""
    plan = build_plan(layout, PlanOptions(hosts=(LOOPBACK,) * layout.nodes))
    return [(p.node, port, p.name) for p in plan.processes for port in p.bound_ports()]


def shared_ports(wanted: list[tuple[int, int, str]]) -> list[int]:
    """Port numbers that more than one node plans (they cannot coexist on one machine)."""
    nodes: dict[int, set[int]] = defaultdict(set)
    for node, port, _ in wanted:
        nodes[port].add(node)
    return sorted(port for port, where in nodes.items() if len(where) > 1)


def _some(values: list[int]) -> str:
    shown = ", ".join(str(v) for v in values[:SHOWN])
    return shown + (f" and {len(values) - SHOWN} more" if len(values) > SHOWN else "")


def choose(layout: Layout, free_ports: bool) -> PortChoice:
    """Map the planned ports when asked or when nodes share them; else prove them free."""
    wanted = planned(layout)
    pairs = [(node, port) for node, port, _ in wanted]
    if free_ports:
        return PortChoice(ports.map_to_free(pairs))
    shared = shared_ports(wanted)
    if shared:
        note = (
            f"note: {layout.name} plans {layout.nodes} nodes that each bind port "
            f"{_some(shared)}; on this one machine every planned port is mapped to a free "
            "local one (as --free-ports does; 'servekit status' shows them)"
        )
        return PortChoice(ports.map_to_free(pairs), note)
    ports.require_free({port: name for _, port, name in wanted})
    return PortChoice({})


def port_map(layout: Layout, free_ports: bool) -> PortMap:
    """The Plan port map :func:`choose` settles on."""
    return choose(layout, free_ports).mapping
