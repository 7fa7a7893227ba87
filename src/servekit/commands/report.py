"""``servekit verify`` and ``servekit catalog site``: parsing only.

``verify``'s options are one model, :class:`servekit.verify.options.VerifyOptions`
(the typer command is generated from it); the flow lives in
:mod:`servekit.verify.run`, the site in :mod:`servekit.report.site`; both are
imported inside the command bodies so ``servekit --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from servekit.cliopts import command_from_model
from servekit.verify.options import VerifyOptions

CatalogOpt = Annotated[
    Path | None,
    typer.Option(
        "--catalog", help="catalog folder (default: SERVEKIT_CATALOG or the packaged catalog)"
    ),
]


def run_verify(opts: VerifyOptions) -> int:
    """Run the flow and print the report's first lines, the ledger line and the paths."""
    from servekit.verify.adapters import real_components
    from servekit.verify.run import verify

    outcome = verify(opts, real_components(opts.catalog))
    for line in outcome.run_dir.joinpath("report.md").read_text().splitlines()[:3]:
        if line.strip():
            typer.echo(line)
    if outcome.ledger is not None:
        typer.echo(f"ledger: {outcome.ledger} (+1 {outcome.run.engine} record)")
    else:
        typer.echo("ledger: unchanged (only a passing run is recorded)")
    typer.echo(f"report: {outcome.report_md}")
    typer.echo(f"html:   {outcome.report_html}")
    return outcome.exit_code


def site_command(
    out: Annotated[Path, typer.Option("--out", help="folder to write (replaced whole)")],
    catalog: CatalogOpt = None,
) -> None:
    """Write the static HTML catalog: an index with filters and a page per layout."""
    from servekit.report.site import build_site

    index = build_site(out, str(catalog) if catalog else None)
    typer.echo(str(index))


def register(app: typer.Typer) -> None:
    """Attach ``verify`` and the ``catalog`` group (``catalog site``)."""
    app.command("verify")(
        command_from_model(
            VerifyOptions,
            run_verify,
            doc="Bring a layout up (or attach to a cluster), run acceptance and benchmarks, "
            "write the report, tear down.",
            arguments=("name",),
        )
    )
    catalog_app = typer.Typer(help="The catalog as a static site.", no_args_is_help=True)
    catalog_app.command("site")(site_command)
    app.add_typer(catalog_app, name="catalog")
