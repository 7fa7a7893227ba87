"""A cluster started from the rendered scripts, as a Deployment: the Plan plus node addresses.

``servekit render NAME`` writes scripts that resolve node addresses at launch
(``${NODE<i>_IP}``), so nothing started here knows the endpoints. Given the
node addresses in rank order, the Plan gives every engine API server's URL,
role, engine id and DP rank, the proxy, and (with ``--logs DIR``, the folder
``run.sh`` filled through ``LOG_DIR``) every process's log file.

Without the addresses, a proxy in front still knows them: its
``/metrics/engines`` page lists every backend it was given, in the order the
Plan gave them (``servekit_proxy_engine_scrape_ok{engine_url, engine_role}``).
Zipping that list with the Plan's own references to the proxy's backends (each
an :class:`~servekit.render.Address`: process, node, port) recovers each node's
address; the deployment is then ``engine_access: relay`` (only the proxy is
reached, the engines' metrics come through it).

Every URL is made by :func:`servekit.render.url` from a process's reference and
an address map (process -> the host it is reached at): the nodes' addresses, or
each pod's. The Plan is built once per deployment.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from servekit.catalog import Layout
from servekit.deployment import (
    RELAY_PATH,
    Deployment,
    Endpoint,
    EngineAccess,
)
from servekit.errors import UsageError
from servekit.platforms import Attach
from servekit.render import Address, Plan, ProcessPlan, build_plan, url
from servekit.verify.options import DeploymentOptions
from servekit.vocabulary import ServedBy, check_url

LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME = re.compile(rf"(?=.{{1,253}}$){LABEL}(\.{LABEL})*")
SCRAPE_OK = "servekit_proxy_engine_scrape_ok"
UNKNOWN_HOST = "unknown-node{}.invalid"
"""A node the proxy does not front (headless ranks only): no endpoint of it is used."""

Fetch = Callable[[str], str]
"""GET a URL and return its text (raises OSError when it cannot)."""


class RelayMismatch(Exception):
    """The proxy's backends do not fit the layout's Plan (a verify failure with the reason)."""


def attached_hosts(
    attach: Attach, text: str, layout: Layout, plan: Plan | None = None
) -> dict[str, str]:
    """A platform's attach flag (``--pods POD=IP,...``) -> process name -> its address,
    as that platform's folder reads it (its row's ``attach``)."""
    return attach.hosts(text, plan or build_plan(layout))


def node_hosts(plan: Plan, nodes: Sequence[str]) -> dict[str, str]:
    """Process name -> the address of its node (``nodes`` in rank order)."""
    return {p.name: nodes[p.node] for p in plan.processes}


def parse_nodes(text: str, layout: Layout) -> tuple[str, ...]:
    """``--nodes 10.0.0.1,10.0.0.2``: one address per node of the layout, in rank order."""
    nodes = tuple(part.strip() for part in text.split(",") if part.strip())
    for node in nodes:
        if not _is_address(node):
            raise UsageError(
                f"--nodes {text}: {node!r} is not an IPv4 address or a host name; "
                "give the nodes' addresses in rank order, e.g. 10.0.0.1,10.0.0.2"
            )
    if len(nodes) != layout.nodes:
        raise UsageError(
            f"--nodes {text}: {layout.name} runs on {layout.nodes} node(s), {len(nodes)} "
            f"address(es) given; give {layout.nodes} in rank order (the rank table's order)"
        )
    if len(set(nodes)) != len(nodes):
        raise UsageError(f"--nodes {text}: an address is repeated; each node has its own")
    return nodes


def _is_address(value: str) -> bool:
    try:
        return ipaddress.ip_address(value).version == 4
    except ValueError:
        return HOSTNAME.fullmatch(value) is not None and not value.replace(".", "").isdigit()


def _endpoint(proc: ProcessPlan, url: str, logs: Path | None, relay: str | None) -> Endpoint:
    """One API server; ``relay`` is where its metrics are read when not from its own port."""
    metrics = f"{url}/metrics" if proc.kind != "proxy" else f"{url}{RELAY_PATH}"
    return Endpoint(
        name=proc.name,
        role=proc.role,
        url=url,
        engine_id=proc.engine_id,
        dp_rank=proc.dp_rank,
        node=proc.node,
        metrics_url=relay if relay and proc.kind != "proxy" else metrics,
        log=logs / f"{proc.name}.log" if logs is not None else None,
    )


def cluster_deployment(
    layout: Layout,
    nodes: Sequence[str],
    *,
    entry: str | None = None,
    logs: Path | None = None,
    engine: ServedBy = "vllm",
    access: EngineAccess = "direct",
    process_hosts: Mapping[str, str] | None = None,
    plan: Plan | None = None,
) -> Deployment:
    """The deployment of ``layout`` running on ``nodes`` (addresses in rank order).

    ``entry`` overrides the Plan's entry URL (a load balancer in front of the
    proxy, say); the proxy endpoint then has that URL too. ``process_hosts``
    (process -> address) places each process itself, where a platform runs a
    node's processes apart (Kubernetes: a pod per engine; ``nodes`` then unused,
    a process it leaves out at its node's wildcard). ``plan``: the layout's Plan,
    when the caller built it already.
    """
    plan = plan or build_plan(layout)
    if process_hosts is not None:
        hosts = {**node_hosts(plan, ("0.0.0.0",) * layout.nodes), **process_hosts}
    else:
        hosts = node_hosts(plan, nodes)

    def url_of(proc: ProcessPlan) -> str:
        return url(proc.address(), lambda a: hosts[a.process])

    entry_proc = plan.process(plan.entry)
    entry_url = (entry or url_of(entry_proc)).rstrip("/")
    has_proxy = entry_proc.kind == "proxy"
    relay = f"{entry_url}{RELAY_PATH}" if has_proxy else None
    endpoints = []
    for proc in plan.api_processes():
        address = entry_url if proc.name == plan.entry and entry else url_of(proc)
        endpoints.append(_endpoint(proc, address, logs, relay if access == "relay" else None))
    return Deployment(
        layout=layout.name,
        engine=engine,
        model=layout.model.served_name,
        entry_url=entry_url,
        endpoints=tuple(endpoints),
        capabilities=tuple(layout.model.capabilities),
        image=None,  # observed from the engines, never the layout's (verify.identity)
        engine_access=access,
        metrics_relay=relay,
        process_logs=_logs(plan, logs),
    )


def _logs(plan: Plan, logs: Path | None) -> dict[str, Path]:
    if logs is None:
        return {}
    return {p.name: logs / f"{p.name}.log" for p in plan.processes}


def relay_backends(page: str) -> list[tuple[str, str]]:
    """(engine_url, engine_role) of every backend the proxy's relay page lists, in order."""
    try:
        families = list(text_string_to_metric_families(page))
    except ValueError as exc:
        raise RelayMismatch(f"{RELAY_PATH} is not Prometheus text ({exc})") from None
    found: list[tuple[str, str]] = []
    for family in families:
        if family.name == SCRAPE_OK:
            for sample in family.samples:
                url, role = sample.labels.get("engine_url"), sample.labels.get("engine_role")
                if url and role:
                    found.append((url.rstrip("/"), role))
    if not found:
        raise RelayMismatch(f"{RELAY_PATH} lists no backend ({SCRAPE_OK} is missing)")
    return found


def nodes_from_relay(layout: Layout, page: str, plan: Plan | None = None) -> tuple[str, ...]:
    """Each node's address, recovered by zipping the relay's backends with the Plan's.

    The Plan's side is its references (node and port of each backend, in the
    proxy's order); the relay's side is what the running proxy reports. Raises
    :class:`RelayMismatch` naming the first disagreement (counts per role, a
    port, a node seen at two addresses).
    """
    plan = plan or build_plan(layout)
    proxy = plan.process(plan.entry).proxy
    if proxy is None:
        raise RelayMismatch(f"{layout.name} has no proxy, so there is no relay to read")
    seen = relay_backends(page)
    hosts: dict[int, str] = {}
    roles = (("prefill", proxy.prefill), ("decode", proxy.decode), ("replica", proxy.replica))
    for role, planned in roles:
        given = [address for address, r in seen if r == role]
        if len(given) != len(planned):
            raise RelayMismatch(
                f"the proxy fronts {len(given)} {role} instance(s), {layout.name}'s Plan "
                f"has {len(planned)}"
            )
        for want, got in zip(planned, given, strict=True):
            _match(want, got, hosts)
    return tuple(hosts.get(i, UNKNOWN_HOST.format(i)) for i in range(layout.nodes))


def _match(want: Address, got: str, hosts: dict[int, str]) -> None:
    """The relay's URL ``got`` for the Plan's backend ``want``: its port, its node's host."""
    try:
        actual = urlsplit(check_url(got, "the relay's engine_url"))
    except UsageError as exc:
        raise RelayMismatch(str(exc)) from None
    if actual.port != want.port or not actual.hostname:
        raise RelayMismatch(f"the proxy's backend {got} is where the Plan has port {want.port}")
    known = hosts.setdefault(want.node, actual.hostname)
    if known != actual.hostname:
        raise RelayMismatch(
            f"node {want.node} appears at two addresses among the proxy's backends: "
            f"{known} and {actual.hostname}"
        )


def relay_deployment(
    layout: Layout,
    entry: str,
    fetch: Fetch,
    *,
    logs: Path | None = None,
    engine: ServedBy = "vllm",
    plan: Plan | None = None,
) -> Deployment:
    """The deployment behind a proxy at ``entry``, learnt from its ``/metrics/engines``."""
    url = entry.rstrip("/")
    try:
        page = fetch(f"{url}{RELAY_PATH}")
    except OSError as exc:
        raise RelayMismatch(f"cannot read {url}{RELAY_PATH}: {exc}") from None
    plan = plan or build_plan(layout)
    nodes = nodes_from_relay(layout, page, plan)
    return cluster_deployment(
        layout, nodes, entry=url, logs=logs, engine=engine, access="relay", plan=plan
    )


def single_entry_nodes(
    layout: Layout, entry: str, plan: Plan | None = None
) -> tuple[str, ...] | None:
    """Node addresses of a layout without a proxy whose only API node is the entry's."""
    plan = plan or build_plan(layout)
    api_nodes = {p.node for p in plan.api_processes()}
    host = urlsplit(entry).hostname
    if len(api_nodes) != 1 or host is None:
        return None
    (only,) = api_nodes
    return tuple(host if i == only else UNKNOWN_HOST.format(i) for i in range(layout.nodes))


def write_deployment(opts: DeploymentOptions) -> Deployment:
    """Build the deployment from the Plan and the addresses; write it atomically."""
    from servekit.catalog import load
    from servekit.vocabulary import atomic_write_text

    layout = load(opts.name, opts.catalog).layout
    plan = build_plan(layout)
    by = opts.attached_by()
    hosts = attached_hosts(by.attach, by.text, layout, plan) if by is not None else None
    dep = cluster_deployment(
        layout,
        parse_nodes(opts.nodes, layout) if opts.nodes is not None else (),
        process_hosts=hosts,
        entry=opts.entry,
        logs=opts.logs,
        engine=opts.engine,
        access="relay" if opts.through_proxy else "direct",
        plan=plan,
    )
    if opts.speed is not None:
        dep = Deployment.model_validate({**dep.model_dump(), "sim_speed": opts.speed})
    atomic_write_text(opts.out, dep.model_dump_json(indent=2) + "\n")
    return dep
