"""``servekit bench``: measure a deployment; see docs/bench.md."""

from __future__ import annotations

import typer

from servekit.bench.options import BenchOptions
from servekit.cliopts import command_from_model


def _run(options: BenchOptions) -> int:
    from servekit.bench.cli_main import main

    return main(options)


def register(app: typer.Typer) -> None:
    """Attach the ``bench`` command to the root app (its options are BenchOptions)."""
    app.command("bench")(
        command_from_model(
            BenchOptions,
            _run,
            doc="Measure decode, prefill, sweeps and KV capacity; write JSON, Markdown and plots.",
        )
    )
