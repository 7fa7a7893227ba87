"""The ModelArts rendering: one flat folder the platform copies to every node.

``run.sh`` (POSIX sh) waits for the platform's rank table, finds its node, checks
the node count and group 0, resolves the node's address and NIC, runs the
preflight (:mod:`servekit.preflight`: this node checked, the nodes compared
over the rank table's addresses; ``PREFLIGHT=0`` skips it), then starts and
supervises the node's processes (the per-process scripts every target shares,
:func:`servekit.render.process_script`). The rank table is read by
:mod:`.ranktable`, shipped beside it as ``servekit_rank_table.py``.
"""

from __future__ import annotations

from servekit import __version__
from servekit.errors import UsageError
from servekit.preflight import ENTRY_FILE, SPEC_FILE, preflight_files
from servekit.render import Plan, bundle_files, process_script, script_environment, uses_nic

RANK_TABLE_FILE = "servekit_rank_table.py"


def entry_files() -> dict[str, bytes]:
    """What the entry itself runs: the rank-table reader (:mod:`.ranktable`)."""
    from servekit.platforms.modelarts import ranktable

    return {RANK_TABLE_FILE: ranktable.source_bytes()}


def _group0_rule(plan: Plan) -> tuple[bool, str]:
    """Whether group 0 must be one node, and why (for the entry's message)."""
    if any(p.kind == "proxy" for p in plan.processes):
        return (
            True,
            "a second group-0 node would run a second proxy that cannot see the first's load",
        )
    if any(p.headless for p in plan.processes):
        return True, "the other nodes run headless ranks that serve no API"
    return False, ""


def modelarts_files(plan: Plan, *, preflight: bool = True) -> dict[str, str | bytes]:
    """``run.sh``, every process script, the bundled files, the rank-table reader and
    (unless ``preflight`` is False) the preflight's spec and program."""
    env = script_environment("servekit.platforms.modelarts")
    proxy = next((p for p in plan.processes if p.kind == "proxy"), None)
    if proxy is not None and proxy.node != 0:
        raise UsageError(
            f"{plan.layout}: the platform routes traffic to group 0 (node 0), but the proxy is on "
            f"node {proxy.node}; set proxy.node: 0 or render --target nodes"
        )
    single, why = _group0_rule(plan)
    files: dict[str, str | bytes] = {
        "run.sh": env.get_template("modelarts_run.sh.j2").render(
            layout=plan.layout,
            version=__version__,
            node_count=len(plan.nodes),
            nodes=plan.nodes,
            nic_nodes=[n.index for n in plan.nodes if uses_nic(n)],
            proxy_node=None if proxy is None else proxy.node,
            group0_single=single and len(plan.nodes) > 1,
            group0_why=why,
            preflight=preflight,
            preflight_entry=ENTRY_FILE,
            preflight_spec=SPEC_FILE,
        )
    }
    for p in plan.processes:
        files[f"{p.name}.sh"] = process_script(plan, p)
    files.update(bundle_files())
    files.update(entry_files())
    if preflight:
        files.update(preflight_files(plan))
    return files
