"""``servekit accept``: registration only; the command is generated from AcceptOptions.

What it does is :func:`servekit.accept.main`, imported when it runs so
``servekit --help`` stays fast.
"""

from __future__ import annotations

import typer

from servekit.accept import AcceptOptions
from servekit.cliopts import add_command


def _run(options: AcceptOptions) -> int:
    from servekit.accept import main

    return main(options)


def register(app: typer.Typer) -> None:
    """Attach ``accept`` to the root app."""
    add_command(
        app,
        "accept",
        AcceptOptions,
        _run,
        doc="Run the acceptance matrix; exit 0 all pass, 1 any failure, 2 usage error.",
    )
