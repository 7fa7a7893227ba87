"""``servekit sim``: run the vLLM-compatible engine simulator; see docs/sim.md.

The options are :class:`SimCommandOptions` (the simulator's own
:class:`~servekit.sim.options.SimOptions` plus ``--layout``, which needs the
catalog); the typer command is generated from that model. ``servekit sim serve
MODEL [vllm serve flags]`` is the drop-in ``vllm serve``: its flags are vLLM's,
parsed by the simulator, so typer passes them through untouched.
"""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import Field

from servekit.cliopts import callback_from_model
from servekit.sim import SimOptions

SERVE_HELP = (
    "Serve one simulated engine from a 'vllm serve' command line: "
    "servekit sim serve MODEL \\[vllm serve flags] (see docs/sim.md; --help lists the flags)."
)


class SimCommandOptions(SimOptions):
    """``servekit sim``: the simulator's options, and a catalog layout to serve."""

    layout: str | None = Field(
        None, description="serve every engine endpoint of a catalog layout (free local ports)"
    )
    catalog: Path | None = Field(None, description="catalog folder for --layout")


def run_sim(opts: SimCommandOptions) -> int:
    """Serve the options' spec; ``--layout`` first turns a layout into a spec file."""
    from servekit.sim import run_options

    if opts.layout is None:
        return run_options(SimOptions(**opts.model_dump(exclude={"layout", "catalog"})))
    import tempfile

    from servekit.local import layout_sim_spec

    folder = Path(tempfile.mkdtemp(prefix="servekit-sim-"))
    catalog = str(opts.catalog) if opts.catalog else None
    spec = layout_sim_spec(opts.layout, folder / "sim.json", catalog)
    fields = opts.model_dump(exclude={"layout", "catalog"})
    return run_options(SimOptions(**{**fields, "spec": spec}))


def serve(ctx: typer.Context) -> None:
    """Serve one simulated engine from a 'vllm serve' command line (docs/sim.md)."""
    from servekit.sim import serve_main

    raise typer.Exit(serve_main(list(ctx.args)))


def register(app: typer.Typer) -> None:
    """Attach ``sim`` (and ``sim serve``) to the root app."""
    group = typer.Typer(invoke_without_command=True, no_args_is_help=False)
    group.callback()(
        callback_from_model(SimCommandOptions, run_sim, doc=SimCommandOptions.__doc__ or "")
    )
    group.command(
        "serve",
        help=SERVE_HELP,
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )(serve)
    app.add_typer(
        group, name="sim", help="Serve simulated vLLM endpoints (many ports, one process)."
    )
