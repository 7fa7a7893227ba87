"""``servekit preflight NAME``: what each node is checked for, one node run here, or a report.

The rendered entries ship the node-side program (:mod:`servekit.preflight.node`)
and run it before the engines; this command is the same program from servekit:

- without ``--node`` or ``--report``: the checks each node of the layout gets
  (devices, ports, model, peers and why), from the Plan;
- ``--node K --addresses IP,IP,...`` (or ``--shared DIR``): node K's preflight on
  this machine, exchanging results with the others as the entries do (the
  command for plain nodes with servekit installed; ``node<K>/preflight.sh`` is
  the one without);
- ``--report DIR``: the report of the results in a folder.

Exit 0 pass, 1 a check failed (the report says which node and why), 2 bad input.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

from servekit.catalog import load
from servekit.errors import UsageError
from servekit.preflight.node import (
    servekit_preflight as entry,
    servekit_preflight_probe as probe,
    servekit_preflight_share as share,
)
from servekit.preflight.options import PreflightOptions
from servekit.preflight.spec import node_units, spec_doc
from servekit.render import apply_overrides, build_plan
from servekit.termtable import fit_tables


def _spec(opts: PreflightOptions) -> dict[str, Any]:
    """The layout's spec as every node's preflight reads it (checked as they check it)."""
    layout = apply_overrides(load(opts.name, opts.catalog).layout, list(opts.set))
    plan = build_plan(layout)
    doc = spec_doc(plan, node_units(plan))
    return entry.parse_spec(json.dumps(doc).encode())


def runs(numbers: list[int]) -> str:
    """``7100-7115, 12321``: consecutive numbers as one run."""
    out: list[str] = []
    for n in sorted(set(numbers)):
        if out and out[-1].rsplit("-", 1)[-1] == str(n - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ", ".join(out) or "-"


def _show(spec: dict[str, Any], console: Console) -> int:
    reserved = spec["reserved"]
    console.print(
        f"preflight of {spec['layout']}: {len(spec['units'])} nodes, {spec['platform']}, "
        f"results exchanged on port {spec['port']}"
        + (f", reserved ports [{reserved[0]}, {reserved[1]})" if reserved else "")
    )
    rows = [
        (
            u["label"],
            probe.span(u["devices"]),
            runs([p for p, _ in u["ports"]]),
            spec["model_path"] if u["model"] else "-",
            "; ".join(f"{n} ({why})" for n, why in u["peers"]) or "-",
        )
        for u in spec["units"]
    ]
    for table in fit_tables(console, ("node", "devices", "ports", "model", "peers"), rows):
        console.print(table)
    return 0


def _print_report(report: dict[str, Any], as_json: bool) -> int:
    if as_json:
        print(json.dumps(report, indent=1, sort_keys=True))
    else:
        print(share.report_text(report), end="")
        print(share.verdict_line(report))
    return 0 if report["verdict"] == share.OK else 1


def run_preflight(opts: PreflightOptions, console: Console | None = None) -> int:
    """``servekit preflight``: exit 0 pass (or shown), 1 a check failed, 2 bad input."""
    con = console or Console()
    spec = _spec(opts)
    try:
        if opts.report is not None:
            folder = opts.report
            if not folder.is_dir():
                raise UsageError(
                    f"--report {folder}: no such folder; give LOG_DIR/preflight/<layout>"
                )
            return _print_report(entry.report_folder(str(folder), spec), opts.json_out)
        if opts.node is None:
            return _show(spec, con)
        if opts.node >= len(spec["units"]):
            raise UsageError(
                f"--node {opts.node}: {spec['layout']} has nodes 0-{len(spec['units']) - 1}"
            )
        addresses = opts.address_list() if opts.addresses else []
        if addresses and len(addresses) != len(spec["units"]):
            raise UsageError(
                f"--addresses: {len(addresses)} given, {spec['layout']} has {len(spec['units'])} "
                "nodes; give one address per node, in node order"
            )
        me = addresses[opts.node] if addresses else "0.0.0.0"
        return entry.run_unit(
            spec,
            f"node{opts.node}",
            " ".join(addresses),
            listen=me,
            bind_ports=opts.bind_ports,
            timeout=float(opts.timeout),
            shared=str(opts.shared) if opts.shared else None,
            log_dir=str(opts.log_dir) if opts.log_dir else None,
        )
    except entry.SpecError as exc:
        raise UsageError(str(exc)) from None
