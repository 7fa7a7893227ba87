"""``servekit sim``: run the vLLM-compatible engine simulator; see docs/sim.md."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Attach the ``sim`` command to the root app."""
    app.command("sim")(sim)


def sim(  # noqa: PLR0917 - typer maps one parameter per documented flag
    spec: Annotated[Path | None, typer.Option(help="a SimSpec file (.json, .yaml)")] = None,
    layout: Annotated[
        str | None, typer.Option(help="serve every engine endpoint of a catalog layout")
    ] = None,
    catalog: Annotated[Path | None, typer.Option(help="catalog folder for --layout")] = None,
    endpoints: Annotated[int | None, typer.Option(help="quick form: N endpoints")] = None,
    role: Annotated[str, typer.Option(help="quick form: mixed, prefill or decode")] = "mixed",
    base_port: Annotated[int, typer.Option(help="quick form: first port (0: free ports)")] = 8100,
    model: Annotated[str, typer.Option(help="quick form: served model name")] = "sim-model",
    profile: Annotated[str, typer.Option(help="zero, cpu-tiny or a3-dsv4-flash")] = "zero",
    host: Annotated[str, typer.Option(help="quick form: listen address")] = "127.0.0.1",
    max_model_len: Annotated[int, typer.Option(help="quick form: context length")] = 32768,
    admin_port: Annotated[int | None, typer.Option(help="quick form: admin server port")] = None,
    time_scale: Annotated[
        float | None,
        typer.Option(help="wall seconds per simulated second (0.1 = 10x faster; default 1)"),
    ] = None,
    ready_file: Annotated[
        Path | None, typer.Option(help="write the bound URLs here (JSON) once listening")
    ] = None,
    check: Annotated[bool, typer.Option(help="validate and print the spec, serve nothing")] = False,
) -> None:
    """Serve simulated vLLM endpoints (many ports, one process) until SIGTERM/SIGINT."""
    from servekit.sim.cli_main import SimArgs, main

    if layout is not None:
        import tempfile

        from servekit.local.simrun import layout_sim_spec

        folder = Path(tempfile.mkdtemp(prefix="servekit-sim-"))
        spec = layout_sim_spec(layout, folder / "sim.json", str(catalog) if catalog else None)
    code = main(
        SimArgs(
            spec=spec,
            endpoints=endpoints,
            role=role,
            base_port=base_port,
            model=model,
            profile=profile,
            host=host,
            max_model_len=max_model_len,
            admin_port=admin_port,
            time_scale=time_scale,
            ready_file=ready_file,
            check=check,
        )
    )
    raise typer.Exit(code)
