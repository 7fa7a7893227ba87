"""The per-node rendering: a bash folder per node, for clusters without a rank table.

``node<i>/run.sh`` starts the node's processes (the per-process scripts every
target shares) once ``NODE<i>_IP`` are exported; ``env.sh`` checks them.
``node<i>/preflight.sh``, run on every node at once before ``run.sh``, checks
the node and compares it with the others (:mod:`servekit.preflight`). With
``nodes.elastic=on`` the proxy serves its admin API and every role group gets
``scale/<group>/`` (:mod:`.scale`): an instance beyond the rendered ones on new
machines, which joins the proxy and leaves it drained.
"""

from __future__ import annotations

from servekit import __version__
from servekit.platforms.k8s.elastic import ENGINE_ID_VAR, PROXY_ZIPAPP
from servekit.platforms.nodes.scale import (
    JOIN_MODULE,
    LEAVE_MODULE,
    ScaleGroup,
    cluster_nodes,
    elastic_proxy,
    membership,
    needs_nic,
    scale_groups,
)
from servekit.platforms.nodes.settings import ADMIN_KEY_ENV, NodesSettings
from servekit.preflight import ENTRY_FILE, SPEC_FILE, preflight_files
from servekit.render import (
    NodePlan,
    Plan,
    ProcessPlan,
    bundle_files,
    process_script,
    referenced_nodes,
    script_environment,
    uses_nic,
)


def _referenced_nodes(node: NodePlan) -> list[int]:
    found = {node.index}
    for p in node.processes:
        found |= referenced_nodes(p.command)
    return sorted(found)


def _admin_key_env(p: ProcessPlan) -> str | None:
    """The variable the proxy reads its admin key from, when its node must provide it."""
    wiring = p.proxy
    return wiring.admin_key_env if wiring is not None and wiring.admin else None


def nodes_files(
    plan: Plan, *, preflight: bool = True, settings: NodesSettings | None = None
) -> dict[str, str | bytes]:
    """``node<i>/{env.sh,run.sh}``, each node's process scripts and the bundled files,
    (unless ``preflight`` is False) ``node<i>/preflight.sh`` with the preflight's files,
    and with ``nodes.elastic=on`` the ``scale/<group>/`` folders."""
    settings = settings or NodesSettings()
    env = script_environment("servekit.platforms.nodes")
    files: dict[str, str | bytes] = {}
    common = {"layout": plan.layout, "version": __version__}
    bundled: dict[str, str | bytes] = {**bundle_files()}
    processes = {p.name: p for p in plan.processes}
    groups: list[ScaleGroup] = []
    if settings.elastic:
        groups = scale_groups(plan)
        proxy = next(p for p in plan.processes if p.kind == "proxy")
        processes[proxy.name] = elastic_proxy(plan, proxy, settings)
    if preflight:
        bundled.update(preflight_files(plan))
    for node in plan.nodes:
        base = f"node{node.index}"
        procs = [processes[p.name] for p in node.processes]
        keys = sorted({k for k in map(_admin_key_env, procs) if k}) if settings.elastic else []
        files[f"{base}/env.sh"] = env.get_template("nodes_env.sh.j2").render(
            node=node, referenced_nodes=_referenced_nodes(node), needs_nic=uses_nic(node),
            admin_keys=keys, **common,
        )  # fmt: skip
        files[f"{base}/run.sh"] = env.get_template("nodes_run.sh.j2").render(
            node=node, node_count=len(plan.nodes), **common
        )
        if preflight:
            files[f"{base}/preflight.sh"] = env.get_template("nodes_preflight.sh.j2").render(
                node=node,
                node_count=len(plan.nodes),
                preflight_entry=ENTRY_FILE,
                preflight_spec=SPEC_FILE,
                **common,
            )
        for p in procs:
            files[f"{base}/{p.name}.sh"] = process_script(plan, p)
        files.update({f"{base}/{name}": text for name, text in bundled.items()})
    for group in groups:
        files.update(scale_files(plan, processes, group, settings))
    return files


def _id_rule(group: ScaleGroup) -> dict[str, object] | None:
    """What ``run.sh`` derives the engine id from (None: the group's engines have none)."""
    if not group.has_engine_id:
        return None
    rule = group.rule
    return {"var": ENGINE_ID_VAR, "base": rule.base, "step": rule.step, "offset": rule.offset}


def scale_files(
    plan: Plan, processes: dict[str, ProcessPlan], group: ScaleGroup, settings: NodesSettings
) -> dict[str, str | bytes]:
    """``scale/<group>/``: ``run.sh``, instance 0's processes as an instance beyond runs
    them, and the bundled files (the proxy's zipapp carries the join and the leave)."""
    proxy = next(p for p in processes.values() if p.kind == "proxy")
    wiring = proxy.proxy
    assert wiring is not None
    base = f"scale/{group.name}"
    joins = [membership(plan, proxy, group, rank).join or () for rank in range(group.size)]
    ranks = [
        {"rank": rank, "procs": [p.name for p in procs], "nic": needs_nic(procs), "join": join}
        for rank, (procs, join) in enumerate(zip(group.template, joins, strict=True))
    ]
    leave = membership(plan, proxy, group, 0).leave
    files: dict[str, str | bytes] = {
        f"{base}/run.sh": script_environment("servekit.platforms.nodes")
        .get_template("nodes_scale.sh.j2")
        .render(
            layout=plan.layout,
            version=__version__,
            group=group.name,
            pool=group.pool,
            size=group.size,
            rendered=group.rendered,
            first=group.first,
            ranks=ranks,
            any_nic=any(r["nic"] for r in ranks),
            cluster_nodes=cluster_nodes(plan, proxy, group),
            proxy_node=proxy.node,
            key_env=wiring.admin_key_env or ADMIN_KEY_ENV,
            key_file=wiring.admin_key_file,
            id=_id_rule(group),
            kv_switch=any("KV_EVENTS_ON" in w for join in joins for w in join),
            leave=leave,
            leave_wait=settings.leave_wait,
            zipapp=PROXY_ZIPAPP,
            join_module=JOIN_MODULE,
            leave_module=LEAVE_MODULE,
        )
    }
    for procs in group.template:
        for p in procs:
            files[f"{base}/{p.name}.sh"] = process_script(plan, p)
    files.update({f"{base}/{name}": data for name, data in bundle_files().items()})
    return files
