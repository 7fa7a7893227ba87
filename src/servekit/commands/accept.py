"""``servekit accept``: run the acceptance matrix against a deployment."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Attach ``accept`` to the root app."""
    app.command("accept")(accept)


def accept(  # noqa: PLR0917 (typer maps each parameter to a flag)
    target: Annotated[
        str | None,
        typer.Option("--target", help="URL of the entry, or a layout run by 'servekit up'"),
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help="check id or group (repeatable): guard, needle.144k"),
    ] = None,
    context: Annotated[
        list[str] | None, typer.Option("--context", help="needle contexts, e.g. 144k,1m or 2k")
    ] = None,
    depths: Annotated[
        str | None, typer.Option("--depths", help="depths of needles A-D, e.g. 0.1,0.4,0.6,0.9")
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="served model name (URL targets)")
    ] = None,
    capability: Annotated[
        list[str] | None,
        typer.Option("--capability", help="declare retrieval / vision (URL targets)"),
    ] = None,
    seed: Annotated[str, typer.Option("--seed", help="picks the needle codes")] = "servekit",
    timeout: Annotated[float, typer.Option("--timeout", help="seconds per request")] = 600.0,
    concurrency: Annotated[
        int, typer.Option("--concurrency", help="requests sent at once by the invariant check")
    ] = 4,
    out: Annotated[
        Path, typer.Option("--out", help="folder for result.json, accept.md, evidence")
    ] = Path("accept-out"),
    selfcheck: Annotated[
        bool,
        typer.Option(
            "--selfcheck", help="prove the checks fail on simulator faults behind the real proxy"
        ),
    ] = False,
    list_checks: Annotated[bool, typer.Option("--list", help="list the checks and exit")] = False,
) -> None:
    """Run the acceptance matrix; exit 0 all pass, 1 any failure, 2 usage error."""
    from servekit.accept.cli_main import main

    code = main(
        target=target,
        only=only or [],
        contexts=context or [],
        depths=depths,
        model=model,
        capabilities=capability or [],
        seed=seed,
        timeout_s=timeout,
        concurrency=concurrency,
        out=out,
        selfcheck=selfcheck,
        list_checks=list_checks,
    )
    # SystemExit, not typer.Exit: the root app runs with standalone_mode=False, where
    # click turns typer.Exit into a return value that servekit.cli.main discards.
    raise SystemExit(code)
