"""``servekit render NAME --out DIR [--target PLATFORM] [--set KEY=VALUE ...]``."""

from __future__ import annotations

import typer

from servekit.cliopts import command_from_model
from servekit.platforms import RenderOptions


def _run(opts: RenderOptions) -> int:
    from servekit.platforms import render_layout

    render_layout(
        opts.name,
        opts.out,
        list(opts.set),
        opts.catalog,
        target=opts.target,
        force=opts.force,
        flags=opts.platform_flags(),
        preflight=opts.preflight,
    )
    return 0


def register(app: typer.Typer) -> None:
    app.command("render")(
        command_from_model(
            RenderOptions,
            _run,
            doc="Render a layout into launch scripts or manifests (ModelArts entry, "
            "per-node folders, Kubernetes).",
            arguments=("name",),
        )
    )
