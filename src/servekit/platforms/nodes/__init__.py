"""Plain nodes: a bash folder per node, started once ``NODE<i>_IP`` are exported."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servekit.platforms.request import Files, RenderRequest


def render(req: RenderRequest) -> Files:
    from servekit.platforms.nodes.scripts import nodes_files
    from servekit.render import plan_page

    files = nodes_files(req.plan, preflight=req.preflight)
    files["plan.md"] = plan_page(req.plan, "nodes")
    files["plan.json"] = req.plan.model_dump_json(indent=2) + "\n"
    return files
