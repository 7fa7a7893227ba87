"""How a plain-nodes rendering is started: every node's address exported, each node its folder."""

from __future__ import annotations

from collections.abc import Mapping

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


def scale_lines(files: Mapping[str, object], out: str) -> tuple[str, ...]:
    """With ``nodes.elastic=on``: how one more instance of each group starts on new machines."""
    groups = sorted(
        path.split("/")[1]
        for path in files
        if path.startswith("scale/") and path.endswith("/run.sh")
    )
    return tuple(
        f"bash {out}/scale/{g}/run.sh INDEX ADDRESS...   # one more {g} instance, on new machines "
        "(its header says how; SIGTERM or `run.sh stop INDEX`: it leaves drained)"
        for g in groups
    )
