"""``servekit render NAME --out DIR [--set KEY=VALUE ...]``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from servekit.commands.catalog import CatalogOpt


def register(app: typer.Typer) -> None:
    @app.command("render")
    def render(
        name: str,
        out: Annotated[Path, typer.Option("--out", help="folder to write (replaced whole)")],
        set_: Annotated[
            list[str] | None,
            typer.Option(
                "--set", help="override a field, e.g. engines.decode0.settings.max_num_seqs=64"
            ),
        ] = None,
        catalog: CatalogOpt = None,
    ) -> None:
        """Render a layout into per-node launch scripts, env files and a plan summary."""
        from servekit.render.api import render_layout

        render_layout(name, out, set_ or [], catalog)
