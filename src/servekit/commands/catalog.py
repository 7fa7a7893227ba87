"""``servekit layouts list|show|check`` and ``servekit defaults``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

CatalogOpt = Annotated[
    Path | None,
    typer.Option(
        "--catalog", help="catalog folder (default: SERVEKIT_CATALOG or the packaged catalog)"
    ),
]


def register(app: typer.Typer) -> None:
    layouts = typer.Typer(help="The catalog of layouts: list, show, check.", no_args_is_help=True)
    app.add_typer(layouts, name="layouts")

    @layouts.command("list")
    def list_(catalog: CatalogOpt = None) -> None:
        """Every layout with its topology and verification status."""
        from servekit.render import views

        views.print_list(catalog)

    @layouts.command("show")
    def show(name: str, catalog: CatalogOpt = None) -> None:
        """One layout: its fields, provenance and plan summary."""
        from servekit.render import views

        views.print_show(name, catalog)

    @layouts.command("check")
    def check(
        names: Annotated[
            list[str] | None, typer.Argument(help="layouts to check (default: all)")
        ] = None,
        strict: Annotated[bool, typer.Option("--strict", help="warnings fail too")] = False,
        catalog: CatalogOpt = None,
    ) -> None:
        """Validate layouts: errors exit 1; warnings exit 0 unless --strict."""
        from servekit.render import views

        raise typer.Exit(views.run_check(names or [], strict, catalog))

    @app.command("defaults")
    def defaults(
        role: Annotated[str | None, typer.Option("--role", help="mixed, prefill or decode")] = None,
        kind: Annotated[
            str | None, typer.Option("--kind", help="vllm-ascend, vllm or vllm-cpu")
        ] = None,
    ) -> None:
        """Print the one defaults table every rendered surface takes its values from."""
        from servekit.render import views

        views.print_defaults(role, kind)
