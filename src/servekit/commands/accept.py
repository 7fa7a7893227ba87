"""``servekit accept``: run the acceptance matrix against a deployment.

The command is generated from :class:`~servekit.accept.options.AcceptCommandOptions`;
the flow lives in :mod:`servekit.accept.cli_main`, imported when it runs.
"""

from __future__ import annotations

import typer

from servekit.accept.options import AcceptCommandOptions
from servekit.cliopts import add_command


def _run(opts: AcceptCommandOptions) -> int:
    from servekit.accept.cli_main import main

    return main(
        target=opts.target,
        only=list(opts.only),
        contexts=list(opts.context),
        depths=opts.depths,
        model=opts.model,
        capabilities=list(opts.capability),
        seed=opts.seed,
        timeout_s=opts.timeout,
        concurrency=opts.concurrency,
        out=opts.out,
        selfcheck=opts.selfcheck,
        list_checks=opts.list_checks,
    )


def register(app: typer.Typer) -> None:
    """Attach ``accept`` to the root app."""
    add_command(
        app,
        "accept",
        AcceptCommandOptions,
        _run,
        doc="Run the acceptance matrix; exit 0 all pass, 1 any failure, 2 usage error.",
    )
