"""``servekit verify``: parsing only.

The flow lives in :mod:`servekit.verify.run`, imported inside the command body
so ``servekit --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

EngineOpt = Annotated[
    str, typer.Option("--engine", help="vllm: real engines here; sim: simulated engines")
]
CatalogOpt = Annotated[
    Path | None,
    typer.Option(
        "--catalog", help="catalog folder (default: SERVEKIT_CATALOG or the packaged catalog)"
    ),
]


def _engine(value: str) -> Literal["vllm", "sim"]:
    from servekit.errors import UsageError

    if value == "vllm":
        return "vllm"
    if value == "sim":
        return "sim"
    raise UsageError(f"--engine {value}: use vllm (real engines) or sim (simulated engines)")


def verify_command(  # noqa: PLR0917 (typer maps each parameter to a flag)
    name: Annotated[str, typer.Argument(help="layout name, e.g. local/1p1d")],
    engine: EngineOpt = "vllm",
    target: Annotated[
        str | None, typer.Option("--target", help="attach to a running URL or layout instead")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="run folder (default .servekit/reports/...)")
    ] = None,
    baseline: Annotated[
        Path | None, typer.Option("--baseline", help="a saved bench.json to compare against")
    ] = None,
    no_baseline: Annotated[
        bool,
        typer.Option("--no-baseline", help="do not compare with the last passing run"),
    ] = False,
    kit: Annotated[
        Path | None, typer.Option("--kit", help="image kit archive to self-check")
    ] = None,
    quick: Annotated[
        bool | None,
        typer.Option("--quick/--full", help="short workloads (default: quick on sim only)"),
    ] = None,
    catalog: CatalogOpt = None,
) -> None:
    """Bring a layout up, run acceptance and benchmarks, write the report, tear down."""
    from servekit.verify.adapters import real_components
    from servekit.verify.run import VerifyOptions, verify

    cat = str(catalog) if catalog else None
    opts = VerifyOptions(
        name=name,
        engine=_engine(engine),
        target=target,
        out=out,
        baseline=baseline,
        no_baseline=no_baseline,
        kit=kit,
        quick=quick,
        catalog=cat,
    )
    outcome = verify(opts, real_components(cat))
    for line in outcome.run_dir.joinpath("report.md").read_text().splitlines()[:3]:
        if line.strip():
            typer.echo(line)
    if outcome.ledger is not None:
        typer.echo(f"ledger: {outcome.ledger} (+1 {outcome.run.engine} record)")
    else:
        typer.echo("ledger: unchanged (only a passing run is recorded)")
    typer.echo(f"report: {outcome.report_md}")
    typer.echo(f"html:   {outcome.report_html}")
    # SystemExit, not typer.Exit: under the root app's standalone_mode=False click
    # turns typer.Exit into a return value that servekit.cli.main discards.
    raise SystemExit(outcome.exit_code)


def register(app: typer.Typer) -> None:
    """Attach ``verify`` (``catalog site`` lives with the catalog commands)."""
    app.command("verify")(verify_command)
