"""The ModelArts renderer: the platform table's entry (the row in ``__init__.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servekit.platforms.modelarts.start import start

if TYPE_CHECKING:
    from servekit.platforms.request import Files, RenderRequest


def render(req: RenderRequest) -> Files:
    from servekit.platforms.modelarts.scripts import modelarts_files
    from servekit.render import plan_page

    files = modelarts_files(req.plan, preflight=req.preflight)
    how = start(req.plan, ".")
    files["plan.md"] = plan_page(req.plan, how.title, how.lines, how.note)
    files["plan.json"] = req.plan.model_dump_json(indent=2) + "\n"
    return files
