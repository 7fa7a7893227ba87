"""Plain nodes: a bash folder per node, started once ``NODE<i>_IP`` are exported.

:data:`PLATFORM` is this folder's row of the platform table. Plain nodes are
attached to by the Plan's node order (``--nodes``); their dry run is the
ModelArts fake's (the same per-process scripts on loopback nodes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servekit.platforms.nodes.start import start
from servekit.platforms.platform import Platform

if TYPE_CHECKING:
    from servekit.platforms.request import Files, RenderRequest


def render(req: RenderRequest) -> Files:
    from servekit.platforms.nodes.scripts import nodes_files
    from servekit.render import plan_page

    files = nodes_files(req.plan, preflight=req.preflight)
    how = start(req.plan, ".")
    files["plan.md"] = plan_page(req.plan, how.title, how.lines, how.note)
    files["plan.json"] = req.plan.model_dump_json(indent=2) + "\n"
    return files


PLATFORM = Platform(
    name="nodes",
    describe="a bash folder per node (export NODE<i>_IP)",
    where="plain nodes",
    render=render,
    start=start,
)
