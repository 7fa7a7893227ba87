"""``nodes.elastic=on``: run instance ``g`` of a role group beyond the rendered ones.

A role group is a role's instances of one shape (the same grouping as a Kubernetes
LeaderWorkerSet, :func:`servekit.platforms.k8s.groups.engine_groups`). The rendered
instances keep their node folders; for every group the rendering adds
``scale/<group>/``, which an operator copies to one new machine per node of an
instance and starts with the instance index and the instance's node addresses.
Everything it runs is the group's first instance taken from the Plan, typed:

- its processes are instance 0's (:func:`scaled_process`): the same commands,
  ports, DP ranks and environment, every reference to one of the instance's own
  nodes moved to a node beyond the rendered ones (``NODE<N+j>_IP`` for the
  instance's ``j``-th node, ``N`` the rendered node count; ``run.sh`` sets them from
  its arguments), the engine id a variable (``SERVEKIT_ENGINE_ID``, as
  :func:`servekit.platforms.k8s.elastic.template_process` writes it);
- its engine id is ``base + (g - rendered) x groups + k`` (:class:`servekit.proxy.IdRule`,
  the Kubernetes rule): above every id the layout gives, so unique across any number
  of instances of every group;
- its join (``POST /admin/instances/add``: role, URLs, KV-event publishers and,
  in bootstrap mode, the engine id and bootstrap server) and its leave name the
  listeners the proxy's wiring names for instance 0, moved the same way.

The rendered instances of a group must be alike (:func:`check_alike`: the same
processes but for the engine id and their nodes' addresses), or an index beyond
them would not be one of them; what this does not handle is refused in one line
(:func:`refuse_unfit`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from servekit.errors import UsageError
from servekit.kvprotocol import kv_engine_id
from servekit.platforms.k8s.elastic import ENGINE_ID_VAR, id_rules, template_process
from servekit.platforms.k8s.groups import engine_groups
from servekit.platforms.nodes.settings import ADMIN_KEY_ENV, NodesSettings
from servekit.proxy import IdRule, join_flag, option_words
from servekit.render import (
    Address,
    AddressUrl,
    Arg,
    NodeRef,
    Part,
    Plan,
    ProcessPlan,
    ProxyWiring,
    Ref,
    Word,
    joined,
    kv_events_switch,
    process_needs,
    proxy_words,
    referenced_nodes,
    script_host,
    shell_words,
    url_word,
)
from servekit.vocabulary import ProxyPool

_PREFIX = "g"  # engine_groups names a group "<prefix>-<role>[k]"; the folder drops the prefix
JOIN_MODULE = "servekit.proxy.join"
LEAVE_MODULE = "servekit.proxy.prestop"


@dataclass(frozen=True)
class ScaleGroup:
    """One role group: its rendered instances' nodes and instance 0's processes per node."""

    name: str
    pool: ProxyPool
    rule: IdRule
    engines: tuple[str, ...]
    """The rendered instances' engines, instance 0's first."""
    instances: tuple[tuple[int, ...], ...]
    """Per rendered instance, the Plan nodes it spans in order (its node ranks)."""
    template: tuple[tuple[ProcessPlan, ...], ...]
    """Per node rank, instance 0's processes there as an instance beyond runs them."""
    first: int
    """The node number of rank 0 beyond the rendered ones (the rendered node count)."""

    @property
    def size(self) -> int:
        return len(self.template)

    @property
    def rendered(self) -> int:
        return len(self.instances)

    @property
    def has_engine_id(self) -> bool:
        return any(p.engine_id is not None for procs in self.template for p in procs)

    def node_var(self, rank: int) -> str:
        return f"NODE{self.first + rank}_IP"


def _instance_nodes(plan: Plan, engine: str) -> tuple[int, ...]:
    return tuple(dict.fromkeys(p.node for p in plan.processes if p.engine == engine))


def _moved_part(part: Part, nodes: dict[int, int]) -> Part:
    if isinstance(part, NodeRef) and part.node in nodes:
        moved = nodes[part.node]
        return NodeRef.of(moved, "${NODE" + str(moved) + "_IP}")
    return part


def _moved_command(command: tuple[Arg, ...], nodes: dict[int, int]) -> tuple[Arg, ...]:
    out: list[Arg] = []
    for arg in command:
        if isinstance(arg, str):
            out.append(arg)
        else:
            parts = tuple(_moved_part(p, nodes) for p in arg.parts)
            out.append(Word(parts=parts, when=arg.when))
    return tuple(out)


def _moved_address(address: Address, nodes: dict[int, int]) -> Address:
    if address.node not in nodes:
        return address
    return address.model_copy(update={"node": nodes[address.node]})


def scaled_process(p: ProcessPlan, nodes: dict[int, int]) -> ProcessPlan:
    """``p`` as an instance beyond the rendered ones runs it: its engine id a variable, and
    every node of its instance (``nodes``: Plan node -> node beyond) moved."""
    try:
        t = template_process(p)
    except UsageError:
        raise UsageError(
            f"nodes.elastic=on: {p.name} names engine_id {p.engine_id} outside its KV-transfer "
            "config; render without nodes.elastic"
        ) from None
    env = {
        k: AddressUrl(address=_moved_address(v.address, nodes), path=v.path)
        if isinstance(v, AddressUrl) else v
        for k, v in t.env.items()
    }  # fmt: skip
    node = nodes[p.node]
    return t.model_copy(
        update={
            "node": node,
            "host": "${NODE" + str(node) + "_IP}",
            "command": _moved_command(t.command, nodes),
            "env": env,
        }
    )


def _signature(p: ProcessPlan) -> tuple[object, ...]:
    """What two instances' processes share when one is the other's shape: the command
    with every reference unexpanded (the engine id a variable, the nodes moved alike),
    the environment, the tunables and the listeners."""
    return (p.kind, p.role, p.headless, tuple(shell_words(p.command)), p.env, p.settings,
            p.bind_host, p.cwd, p.api_port, p.kv_port, p.rpc_port, p.kv_events_port)  # fmt: skip


def _by_rank(plan: Plan, engine: str, nodes: tuple[int, ...]) -> list[list[ProcessPlan]]:
    procs = [p for p in plan.processes if p.engine == engine]
    return [[p for p in procs if p.node == n] for n in nodes]


def _moves(nodes: tuple[int, ...], first: int) -> dict[int, int]:
    return {n: first + rank for rank, n in enumerate(nodes)}


def check_alike(plan: Plan, group: ScaleGroup) -> None:
    """Every rendered instance runs instance 0's processes but for the engine id and its
    nodes' addresses, so an index beyond them runs instance 0's."""
    engines = group.engines
    for engine, nodes in zip(engines[1:], group.instances[1:], strict=True):
        mine = _by_rank(plan, engine, nodes)
        if len(nodes) != group.size or [len(x) for x in mine] != [len(x) for x in group.template]:
            raise UsageError(
                f"nodes.elastic=on: {engine} runs other processes than {engines[0]}; "
                "render without nodes.elastic"
            )
        moved = _moves(nodes, group.first)
        for procs, template in zip(mine, group.template, strict=True):
            for p, t in zip(procs, template, strict=True):
                if _signature(scaled_process(p, moved)) != _signature(t):
                    raise UsageError(
                        f"nodes.elastic=on: {p.name} differs from {t.name.removeprefix('scaled.')}"
                        " in more than its engine id and nodes; render without nodes.elastic"
                    )


def _proxy(plan: Plan) -> ProcessPlan:
    proxy = next((p for p in plan.processes if p.kind == "proxy"), None)
    if proxy is None or proxy.proxy is None:
        raise UsageError(
            "nodes.elastic=on: this layout has no proxy for new instances to join; "
            "render without nodes.elastic"
        )
    return proxy


def _loopback(listen: Arg) -> bool:
    if not isinstance(listen, str):
        return False
    try:
        return listen == "localhost" or ipaddress.ip_address(listen).is_loopback
    except ValueError:
        return False


def refuse_unfit(plan: Plan) -> ProcessPlan:
    """The proxy new instances join; what elastic rendering does not handle, refused in
    one line before anything is written."""
    proxy = _proxy(plan)
    wiring = proxy.proxy
    assert wiring is not None
    if _loopback(wiring.listen):
        raise UsageError(
            f"nodes.elastic=on: the proxy listens on {wiring.listen} only, which a new machine "
            "cannot reach; --set proxy.host=0.0.0.0 (or the proxy node's address) or render "
            "without nodes.elastic"
        )
    return proxy


def _pool(wiring: ProxyWiring, p: ProcessPlan) -> ProxyPool | None:
    """The pool the proxy routes ``p`` in (the wiring's list that names it)."""
    pools: tuple[tuple[ProxyPool, tuple[Address, ...]], ...] = (
        ("prefill", wiring.prefill), ("decode", wiring.decode), ("replica", wiring.replica),
    )  # fmt: skip
    return next((pool for pool, listed in pools if any(a.process == p.name for a in listed)), None)


def scale_groups(plan: Plan) -> list[ScaleGroup]:
    """Every role group whose instance 0 the proxy routes to, checked alike."""
    wiring = refuse_unfit(plan).proxy
    assert wiring is not None
    groups = engine_groups(plan, _PREFIX)
    rules = id_rules(plan, groups)
    first = len(plan.nodes)
    out = []
    for g in groups:
        instances = tuple(_instance_nodes(plan, e) for e in g.engines)
        moved = _moves(instances[0], first)
        template = tuple(
            tuple(scaled_process(p, moved) for p in procs)
            for procs in _by_rank(plan, g.engines[0], instances[0])
        )
        pools = {_pool(wiring, p) for procs in _by_rank(plan, g.engines[0], instances[0])
                 for p in procs if p.api_port is not None}  # fmt: skip
        pool = pools.pop() if len(pools) == 1 else None
        if pool is None:
            raise UsageError(
                f"nodes.elastic=on: the proxy does not route to every API of {g.engines[0]} in "
                "one pool; render without nodes.elastic"
            )
        name = g.name.removeprefix(_PREFIX + "-")
        group = ScaleGroup(name, pool, rules[g.name], g.engines, instances, template, first)
        check_alike(plan, group)
        out.append(group)
    return out


def _engine_listeners(
    plan: Plan, group: ScaleGroup, rank: int
) -> list[tuple[ProcessPlan, ProcessPlan]]:
    """(instance 0's process, its scaled form) of every API process on node ``rank``."""
    nodes = group.instances[0]
    originals = [p for p in plan.processes if p.node == nodes[rank] and p.api_port is not None]
    scaled = {t.name: t for t in group.template[rank]}
    return [(p, scaled["scaled." + p.name]) for p in originals if "scaled." + p.name in scaled]


@dataclass(frozen=True)
class Membership:
    """The words of one node's join and of the instance's leave, for its ``run.sh``."""

    join: tuple[str, ...] | None
    """Shell words after ``python3 -m servekit.proxy.join`` (None: no API on this node)."""
    leave: tuple[str, ...]
    """Shell words after ``python3 -m servekit.proxy.prestop``: every API of the instance."""


def _key_words(wiring: ProxyWiring) -> list[Arg]:
    if wiring.admin_key_file:
        return ["--key-file", wiring.admin_key_file]
    return ["--key-env", wiring.admin_key_env or ADMIN_KEY_ENV]


def _proxy_words(plan: Plan, proxy: ProcessPlan) -> list[Arg]:
    """Where the proxy is reached: its node's address and its port (the Plan's wiring)."""
    address = proxy.address("api")
    return ["--proxies", joined(script_host(address)), "--port", str(address.port)]


def membership(plan: Plan, proxy: ProcessPlan, group: ScaleGroup, rank: int) -> Membership:
    """Node ``rank``'s join (its own APIs, with their publishers and bootstrap servers) and
    the instance's leave (every API it serves), from the proxy's wiring of instance 0."""
    wiring = proxy.proxy
    assert wiring is not None
    moved = _moves(group.instances[0], group.first)
    publishers = {pub.engine.process: pub.events for pub in wiring.kv_events}
    bootstraps = dict(zip((a.process for a in wiring.prefill), wiring.bootstrap, strict=False))
    key = _key_words(wiring)
    where = _proxy_words(plan, proxy)
    join: list[Arg] = [*where, join_flag("role"), group.pool]
    urls: list[Arg] = []
    events: list[Arg] = []
    boots: list[Arg] = []
    for original, scaled in _engine_listeners(plan, group, rank):
        url = url_word(scaled.address("api"), script_host)
        urls.append(url)
        events_at = publishers.get(original.name)
        if events_at is not None:
            events.append(joined(url, "=", url_word(_moved_address(events_at, moved),
                                                    script_host)))  # fmt: skip
        boot = bootstraps.get(original.name)
        if boot is not None:
            # under DP vLLM names each rank's KV engine <engine_id>_dp<rank> (the Plan's too)
            own = kv_engine_id(str(original.engine_id), original.dp_rank, original.dp_size)
            if boot.engine_id != own:
                raise UsageError(
                    f"nodes.elastic=on: the proxy names {original.name}'s bootstrap engine "
                    f"{boot.engine_id}, not its engine id {own}; render without nodes.elastic"
                )
            server = url_word(_moved_address(boot.server, moved), script_host)
            engine_id = Ref(var=ENGINE_ID_VAR, value=str(original.engine_id))
            suffix = own.removeprefix(str(original.engine_id))
            boots.append(joined(url, "=", engine_id, suffix, "=", server))
    join += [join_flag("urls"), *urls]
    if events:
        switch = kv_events_switch()
        join += [joined(w, when=switch) for w in (join_flag("kv_events"), *events)]
    if boots:
        join += [join_flag("bootstrap"), *boots]
    join += key
    every = [
        url_word(t.address("api"), script_host)
        for procs in group.template
        for t in procs
        if t.api_port is not None
    ]
    leave: list[Arg] = [*where, "--urls", *every, *key]
    return Membership(tuple(shell_words(join)) if urls else None, tuple(shell_words(leave)))


def cluster_nodes(plan: Plan, proxy: ProcessPlan, group: ScaleGroup) -> list[int]:
    """The rendered nodes a new machine of the group talks to (their ``NODE<k>_IP``): the
    proxy's, and any its processes name outside their own instance."""
    found = {proxy.node}
    for procs in group.template:
        for p in procs:
            found |= {k for k in referenced_nodes(p.command) if k < group.first}
            found |= {v.address.node for v in p.env.values()
                      if isinstance(v, AddressUrl) and v.address.node < group.first}  # fmt: skip
    return sorted(found)


def needs_nic(procs: tuple[ProcessPlan, ...]) -> bool:
    return any("NODE_NIC" in process_needs(p) for p in procs)


def admin_wiring(wiring: ProxyWiring, settings: NodesSettings) -> ProxyWiring:
    """The proxy's wiring with its admin API on and keyed: the layout's own key if it names
    one, else ``nodes.admin_key_file``, else the variable ``SERVEKIT_ADMIN_KEY``."""
    keyed = wiring.admin_key_env or wiring.admin_key_file
    update: dict[str, object] = {"admin": True}
    if not keyed:
        if settings.admin_key_file:
            update["admin_key_file"] = settings.admin_key_file
        else:
            update["admin_key_env"] = ADMIN_KEY_ENV
    return wiring.model_copy(update=update)


def elastic_proxy(plan: Plan, proxy: ProcessPlan, settings: NodesSettings) -> ProcessPlan:
    """The proxy process of an elastic rendering: its command emitted again from the Plan's
    wiring (the same address map), with the admin API keyed, ``--drain-grace`` and
    ``--pool-wait`` added."""
    wiring = proxy.proxy
    assert wiring is not None
    keyed = admin_wiring(wiring, settings)

    def host_of(address: Address) -> NodeRef:
        return NodeRef.of(address.node, plan.process(address.process).host)

    words = [w for _, w in proxy_words(keyed, host_of)]
    for name, value in (("drain_grace_s", float(settings.drain_grace)),
                        ("pool_wait_s", float(settings.pool_wait))):  # fmt: skip
        for word in option_words(name, value):
            assert isinstance(word, str)
            words.append(word)
    return proxy.model_copy(update={"proxy": keyed, "command": tuple(words)})
