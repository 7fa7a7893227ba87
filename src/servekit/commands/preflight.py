"""``servekit preflight NAME [--node K --addresses IP,... | --shared DIR] [--report DIR]``."""

from __future__ import annotations

import typer

from servekit.cliopts import command_from_model
from servekit.preflight import PreflightOptions


def _run(opts: PreflightOptions) -> int:
    from servekit.preflight import run_preflight

    return run_preflight(opts)


def register(app: typer.Typer) -> None:
    app.command("preflight")(
        command_from_model(
            PreflightOptions,
            _run,
            doc="Every node checked before launch, and the nodes compared: the checks of a "
            "layout, one node's run here, or the report of a folder.",
            arguments=("name",),
        )
    )
