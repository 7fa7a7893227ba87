"""How a plain-nodes rendering is started: every node's address exported, each node its folder."""

from __future__ import annotations

from servekit.platforms.platform import Start
from servekit.render import Plan

NOTE = (
    "A node needs every `NODE<i>_IP` its scripts reference (its `env.sh` says which); "
    "`DRY_RUN=1` prints the commands."
)


def start(plan: Plan, out: str) -> Start:
    addresses = " ".join(f"NODE{n.index}_IP=..." for n in plan.nodes)
    lines = [f"export {addresses}   # every node's address, on every node"]
    lines += [f"bash {out}/node{n.index}/run.sh   # on node {n.index}" for n in plan.nodes]
    files = tuple(f"node{n.index}/run.sh" for n in plan.nodes)
    return Start(f"Plain nodes: {out}/node<i>/ on node i", tuple(lines), files, NOTE)
