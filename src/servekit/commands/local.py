"""``servekit up | down | status | logs | demo`` and ``servekit model tiny``: run a layout here.

Each command is generated from its options model (:mod:`servekit.local.options`);
the work lives in :mod:`servekit.local`, imported inside each run function so
that ``servekit --help`` stays fast.
"""

from __future__ import annotations

import typer

from servekit.cliopts import add_command
from servekit.local import (
    DemoOptions,
    DownOptions,
    LogsOptions,
    StatusOptions,
    TinyModelOptions,
    UpOptions,
)


def _tiny(opts: TinyModelOptions) -> int:
    from servekit.errors import UsageError
    from servekit.local import build_tiny_model, check_out

    folder = check_out(opts.out)
    try:
        paths = build_tiny_model(folder)
    except OSError as exc:
        raise UsageError(
            f"--out {opts.out}: cannot write there ({exc.strerror}); pick another folder"
        ) from None
    for path in paths:
        typer.echo(str(path))
    return 0


def _up(opts: UpOptions) -> int:
    from rich.console import Console

    from servekit.local import prepare_run, up_detached, up_foreground

    spec = prepare_run(opts)
    run = up_detached if opts.detach else up_foreground
    return run(spec, Console(stderr=True), opts.ready_timeout)


def _down(opts: DownOptions) -> int:
    from servekit.local import down as stop

    for line in stop(opts.name):
        typer.echo(line)
    return 0


def _status(opts: StatusOptions) -> int:
    from rich.console import Console

    from servekit.local import status as show

    return show(opts.name, Console(), as_json=opts.as_json)


def _logs(opts: LogsOptions) -> int:
    from servekit.local import logs as show

    try:
        show(opts, typer.echo)
    except KeyboardInterrupt:
        return 0
    return 0


def _demo(opts: DemoOptions) -> int:
    from rich.console import Console

    from servekit.local import run_demo

    return run_demo(Console(), ready_timeout_s=opts.ready_timeout)


def register(app: typer.Typer) -> None:
    """Attach the local-run commands and the ``model`` group to the root app."""
    model_app = typer.Typer(help="Build models for local runs.", no_args_is_help=True)
    add_command(
        model_app,
        "tiny",
        TinyModelOptions,
        _tiny,
        doc="Build the deterministic tiny Llama (weights, tokenizer, chat template) offline.",
    )
    app.add_typer(model_app, name="model")
    add_command(
        app,
        "up",
        UpOptions,
        _up,
        doc="Run a layout's Plan on this machine and supervise it.",
        arguments=("name",),
    )
    add_command(
        app,
        "down",
        DownOptions,
        _down,
        doc="Stop a run (or every run): process groups, no orphans, scratch removed.",
        arguments=("name",),
    )
    add_command(
        app,
        "status",
        StatusOptions,
        _status,
        doc="Show each run: entry URL, supervisor, and per process port, pid, phase, "
        "health, uptime.",
        arguments=("name",),
    )
    add_command(
        app,
        "logs",
        LogsOptions,
        _logs,
        doc="Print the end of one process's log.",
        arguments=("process",),
    )
    add_command(
        app,
        "demo",
        DemoOptions,
        _demo,
        doc="Real PD on the CPU: local/1p1d answers equal a single instance's, byte for byte.",
    )
