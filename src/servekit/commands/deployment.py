"""``servekit deployment NAME --nodes IP,... --out FILE``: a cluster's deployment.json.

A cluster started from ``servekit render``'s scripts writes no deployment.json;
this command writes the one ``accept``, ``bench`` and ``verify`` take
(``--target FILE``), from the layout's Plan and the nodes' addresses in rank
order. The options are one model, :class:`DeploymentOptions`.
"""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import BaseModel, ConfigDict, Field

from servekit.cliopts import command_from_model


class DeploymentOptions(BaseModel):
    """``servekit deployment``: the layout, where its nodes are, and what to write."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="layout name, e.g. a3/1p1d")
    nodes: str = Field(
        description="the nodes' addresses in rank order (the rank table's): IP,IP,..."
    )
    out: Path = Field(description="the deployment.json to write")
    entry: str | None = Field(
        None, description="the URL clients use, when not the Plan's entry on its node"
    )
    logs: Path | None = Field(
        None, description="the cluster's log folder, one PROCESS.log per process (LOG_DIR)"
    )
    engine: str = Field("vllm", description="what the nodes run: vllm, or sim (servekit sim serve)")
    speed: float | None = Field(
        None, gt=0, description="--engine sim: the speed the simulators run at (SERVEKIT_SIM_SPEED)"
    )
    through_proxy: bool = Field(
        False,
        description="the engines' ports are out of reach from here: read their metrics "
        "through the proxy's /metrics/engines",
    )
    catalog: str | None = Field(None, description="catalog folder (default: the packaged one)")


def write_deployment(opts: DeploymentOptions) -> int:
    """Build the deployment from the Plan and the addresses; write it atomically."""
    from servekit.catalog.loader import load
    from servekit.deployment import Deployment, entry_url
    from servekit.errors import UsageError
    from servekit.fsutil import atomic_write_text
    from servekit.verify.cluster import cluster_deployment, parse_nodes
    from servekit.vocabulary import STARTABLE

    if opts.engine not in STARTABLE:
        raise UsageError(f"--engine {opts.engine}: use vllm (real engines) or sim (servekit sim)")
    if opts.speed is not None and opts.engine != "sim":
        raise UsageError("--speed: only simulated engines have a speed; add --engine sim")
    if opts.logs is not None and not opts.logs.is_dir():
        raise UsageError(f"--logs {opts.logs}: no such folder; give the folder LOG_DIR filled")
    entry = None if opts.entry is None else entry_url(opts.entry, "--entry")
    _check_out(opts.out)
    layout = load(opts.name, opts.catalog).layout
    dep = cluster_deployment(
        layout,
        parse_nodes(opts.nodes, layout),
        entry=entry,
        logs=opts.logs.resolve() if opts.logs else None,
        engine="sim" if opts.engine == "sim" else "vllm",
        access="relay" if opts.through_proxy else "direct",
    )
    if opts.speed is not None:
        dep = Deployment.model_validate({**dep.model_dump(), "sim_speed": opts.speed})
    atomic_write_text(opts.out, dep.model_dump_json(indent=2) + "\n")
    engines = [e for e in dep.endpoints if e.role != "proxy"]
    typer.echo(
        f"{opts.out}: {layout.name} on {len(opts.nodes.split(','))} nodes, entry {dep.entry_url}, "
        f"{len(engines)} engine endpoints"
    )
    return 0


def _check_out(out: Path) -> None:
    """Write a new file or replace a deployment.json; never clobber anything else."""
    from servekit.deployment import Deployment
    from servekit.errors import UsageError

    if out.is_dir():
        raise UsageError(
            f"--out {out}: is a folder; give a file name such as {out}/deployment.json"
        )
    if not out.exists():
        return
    try:
        Deployment.model_validate_json(out.read_bytes())
    except ValueError:
        raise UsageError(
            f"--out {out}: exists and is not a deployment.json; give a new file name"
        ) from None


def register(app: typer.Typer) -> None:
    """Attach ``servekit deployment`` to the root app."""
    app.command("deployment")(
        command_from_model(
            DeploymentOptions,
            write_deployment,
            doc="Write the deployment.json of a cluster started from the rendered scripts "
            "(for accept, bench and verify --target FILE).",
            arguments=("name",),
        )
    )
