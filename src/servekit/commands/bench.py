"""``servekit bench``: registration only; the command is generated from BenchOptions.

What it does is :func:`servekit.bench.main`, imported when it runs so
``servekit --help`` stays fast. See docs/bench.md.
"""

from __future__ import annotations

import typer

from servekit.bench import BenchOptions
from servekit.cliopts import add_command


def _run(options: BenchOptions) -> int:
    from servekit.bench import main

    return main(options)


def register(app: typer.Typer) -> None:
    """Attach the ``bench`` command to the root app."""
    add_command(
        app,
        "bench",
        BenchOptions,
        _run,
        doc="Measure decode, prefill, sweeps and KV capacity; write JSON, Markdown and plots.",
    )
