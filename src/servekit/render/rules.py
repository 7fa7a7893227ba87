"""Validation rules the layouts imply, each a small function returning findings.

Every finding names the layout, the field and the fix. Errors make
``servekit layouts check`` exit 1; warnings are printed and fail only with
``--strict``. Rules read the layout and its Plan (the same one ``render`` uses)
so that what is checked is exactly what would be launched.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Literal

from servekit.catalog import Engine, Hardware, Layout, LayoutName, Proxy, Topology
from servekit.defaults import NOT_ROUTED
from servekit.kvprotocol import LAYERWISE_CONNECTOR, protocol_of
from servekit.render.plan import (
    Plan,
    PlanOptions,
    UnroutedEndpoint,
    build_plan,
    engine_settings,
    kv_events_reason,
)
from servekit.vocabulary import KV_ROLE_OF, PD_PROXY_MODES, PD_ROLES, Role, StrictModel

Level = Literal["error", "warning"]

ASCEND_RESERVED_BASE = 20000
ASCEND_RESERVED_PER_DEVICE = 1000


class Finding(StrictModel):
    level: Level
    layout: str
    field: str
    message: str
    # a rule some source folder breaks: kept (a warning) where the import recorded it
    source_value: bool = False

    def line(self) -> str:
        return f"{self.level}: {self.text()}"

    def text(self) -> str:
        """The finding without its level (for a message that says its own)."""
        return f"{self.layout}: {self.field}: {self.message}"


def source_caveat(field: str, message: str) -> str:
    """The caveat an import records for a rule the source's own values break."""
    return f"the source's own value, kept: {field}: {message}"


Rule = Callable[[Layout, Plan], Iterable[Finding]]


def _err(layout: Layout, field: str, message: str) -> Finding:
    return Finding(level="error", layout=layout.name, field=field, message=message)


def _warn(layout: Layout, field: str, message: str) -> Finding:
    return Finding(level="warning", layout=layout.name, field=field, message=message)


def _source_err(layout: Layout, field: str, message: str) -> Finding:
    """An error, or a warning for an imported layout, whose values are its source's own.

    An imported layout equals its source flag for flag (the fidelity test holds it
    so); what servekit would not write itself is shown, not refused, so the
    catalog can hold the source as it is and name its defects.
    """
    recorded = source_caveat(field, message) in layout.provenance.caveats
    imported = layout.provenance.source_ref is not None and LayoutName.parse(layout.name).has_model
    if recorded or imported:
        return _warn(layout, field, f"{message} (the source's own value)")
    return Finding(
        level="error", layout=layout.name, field=field, message=message, source_value=True
    )


def _engine_field(layout: Layout, engine: Engine, attr: str) -> str:
    return f"engines[{layout.engines.index(engine)}].{attr} ({engine.name})"


def rule_devices_fill_node(layout: Layout, plan: Plan) -> Iterable[Finding]:
    """dp_size_per_node x tp must equal the devices per node, unless declared partial."""
    per_node = layout.hardware.devices_per_node
    if per_node == 0:
        return
    for e in layout.engines:
        used = e.dp_size_per_node * e.tp
        if e.partial_node:
            if used > per_node:
                yield _err(
                    layout,
                    _engine_field(layout, e, "tp"),
                    f"uses {used} devices but a node has {per_node}",
                )
            if e.devices is not None and len(e.devices) != used:
                yield _err(
                    layout,
                    _engine_field(layout, e, "devices"),
                    f"lists {len(e.devices)} devices but dp_size_per_node x tp = {used}; list exactly {used}",
                )
            continue
        if used != per_node:
            yield _err(
                layout,
                _engine_field(layout, e, "dp_size_per_node"),
                f"dp_size_per_node {e.dp_size_per_node} x tp {e.tp} = {used}, but "
                f"{layout.hardware.accelerator} nodes have {per_node} devices; "
                "make them equal or set partial_node: true",
            )


def rule_engine_ids(layout: Layout, plan: Plan) -> Iterable[Finding]:
    """engine_id is unique per engine; PD engines with a KV connector need one."""
    seen: dict[str, str] = {}
    for e in layout.engines:
        if e.engine_id is None:
            if e.kv_connector is not None and e.kv_port is not None:
                yield _source_err(
                    layout,
                    _engine_field(layout, e, "engine_id"),
                    "a KV connector with a kv_port needs an engine_id; add a unique one",
                )
            continue
        if e.engine_id in seen:
            yield _err(
                layout,
                _engine_field(layout, e, "engine_id"),
                f"engine_id {e.engine_id!r} is already used by engine {seen[e.engine_id]!r}; "
                "give every engine its own id (convention: prefill even, decode odd)",
            )
        seen[e.engine_id] = e.name
    ids = defaultdict(set)
    for p in plan.processes:
        if p.engine is not None:
            ids[p.engine].add(p.engine_id)
    for name, values in ids.items():
        if len(values) > 1:
            yield _err(layout, f"engines ({name})", "ranks of one engine disagree on engine_id")


def reserved_ports(hardware: Hardware) -> tuple[int, int] | None:
    """``[low, high)``: where Ascend's direct transport takes random ports on a node of
    this hardware (1000 per device from 20000); None off Ascend. ``layouts check`` warns
    for a kv_port in it, the preflight for any port a node binds in it."""
    if not hardware.is_ascend:
        return None
    top = ASCEND_RESERVED_BASE + ASCEND_RESERVED_PER_DEVICE * hardware.devices_per_node
    return ASCEND_RESERVED_BASE, top


def rule_kv_port_reserved(layout: Layout, plan: Plan) -> Iterable[Finding]:
    """Ascend's direct transport takes random ports in [20000, 20000 + 1000 x devices)."""
    span = reserved_ports(layout.hardware)
    if span is None:
        return
    low, top = span
    for e in layout.engines:
        if e.kv_port is not None and low <= e.kv_port < top:
            yield _warn(
                layout,
                _engine_field(layout, e, "kv_port"),
                f"kv_port {e.kv_port} lies in [{low}, {top}), which AscendDirectTransport "
                f"reserves on {layout.hardware.devices_per_node}-device nodes: expect random "
                f"'ZMQError: Address already in use'; move it to >= {top}",
            )


def port_bindings(plan: Plan) -> dict[int, list[tuple[int, str]]]:
    """Node -> every (port, what binds it) of the Plan: API, DP rpc, KV events, and the
    KV side channel of each DP rank (its engine's kv_port + rank x tp)."""
    by_node: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for p in plan.processes:
        if p.api_port is not None:
            by_node[p.node].append((p.api_port, f"{p.name} API"))
        if p.rpc_port is not None:
            by_node[p.node].append((p.rpc_port, f"{p.name} DP rpc"))
        if p.kv_events_port is not None:
            by_node[p.node].append((p.kv_events_port, f"{p.name} KV events"))
    for p in plan.processes:
        if p.kv_port is None or p.engine is None:
            continue
        first = p.dp_rank or 0
        for rank in range(first, first + p.dp_local):
            side = (p.kv_port + rank * p.tp, f"{p.engine} kv side channel (dp rank {rank})")
            if side not in by_node[p.node]:
                by_node[p.node].append(side)
    return by_node


def rule_port_collisions(layout: Layout, plan: Plan) -> Iterable[Finding]:
    """No two listeners on one node share a port (API, rpc, proxy, KV windows)."""
    for node, bindings in sorted(port_bindings(plan).items()):
        owners: dict[int, str] = {}
        for port, owner in bindings:
            if port in owners and owners[port] != owner:
                yield _err(
                    layout,
                    f"node {node} port {port}",
                    f"{owner} collides with {owners[port]}; move one of them",
                )
            owners.setdefault(port, owner)


def rule_connector_extra_config(layout: Layout, plan: Plan) -> Iterable[Finding]:
    """Connector extra config (prefill/decode dp and tp) is identical everywhere and true."""
    with_sizes = [
        e
        for e in layout.engines
        if e.kv_connector is not None
        and ("prefill" in e.kv_connector.extra_config or "decode" in e.kv_connector.extra_config)
    ]
    if not with_sizes:
        return
    reference = with_sizes[0].kv_connector.extra_config if with_sizes[0].kv_connector else {}
    for e in with_sizes[1:]:
        assert e.kv_connector is not None
        if e.kv_connector.extra_config != reference:
            yield _err(
                layout,
                _engine_field(layout, e, "kv_connector.extra_config"),
                f"differs from {with_sizes[0].name}'s; every engine must carry the same extra config",
            )
    for role in PD_ROLES:
        sizes = reference.get(role)
        if not isinstance(sizes, dict):
            continue
        for e in (x for x in layout.engines if x.role == role):
            want = {"dp_size": e.dp_size, "tp_size": e.tp}
            got = {k: sizes.get(k) for k in want}
            if got != want:
                yield _err(
                    layout,
                    _engine_field(layout, e, "kv_connector.extra_config"),
                    f"says {role} {got} but engine {e.name} is dp_size {e.dp_size}, tp_size {e.tp}; "
                    "make the extra config match the real engine",
                )


def rule_connector_roles(layout: Layout, plan: Plan) -> Iterable[Finding]:
    for e in layout.engines:
        want = KV_ROLE_OF.get(e.role)
        if e.kv_connector is not None and want and e.kv_connector.role not in (want, "kv_both"):
            yield _err(
                layout,
                _engine_field(layout, e, "kv_connector.role"),
                f"a {e.role} engine's connector role must be {want}, not {e.kv_connector.role}",
            )


def rule_proxy_fanout(layout: Layout, plan: Plan) -> Iterable[Finding]:
    """The proxy lists exactly the API endpoints of its engines (headless ranks excluded)."""
    proxy = layout.proxy
    if proxy is None:
        if layout.is_pd:
            yield _err(layout, "proxy", "a PD layout needs exactly one proxy; add a proxy section")
        return
    roles: tuple[Role, ...] = ("mixed",) if proxy.mode == "replica" else PD_ROLES
    for role in roles:
        which = "replicas" if role == "mixed" else role
        listed = set(proxy.endpoints(which))
        actual = {(p.node, p.api_port) for p in plan.api_processes(role) if p.api_port}
        for node, port in sorted(listed - actual):
            yield _err(
                layout,
                f"proxy.{which}",
                f"lists node {node}:{port}, which is no {role} API endpoint (headless ranks have none); remove it",
            )
        for node, port in sorted(actual - listed):
            yield _err(
                layout, f"proxy.{which}", f"misses {role} endpoint node {node}:{port}; add it"
            )
    yield from _layerwise_pairing(layout, proxy)
    if proxy.mode in PD_PROXY_MODES and not layout.is_pd:
        yield _err(
            layout,
            "proxy.mode",
            f"mode {proxy.mode} needs prefill and decode engines; use mode replica",
        )
    if proxy.mode == "replica" and proxy.prefill + proxy.decode:
        yield _err(layout, "proxy.mode", "replica mode takes replicas, not prefill/decode lists")
    yield from _connector_protocol(layout)


def _connector_protocol(layout: Layout) -> Iterable[Finding]:
    """PD engines share one handoff protocol; the proxy's flavour follows from it."""
    protocols = {
        protocol_of(e.kv_connector.name, layout.engine_kind)
        for e in layout.engines
        if e.role in PD_ROLES and e.kv_connector is not None
    }
    if len(protocols) > 1:
        yield _err(
            layout,
            "engines.kv_connector.name",
            f"prefill and decode connectors speak different handoff protocols "
            f"({', '.join(sorted(protocols))}); use one connector for both",
        )
    proxy = layout.proxy
    if proxy is not None and proxy.mode == "prompt-keyed" and protocols - {"prompt"}:
        yield _err(
            layout,
            "proxy.mode",
            "prompt-keyed needs a prompt-keyed connector (ExampleConnector); with a connector "
            "that reads kv_transfer_params use mode pd (the Plan picks the protocol)",
        )


def _layerwise_pairing(layout: Layout, proxy: Proxy) -> Iterable[Finding]:
    """MooncakeLayerwiseConnector and proxy mode layerwise come together, or neither."""
    connectors = {e.kv_connector.name for e in layout.engines if e.kv_connector is not None}
    layerwise = LAYERWISE_CONNECTOR in connectors
    if layerwise and proxy.mode != "layerwise":
        yield _err(layout, "proxy.mode", f"engines use {LAYERWISE_CONNECTOR}, whose decoders "
                   "call the proxy back (/v1/metaserver); set proxy mode layerwise")  # fmt: skip
    if proxy.mode == "layerwise" and not layerwise:
        yield _err(layout, "proxy.mode", f"mode layerwise needs engines with {LAYERWISE_CONNECTOR}; "
                   "use mode pd for pull connectors")  # fmt: skip


def rule_speculative(layout: Layout, plan: Plan) -> Iterable[Finding]:
    """Prefill drafts one token (if any); decode drafts >= prefill's with the same method."""
    prefill = [e for e in layout.engines if e.role == "prefill" and e.speculative]
    decode = [e for e in layout.engines if e.role == "decode"]
    for p in prefill:
        assert p.speculative is not None
        if p.speculative.num_speculative_tokens != 1:
            yield _source_err(
                layout,
                _engine_field(layout, p, "speculative.num_speculative_tokens"),
                "prefill engines use num_speculative_tokens 1",
            )
        for d in decode:
            if d.speculative is None:
                yield _err(
                    layout,
                    _engine_field(layout, d, "speculative"),
                    f"prefill {p.name} speculates ({p.speculative.method}) but this decode engine does not; add the same method",
                )
            elif d.speculative.method != p.speculative.method:
                yield _err(
                    layout,
                    _engine_field(layout, d, "speculative.method"),
                    f"{d.speculative.method} differs from prefill's {p.speculative.method}; use one method",
                )
            elif d.speculative.num_speculative_tokens < p.speculative.num_speculative_tokens:
                yield _err(
                    layout,
                    _engine_field(layout, d, "speculative.num_speculative_tokens"),
                    "decode must draft at least as many tokens as prefill",
                )


def rule_nodes(layout: Layout, plan: Plan) -> Iterable[Finding]:
    """Node numbers lie in [0, nodes), every node runs something, spans match DP sizes."""
    used: set[int] = set()
    for e in layout.engines:
        for n in e.nodes:
            if not 0 <= n < layout.nodes:
                yield _err(
                    layout,
                    _engine_field(layout, e, "nodes"),
                    f"node {n} is outside 0..{layout.nodes - 1}; fix nodes or the node count",
                )
            used.add(n)
        if len(set(e.nodes)) != len(e.nodes):
            yield _err(layout, _engine_field(layout, e, "nodes"), "lists a node twice")
        span = e.dp_size // e.dp_size_per_node
        if e.launch != "single" and span != len(e.nodes):
            yield _err(
                layout,
                _engine_field(layout, e, "nodes"),
                f"dp_size {e.dp_size} / dp_size_per_node {e.dp_size_per_node} = {span} nodes, but it lists {len(e.nodes)}",
            )
    if layout.proxy is not None:
        if not 0 <= layout.proxy.node < layout.nodes:
            yield _err(
                layout, "proxy.node", f"node {layout.proxy.node} is outside 0..{layout.nodes - 1}"
            )
        used.add(layout.proxy.node)
    for n in range(layout.nodes):
        if n not in used:
            yield _err(
                layout,
                "nodes",
                f"node {n} runs nothing; lower nodes to {len(used)} or place an engine there",
            )


def rule_decode_guard(layout: Layout, plan: Plan) -> Iterable[Finding]:
    """A PD decode engine without the guard can be killed by one plain request."""
    for p in plan.processes:
        if p.role == "decode" and p.api_port is not None and p.settings.get("GUARD") == "0":
            yield _warn(
                layout,
                f"engines ({p.engine}).settings.guard",
                "decode guard is off: a plain request straight to this decode engine can kill it; set guard: true",
            )
            return


def rule_kv_events(layout: Layout, plan: Plan) -> Iterable[Finding]:
    """An engine whose kv_events setting is on publishes, or says why it cannot."""
    for e in layout.engines:
        on = engine_settings(layout, e).get("kv_events") is True
        if on and "kv_events_config" in e.engine_args:
            yield _err(
                layout,
                _engine_field(layout, e, "engine_args.kv_events_config"),
                "gives its own --kv-events-config while its kv_events setting is on (the Plan "
                "writes one and plans its port); drop one of them",
            )
            continue
        reason = kv_events_reason(layout, e)
        if reason is not None and reason != NOT_ROUTED:
            yield _warn(
                layout,
                _engine_field(layout, e, "settings.kv_events"),
                f"is on, but this engine publishes no KV events: {reason}; the proxy routes "
                "it by load (set kv_events: false to say so)",
            )


def rule_provenance(layout: Layout, plan: Plan) -> Iterable[Finding]:
    """Stale verification records and derived layouts are flagged, never counted as verified."""
    v = layout.provenance.verification
    if v.verified and v.image and v.image != layout.image:
        yield _warn(
            layout,
            "provenance.verification",
            f"verified on {v.image}, now {layout.image}: counts as unverified until re-run",
        )
    if v.verified and not v.image:
        yield _warn(
            layout,
            "provenance.verification.image",
            "verified without naming the image; record the image it was verified on",
        )
    # A derived layout is not warned about: its status says "derived" until a
    # ledger record of its own verifies it (catalog.ledger), so --strict passes it.


def topology_of(layout: Layout) -> str:
    """The name the grammar (:class:`servekit.catalog.Topology`) gives this layout's
    engines, or ``?`` when it has none (instances of one role spanning unequal node
    counts, mixed beside PD)."""
    spans: dict[str, list[int]] = {}
    for e in layout.engines:
        spans.setdefault(e.role, []).append(len(e.nodes) * e.replicas)
    found = Topology.of_spans(spans, layout.nodes)
    return "?" if found is None else found.name


def rule_topology_name(layout: Layout, plan: Plan) -> Iterable[Finding]:
    """A name whose topology part is in the grammar must say the topology its engines
    have; a name outside the grammar (a user's own folder) says none and is not held
    to one."""
    named = LayoutName.parse(layout.name)
    if named.topology is None:
        return
    said = Topology.parse(named.topology)
    if said is None:
        return
    actual = topology_of(layout)
    if said.name != actual:
        yield _err(
            layout,
            "name",
            f"says {named.topology} but its engines make {actual} (A/C instances, B/D nodes "
            f"each instance spans, x1 omitted); rename it {named.with_leaf(actual)}",
        )


RULES: tuple[Rule, ...] = (
    rule_devices_fill_node,
    rule_engine_ids,
    rule_kv_port_reserved,
    rule_port_collisions,
    rule_connector_extra_config,
    rule_connector_roles,
    rule_proxy_fanout,
    rule_speculative,
    rule_nodes,
    rule_decode_guard,
    rule_kv_events,
    rule_provenance,
    rule_topology_name,
)


def check_layout(layout: Layout) -> list[Finding]:
    """Run every rule on one layout."""
    try:
        try:
            plan = build_plan(layout, PlanOptions())
        except UnroutedEndpoint:  # rule_proxy_fanout names each endpoint; judge the engines
            plan = build_plan(layout.model_copy(update={"proxy": None}), PlanOptions())
    except (ValueError, KeyError, StopIteration) as exc:
        return [_err(layout, "engines", f"cannot build a plan: {exc}")]
    findings: list[Finding] = []
    for rule in RULES:
        findings.extend(rule(layout, plan))
    return findings
