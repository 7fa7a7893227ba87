"""``servekit up | down | status | logs`` and ``servekit model tiny``: run a layout here.

Parsing only; the work lives in :mod:`servekit.local`, imported inside each
command so that ``servekit --help`` stays fast.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

import typer

model_app = typer.Typer(help="Build models for local runs.", no_args_is_help=True)

EngineOpt = Annotated[
    str, typer.Option("--engine", help="vllm: real vLLM on the CPU; sim: the simulator")
]


@model_app.command("tiny")
def model_tiny(
    out: Annotated[Path, typer.Option("--out", help="folder to write (replaced whole)")],
) -> None:
    """Build the deterministic tiny Llama (weights, tokenizer, chat template) offline."""
    from servekit.errors import UsageError
    from servekit.local.tinymodel import build_tiny_model
    from servekit.local.tinymodel.ondemand import check_out

    folder = check_out(out)
    try:
        paths = build_tiny_model(folder)
    except OSError as exc:
        raise UsageError(
            f"--out {out}: cannot write there ({exc.strerror}); pick another folder"
        ) from None
    for path in paths:
        typer.echo(str(path))


def _seconds(value: float, flag: str) -> float:
    """A positive, finite number of seconds, or one line and exit 2."""
    from servekit.errors import UsageError

    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{flag} {value:g}: give a positive number of seconds, e.g. {flag} 600")
    return value


def _engine(value: str) -> Literal["vllm", "sim"]:
    from servekit.errors import UsageError

    if value == "vllm":
        return "vllm"
    if value == "sim":
        return "sim"
    raise UsageError(f"--engine {value}: unknown engine; use --engine vllm or --engine sim")


def up(
    name: Annotated[str, typer.Argument(help="layout name, e.g. local/1p1d")],
    *,
    engine: EngineOpt = "vllm",
    detach: Annotated[
        bool, typer.Option("--detach", help="return once ready; a background supervisor watches")
    ] = False,
    free_ports: Annotated[
        bool, typer.Option("--free-ports", help="map every planned port to a free local one")
    ] = False,
    ready_timeout: Annotated[
        float, typer.Option("--ready-timeout", help="seconds to wait for readiness")
    ] = 600.0,
    catalog: Annotated[str | None, typer.Option("--catalog", help="layout folder")] = None,
    speed: Annotated[
        float | None,
        typer.Option("--speed", help="--engine sim: simulated time X times faster (default 1)"),
    ] = None,
) -> None:
    """Run a layout's Plan on this machine and supervise it."""
    from rich.console import Console

    from servekit.local.control import up_detached, up_foreground
    from servekit.local.prepare import prepare_run

    timeout = _seconds(ready_timeout, "--ready-timeout")
    spec = prepare_run(name, _engine(engine), free_ports=free_ports, catalog=catalog, speed=speed)
    console = Console(stderr=True)
    run = up_detached if detach else up_foreground
    raise typer.Exit(run(spec, console, timeout))


def down(
    name: Annotated[str | None, typer.Argument(help="layout to stop (default: all)")] = None,
) -> None:
    """Stop a run (or every run): process groups, no orphans, scratch removed."""
    from servekit.local.control import down as stop

    for line in stop(name):
        typer.echo(line)


def status(
    name: Annotated[str | None, typer.Argument(help="layout (default: every run)")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="one JSON document (a list of runs) for scripts")
    ] = False,
) -> None:
    """Show each run: entry URL, supervisor, and per process port, pid, phase, health, uptime."""
    from rich.console import Console

    from servekit.local.observe import status as show

    raise typer.Exit(show(name, Console(), as_json=as_json))


def logs(
    process: Annotated[str, typer.Argument(help="process name, e.g. decode or proxy")],
    layout: Annotated[str | None, typer.Option("--layout", help="which run")] = None,
    lines: Annotated[int, typer.Option("--lines", "-n", help="lines to show")] = 50,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing")] = False,
) -> None:
    """Print the end of one process's log."""
    from servekit.errors import UsageError
    from servekit.local.observe import logs as show

    if lines < 0:
        raise UsageError(f"--lines {lines}: give 0 or more lines, e.g. -n 50")
    try:
        show(process, layout, lines, follow, typer.echo)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def demo(
    ready_timeout: Annotated[
        float, typer.Option("--ready-timeout", help="seconds to wait for readiness")
    ] = 900.0,
) -> None:
    """Real PD on the CPU: local/1p1d answers equal a single instance's, byte for byte."""
    from rich.console import Console

    from servekit.local.demo import run_demo

    timeout = _seconds(ready_timeout, "--ready-timeout")
    raise typer.Exit(run_demo(Console(), ready_timeout_s=timeout))


def register(app: typer.Typer) -> None:
    """Attach the local-run commands and the ``model`` group to the root app."""
    app.add_typer(model_app, name="model")
    app.command("up")(up)
    app.command("down")(down)
    app.command("status")(status)
    app.command("logs")(logs)
    app.command("demo")(demo)
