"""ModelArts: one flat folder every node runs (``run.sh`` reads the platform's rank table)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servekit.platforms.request import Files, RenderRequest


def render(req: RenderRequest) -> Files:
    from servekit.platforms.modelarts.scripts import modelarts_files
    from servekit.render import plan_page

    files = modelarts_files(req.plan, preflight=req.preflight)
    files["plan.md"] = plan_page(req.plan, "modelarts")
    files["plan.json"] = req.plan.model_dump_json(indent=2) + "\n"
    return files
