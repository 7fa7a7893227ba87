"""``servekit verify``: parsing only.

``verify``'s options are one model, :class:`servekit.verify.options.VerifyOptions`
(the typer command is generated from it); the flow lives in
:mod:`servekit.verify.run`, imported inside the command body so ``servekit
--help`` stays fast.
"""

from __future__ import annotations

import typer

from servekit.cliopts import command_from_model
from servekit.verify.options import VerifyOptions


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


def register(app: typer.Typer) -> None:
    """Attach ``verify`` (``catalog site`` lives with the catalog commands)."""
    app.command("verify")(
        command_from_model(
            VerifyOptions,
            run_verify,
            doc="Bring a layout up (or attach to a cluster), run acceptance and benchmarks, "
            "write the report, tear down.",
            arguments=("name",),
        )
    )
