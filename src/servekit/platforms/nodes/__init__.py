"""Plain nodes: a bash folder per node, started once ``NODE<i>_IP`` are exported."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servekit.platforms.table import Files, RenderRequest


def render(req: RenderRequest) -> Files:
    from servekit.render import render_files

    return render_files(req.plan, "nodes")
