"""``servekit layouts list|show|check``, ``servekit defaults`` and ``servekit catalog site``.

Each command is generated from its options model (:mod:`servekit.catalog.options`);
the work lives in :mod:`servekit.render.views` and :mod:`servekit.report.site`,
imported inside the run functions so ``servekit --help`` stays fast.
"""

from __future__ import annotations

import typer

from servekit.catalog import (
    CatalogSiteOptions,
    DefaultsOptions,
    LayoutsCheckOptions,
    LayoutsImportOptions,
    LayoutsListOptions,
    LayoutsShowOptions,
)
from servekit.cliopts import add_command


def _list(opts: LayoutsListOptions) -> int:
    from servekit.render import list_json, print_list

    if opts.as_json:
        typer.echo(list_json(opts.catalog))
    else:
        print_list(opts.catalog)
    return 0


def _show(opts: LayoutsShowOptions) -> int:
    from rich.console import Console

    from servekit.platforms import PLATFORMS
    from servekit.render import print_show

    console = Console()
    print_show(opts.name, opts.catalog, console)
    for platform in PLATFORMS.values():
        for line in platform.requirements(opts.name, opts.catalog) if platform.requirements else []:
            console.print(line, markup=False, highlight=False)
    return 0


def _check(opts: LayoutsCheckOptions) -> int:
    from servekit.render import run_check

    return run_check(list(opts.names), opts.strict, opts.catalog)


def _import(opts: LayoutsImportOptions) -> int:
    from servekit.importer import import_layout
    from servekit.kit import terminate_cleanly

    with terminate_cleanly():  # SIGTERM removes the import's scratch folder, as Ctrl-C does
        name, changed, unexpressed = import_layout(opts)
    for line in unexpressed:
        typer.echo(f"not expressed: {line}")
    for path in changed:
        typer.echo(f"wrote {path}")
    typer.echo(f"{name}: {len(changed)} file(s) changed, {len(unexpressed)} not expressed")
    return 0


def _defaults(opts: DefaultsOptions) -> int:
    from servekit.render import print_defaults

    print_defaults(opts.role, opts.kind, family=opts.family, catalog=opts.catalog)
    return 0


def _site(opts: CatalogSiteOptions) -> int:
    from servekit.report import build_site

    typer.echo(str(build_site(opts.out, str(opts.catalog) if opts.catalog else None)))
    return 0


def register(app: typer.Typer) -> None:
    """Attach the ``layouts`` and ``catalog`` groups and ``defaults`` to the root app."""
    layouts = typer.Typer(help="The catalog of layouts: list, show, check.", no_args_is_help=True)
    add_command(
        layouts,
        "list",
        LayoutsListOptions,
        _list,
        doc="Every layout with its topology and verification status.",
    )
    add_command(
        layouts,
        "show",
        LayoutsShowOptions,
        _show,
        doc="One layout: its fields, provenance, deviations and plan.",
        arguments=("name",),
    )
    add_command(
        layouts,
        "check",
        LayoutsCheckOptions,
        _check,
        doc="Validate layouts: errors exit 1; warnings exit 0 unless --strict.",
        arguments=("names",),
    )
    add_command(
        layouts,
        "import",
        LayoutsImportOptions,
        _import,
        doc="Import a folder in the source's convention: its layout, family profile and facts.",
        arguments=("folder",),
    )
    from servekit.commands.derive import register_layouts

    register_layouts(layouts)
    app.add_typer(layouts, name="layouts")
    add_command(
        app,
        "defaults",
        DefaultsOptions,
        _defaults,
        doc="The defaults table: generic rows per engine kind and role, and each layout "
        "family's rows (its profile), in one place.",
    )
    site = typer.Typer(help="The catalog as a static site.", no_args_is_help=True)
    add_command(
        site,
        "site",
        CatalogSiteOptions,
        _site,
        doc="Write the static HTML catalog: an index with filters and a page per layout.",
    )
    app.add_typer(site, name="catalog")
