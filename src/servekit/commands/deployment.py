"""``servekit deployment NAME --nodes IP,... | --pods POD=IP,... --out FILE``: a cluster's deployment.json.

``--pods`` is the Kubernetes platform's attach flag (its row of the platform
table); another platform's attach flag works the same way.

A cluster started from ``servekit render``'s scripts writes no deployment.json;
this command writes the one ``accept``, ``bench`` and ``verify`` take
(``--target FILE``), from the layout's Plan and the nodes' addresses in rank
order. The options are one model,
:class:`~servekit.verify.options.DeploymentOptions`, which checks them all; the
work is :func:`servekit.verify.cluster.write_deployment`.
"""

from __future__ import annotations

import typer

from servekit.cliopts import add_command
from servekit.verify import DeploymentOptions


def _write(opts: DeploymentOptions) -> int:
    from servekit.verify import write_deployment

    dep = write_deployment(opts)
    engines = [e for e in dep.endpoints if e.role != "proxy"]
    by = opts.attached_by()
    where = opts.nodes or (by.text if by else "")
    unit = "nodes" if opts.nodes or by is None else by.attach.field
    typer.echo(
        f"{opts.out}: {dep.layout} on {len(where.split(','))} {unit}, entry {dep.entry_url}, "
        f"{len(engines)} engine endpoints"
    )
    return 0


def register(app: typer.Typer) -> None:
    """Attach ``servekit deployment`` to the root app."""
    add_command(
        app,
        "deployment",
        DeploymentOptions,
        _write,
        doc="Write the deployment.json of a cluster started from the rendered scripts "
        "(for accept, bench and verify --target FILE).",
        arguments=("name",),
    )
