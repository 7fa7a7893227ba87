"""``servekit layouts new|diff|drift``: derive a layout, compare two, compare with upstream.

Attached to the ``layouts`` group by :mod:`servekit.commands.catalog`; the work
lives in :mod:`servekit.layouttools.derive`, :mod:`servekit.layouttools.compare` and
:mod:`servekit.layouttools.drift`, imported inside the run functions.
"""

from __future__ import annotations

import json

import typer

from servekit.catalog import LayoutsDiffOptions, LayoutsDriftOptions, LayoutsNewOptions
from servekit.cliopts import add_command


def _new(opts: LayoutsNewOptions) -> int:
    from servekit.importer import dump_yaml
    from servekit.layouttools import derive_layout, write_derived

    data = derive_layout(opts)
    if opts.dry_run:
        typer.echo(dump_yaml(data), nl=False)
        return 0
    path = write_derived(opts.name, data, opts.catalog, opts.force)
    prov = data["provenance"]
    typer.echo(
        f"wrote {path} (derived from {prov['derived_from']}, {prov['derived']}; status derived)"
    )
    return 0


def _diff(opts: LayoutsDiffOptions) -> int:
    from servekit.layouttools import diff_sources, print_diff

    diff = diff_sources(opts.a, opts.b, opts.catalog)
    if opts.json_out:
        typer.echo(json.dumps(diff.as_json(), indent=1))
    else:
        print_diff(diff)
    return 0


def _drift(opts: LayoutsDriftOptions) -> int:
    from servekit.layouttools import drift_report, print_drift

    report = drift_report(opts.name, opts.upstream, opts.catalog)
    if opts.json_out:
        typer.echo(json.dumps(report.as_json(), indent=1))
    else:
        print_drift(report)
    return 0


def register_layouts(layouts: typer.Typer) -> None:
    """Add ``new``, ``diff`` and ``drift`` to the ``layouts`` group."""
    add_command(
        layouts,
        "new",
        LayoutsNewOptions,
        _new,
        doc="Derive a layout from another: topology, engine ids, kv ports, DP sizes and the "
        "proxy fan-out computed; settings and environment carried over; status derived.",
        arguments=("name",),
    )
    add_command(
        layouts,
        "diff",
        LayoutsDiffOptions,
        _diff,
        doc="The difference of two layouts' Plans per role and process: flags, env, "
        "topology, proxy wiring.",
        arguments=("a", "b"),
    )
    add_command(
        layouts,
        "drift",
        LayoutsDriftOptions,
        _drift,
        doc="What moved upstream: a layout's reference command against a newer tutorial.",
        arguments=("name",),
    )
