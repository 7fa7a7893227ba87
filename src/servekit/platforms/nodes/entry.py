"""The plain-nodes renderer: the node folders, the scale folders when elastic, plan.md."""

from __future__ import annotations

from servekit.platforms.request import Files, RenderRequest


def render(req: RenderRequest) -> Files:
    from servekit.platforms.nodes.scripts import nodes_files
    from servekit.platforms.nodes.settings import parse_settings
    from servekit.platforms.nodes.start import scale_lines, start
    from servekit.render import plan_page

    settings = parse_settings(req.settings)
    files = nodes_files(req.plan, preflight=req.preflight, settings=settings)
    how = start(req.plan, ".")
    lines = how.lines + scale_lines(files, ".")
    files["plan.md"] = plan_page(req.plan, how.title, lines, how.note)
    files["plan.json"] = req.plan.model_dump_json(indent=2) + "\n"
    return files
