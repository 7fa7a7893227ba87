"""``servekit render NAME --out DIR [--target modelarts|nodes] [--set KEY=VALUE ...]``."""

from __future__ import annotations

import typer

from servekit.cliopts import command_from_model
from servekit.render import RenderOptions


def _run(opts: RenderOptions) -> int:
    from servekit.render import render_layout

    render_layout(
        opts.name, opts.out, list(opts.set), opts.catalog, target=opts.target, force=opts.force
    )
    return 0


def register(app: typer.Typer) -> None:
    app.command("render")(
        command_from_model(
            RenderOptions,
            _run,
            doc="Render a layout into launch scripts (ModelArts entry or per-node folders).",
            arguments=("name",),
        )
    )
