"""``servekit up | down | status | logs`` and ``servekit model tiny``: run a layout here.

Parsing only; the work lives in :mod:`servekit.local`, imported inside each
command so that ``servekit --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

model_app = typer.Typer(help="Build models for local runs.", no_args_is_help=True)


@model_app.command("tiny")
def model_tiny(
    out: Annotated[Path, typer.Option("--out", help="folder to write (replaced whole)")],
) -> None:
    """Build the deterministic tiny Llama (weights, tokenizer, chat template) offline."""
    from servekit.local.tinymodel import build_tiny_model  # noqa: PLC0415

    for path in build_tiny_model(out):
        typer.echo(str(path))


def register(app: typer.Typer) -> None:
    """Attach the local-run commands and the ``model`` group to the root app."""
    app.add_typer(model_app, name="model")
