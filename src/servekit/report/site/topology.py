"""Topology of a layout: its class for the index filters and its SVG diagram.

A PD layout is labelled by the topology grammar's own name (``2p1x2d``,
:class:`servekit.catalog.Topology`, through ``render.topology_of``): the site
speaks the catalog's one shape vocabulary. A mixed one says its DP ranks or
replicas (what its grammar name, ``<N>nodes``, does not).

Both come from the Plan (processes per node, DP ranks, the proxy's references to
its backends), so the picture shows what would actually be launched, not what the
prose says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from servekit.catalog import Layout
from servekit.render import Plan, ProcessPlan, device_span, topology_of

TopologyKind = Literal["single", "dp", "pd"]

ROLE_COLOURS = {"prefill": "#2f6fd0", "decode": "#d07a1f", "mixed": "#2e8b57", "proxy": "#5b4aa8"}
NODE_W = 250
NODE_GAP = 28
PAD = 16
SQUARE = 11
PER_ROW = 16
PROXY_H = 46
TOP = PROXY_H + 60


@dataclass(frozen=True)
class TopologyClass:
    """What the index filters on: the kind and its label (e.g. ``pd`` / ``2p1x2d``)."""

    kind: TopologyKind
    label: str


def classify(layout: Layout) -> TopologyClass:
    """single (one engine, one rank), dp (ranks or replicas), pd (the grammar's name)."""
    if layout.is_pd:
        return TopologyClass("pd", topology_of(layout))
    ranks = sum(e.dp_size * e.replicas for e in layout.engines)
    replicas = sum(e.replicas for e in layout.engines)
    if replicas > 1 and ranks == replicas:
        return TopologyClass("dp", f"{replicas} replicas")
    if ranks > 1:
        return TopologyClass("dp", f"DP={ranks}")
    return TopologyClass("single", "single")


@dataclass(frozen=True)
class Group:
    """The processes of one engine on one node, drawn as one box."""

    engine: str
    role: str
    node: int
    engine_id: str | None
    ranks: tuple[int, ...]
    headless: bool
    devices: tuple[int, ...]
    processes: tuple[str, ...]
    tp: int
    x: float = 0.0
    y: float = 0.0
    h: float = 0.0

    @property
    def rows(self) -> int:
        return max(1, -(-len(self.ranks) // PER_ROW))


def _ranks(p: ProcessPlan) -> tuple[int, ...]:
    if p.dp_rank is None:
        return (0,)
    return tuple(range(p.dp_rank, p.dp_rank + p.dp_local))


def groups(plan: Plan) -> list[Group]:
    """One group per (engine, node), in plan order."""
    found: dict[tuple[str, int], list[ProcessPlan]] = {}
    for p in plan.processes:
        if p.kind == "engine" and p.engine is not None:
            found.setdefault((p.engine, p.node), []).append(p)
    out = []
    for (engine, node), procs in found.items():
        ranks = tuple(r for p in procs for r in _ranks(p))
        out.append(
            Group(
                engine=engine,
                role=procs[0].role,
                node=node,
                engine_id=procs[0].engine_id,
                ranks=ranks,
                headless=all(p.headless for p in procs),
                devices=tuple(d for p in procs for d in p.devices),
                processes=tuple(p.name for p in procs if p.api_port is not None),
                tp=procs[0].tp,
            )
        )
    return out


def _place(plan: Plan, gs: list[Group]) -> tuple[list[Group], float]:
    placed: list[Group] = []
    bottom = TOP + 60.0
    for node in plan.nodes:
        x = PAD + node.index * (NODE_W + NODE_GAP) + 10
        y = TOP + 34.0
        for g in (g for g in gs if g.node == node.index):
            h = 72.0 + g.rows * (SQUARE + 3)
            placed.append(Group(**{**g.__dict__, "x": x, "y": y, "h": h}))
            y += h + 12
        bottom = max(bottom, y + 6)
    return placed, bottom


def _proxy_targets(plan: Plan) -> dict[str, int]:
    """Process -> how often the proxy lists it among its backends (what it fans out to)."""
    proxy = next((p.proxy for p in plan.processes if p.proxy is not None), None)
    targets: dict[str, int] = {}
    if proxy is None:
        return targets
    for address in proxy.backends():
        targets[address.process] = targets.get(address.process, 0) + 1
    return targets


def _fanout(g: Group, targets: dict[str, int]) -> int:
    return sum(targets.get(name, 0) for name in g.processes)


def _esc(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def _fan_text(g: Group, fan: int, has_proxy: bool, entry_engine: str | None) -> str:
    if g.headless:
        return "headless: serves through its engine's API rank"
    if has_proxy:
        return (
            f"proxy fan-out: {fan} endpoint{'s' if fan != 1 else ''}"
            if fan
            else "not behind the proxy"
        )
    return "entry: clients connect here" if g.engine == entry_engine else "no API entry"


def _group_svg(g: Group, fan_text: str) -> list[str]:
    colour = ROLE_COLOURS.get(g.role, "#555")
    dash = ' stroke-dasharray="5 3"' if g.headless else ""
    eid = f" · id {g.engine_id}" if g.engine_id is not None else ""
    head = " · headless" if g.headless else ""
    title = f"{g.engine} ({g.role}){eid}"
    ranks = f"DP ranks {g.ranks[0]}-{g.ranks[-1]}" if len(g.ranks) > 1 else f"rank {g.ranks[0]}"
    devices = "dev " + device_span(g.devices) if g.devices else "cpu"
    detail = f"{ranks} · TP={g.tp} · {devices}{head}"
    w = NODE_W - 20
    out = [
        f'<g class="engine" data-engine="{_esc(g.engine)}" data-role="{g.role}">',
        f'<rect x="{g.x}" y="{g.y}" width="{w}" height="{g.h}" rx="6" fill="#fff" '
        f'stroke="{colour}" stroke-width="2"{dash}/>',
        f'<text x="{g.x + 8}" y="{g.y + 18}" font-size="13" font-weight="600" '
        f'fill="{colour}">{_esc(title)}</text>',
        f'<text x="{g.x + 8}" y="{g.y + 36}" font-size="11" fill="#333">{_esc(detail)}</text>',
    ]
    out.append(
        f'<text class="fan" x="{g.x + 8}" y="{g.y + 52}" font-size="11" fill="#555">'
        f"{_esc(fan_text)}</text>"
    )
    for i, rank in enumerate(g.ranks):
        sx = g.x + 8 + (i % PER_ROW) * (SQUARE + 2.5)
        sy = g.y + 60 + (i // PER_ROW) * (SQUARE + 3)
        out.append(
            f'<rect class="rank" x="{sx:.1f}" y="{sy:.1f}" width="{SQUARE}" height="{SQUARE}" '
            f'fill="{colour}" opacity="0.75"><title>DP rank {rank}</title></rect>'
        )
    out.append("</g>")
    return out


def _proxy_svg(plan: Plan, placed: list[Group], width: float) -> list[str]:
    proxy = next((p for p in plan.processes if p.kind == "proxy"), None)
    entry = plan.process(plan.entry)
    px, pw = width / 2 - 110, 220.0
    label = (
        f"proxy :{proxy.api_port} (node {proxy.node})"
        if proxy is not None
        else f"clients -> {entry.name} :{entry.api_port}"
    )
    colour = ROLE_COLOURS["proxy"]
    out = [
        f'<rect x="{px}" y="14" width="{pw}" height="{PROXY_H}" rx="8" fill="#f1eefb" '
        f'stroke="{colour}" stroke-width="2"/>',
        f'<text x="{width / 2}" y="{14 + PROXY_H / 2 + 5}" font-size="13" font-weight="600" '
        f'text-anchor="middle" fill="{colour}">{_esc(label)}</text>',
    ]
    targets = _proxy_targets(plan)
    for g in placed:
        fan = _fanout(g, targets) if proxy is not None else 0
        linked = fan > 0 or (proxy is None and g.engine == entry.engine and not g.headless)
        if not linked:
            continue
        colour = ROLE_COLOURS.get(g.role, "#555")
        out.append(
            f'<line class="fanout" x1="{width / 2}" y1="{14 + PROXY_H}" '
            f'x2="{g.x + (NODE_W - 20) / 2}" y2="{g.y}" stroke="{colour}" stroke-width="1.5" '
            f'opacity="0.8"/>'
        )
    return out


def svg(plan: Plan, layout: Layout) -> str:
    """The topology diagram: nodes as columns, engines with DP ranks, proxy fan-out."""
    placed, bottom = _place(plan, groups(plan))
    width = PAD * 2 + len(plan.nodes) * (NODE_W + NODE_GAP) - NODE_GAP
    width = max(width, 300)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="topology" viewBox="0 0 {width} '
        f'{bottom + PAD}" width="{width}" height="{bottom + PAD}" style="max-width:100%;height:auto" '
        'role="img" '
        f'aria-label="topology of {_esc(layout.name)}" font-family="system-ui, sans-serif">',
    ]
    for node in plan.nodes:
        x = PAD + node.index * (NODE_W + NODE_GAP)
        parts.append(
            f'<rect class="node" x="{x}" y="{TOP}" width="{NODE_W}" height="{bottom - TOP}" '
            f'rx="10" fill="#f4f6fa" stroke="#9aa3b5"/>'
        )
        hw = layout.hardware
        devs = f"{hw.devices_per_node} devices" if hw.devices_per_node else "cpu"
        parts.append(
            f'<text x="{x + 10}" y="{TOP + 22}" font-size="13" font-weight="600" '
            f'fill="#1d2433">node {node.index} · {hw.accelerator} · {devs}</text>'
        )
    targets = _proxy_targets(plan)
    parts += _proxy_svg(plan, placed, width)
    entry = plan.process(plan.entry)
    for g in placed:
        text = _fan_text(g, _fanout(g, targets), bool(targets), entry.engine)
        parts += _group_svg(g, text)
    parts.append("</svg>")
    return "\n".join(parts)
