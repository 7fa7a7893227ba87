"""ModelArts: one flat folder every node runs (``run.sh`` reads the platform's rank table)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servekit.platforms.table import Files, RenderRequest


def render(req: RenderRequest) -> Files:
    from servekit.render import render_files

    return render_files(req.plan, "modelarts")
