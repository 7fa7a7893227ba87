"""The per-node rendering: a bash folder per node, for clusters without a rank table.

``node<i>/run.sh`` starts the node's processes (the per-process scripts every
target shares) once ``NODE<i>_IP`` are exported; ``env.sh`` checks them.
``node<i>/preflight.sh``, run on every node at once before ``run.sh``, checks
the node and compares it with the others (:mod:`servekit.preflight`).
"""

from __future__ import annotations

from servekit import __version__
from servekit.preflight import ENTRY_FILE, SPEC_FILE, preflight_files
from servekit.render import (
    NodePlan,
    Plan,
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


def nodes_files(plan: Plan, *, preflight: bool = True) -> dict[str, str | bytes]:
    """``node<i>/{env.sh,run.sh}``, each node's process scripts and the bundled files, and
    (unless ``preflight`` is False) ``node<i>/preflight.sh`` with the preflight's files."""
    env = script_environment("servekit.platforms.nodes")
    files: dict[str, str | bytes] = {}
    common = {"layout": plan.layout, "version": __version__}
    bundled: dict[str, str | bytes] = {**bundle_files()}
    if preflight:
        bundled.update(preflight_files(plan))
    for node in plan.nodes:
        base = f"node{node.index}"
        files[f"{base}/env.sh"] = env.get_template("nodes_env.sh.j2").render(
            node=node, referenced_nodes=_referenced_nodes(node), needs_nic=uses_nic(node), **common
        )
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
        for p in node.processes:
            files[f"{base}/{p.name}.sh"] = process_script(plan, p)
        files.update({f"{base}/{name}": text for name, text in bundled.items()})
    return files
