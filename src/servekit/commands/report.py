"""``servekit verify``: registration only; the command is generated from VerifyOptions.

What it does is :func:`servekit.verify.main`, imported inside the command body
so ``servekit --help`` stays fast.
"""

from __future__ import annotations

import typer

from servekit.cliopts import add_command
from servekit.verify import VerifyOptions


def _run(opts: VerifyOptions) -> int:
    from servekit.verify import main

    return main(opts)


def register(app: typer.Typer) -> None:
    """Attach ``verify`` (``catalog site`` lives with the catalog commands)."""
    add_command(
        app,
        "verify",
        VerifyOptions,
        _run,
        doc="Bring a layout up (or attach to a cluster), run acceptance and benchmarks, "
        "write the report, tear down.",
        arguments=("name",),
    )
