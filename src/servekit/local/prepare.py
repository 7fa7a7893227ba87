"""From a layout name to a ready-to-run RunSpec: checks, ports, Plan, run directory.

This is the only place that calls :func:`servekit.render.plan.build_plan` for a
local run. It builds the Plan with loopback hosts, the local port map, this
interpreter and the run's scratch folder, then records the Plan and the launch
list in the run directory before anything starts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from servekit.catalog.loader import load
from servekit.catalog.schema import Layout
from servekit.deployment import run_dir_for
from servekit.fsutil import atomic_write_text
from servekit.local import ports, preflight
from servekit.local.rundir import RunDir, versions
from servekit.local.runspec import EngineChoice, RunSpec, vllm_run_spec
from servekit.render.bundle import write_bundle
from servekit.render.plan import PlanOptions, build_plan

LOOPBACK = "127.0.0.1"


def _planned(layout: Layout) -> list[tuple[int, int, str]]:
    """(node, port, process) for every port the unmapped Plan binds."""
    plan = build_plan(layout, PlanOptions(hosts=(LOOPBACK,) * layout.nodes))
    return [(p.node, port, p.name) for p in plan.processes for port in p.bound_ports()]


def port_map(layout: Layout, free_ports: bool) -> dict[str, int]:
    """Free local ports for every planned one, or an empty map after proving them free."""
    planned = _planned(layout)
    if free_ports:
        return ports.map_to_free((node, port) for node, port, _ in planned)
    ports.require_free({port: name for _, port, name in planned})
    return {}


def prepare_run(
    name: str,
    engine: EngineChoice = "vllm",
    *,
    free_ports: bool = False,
    cwd: Path | None = None,
    catalog: str | None = None,
) -> RunSpec:
    """Check everything, build the Plan, write the run directory; start nothing."""
    here = (cwd or Path.cwd()).resolve()
    layout = load(name, catalog).layout
    preflight.check_hardware(layout, engine)
    run = RunDir(run_dir_for(name))
    preflight.check_not_running(run.state, name)
    if engine == "sim":
        from servekit.local.simrun import require_sim

        require_sim()
    else:
        preflight.check_engine_installed()
        preflight.check_model_dir(here / layout.model.path)
    options = PlanOptions(
        hosts=(LOOPBACK,) * layout.nodes,
        bind_host=LOOPBACK,
        port_map=port_map(layout, free_ports),
        python=sys.executable,
        scratch_dir=str(run.scratch),
        bundle_dir=str(run.root / "bundle"),
    )
    plan = build_plan(layout, options)
    run.reset()
    run.write_plan(plan)
    write_bundle(run.root / "bundle")
    spec = vllm_run_spec(
        plan,
        run_dir=run.root,
        scratch=run.scratch,
        cwd=here,
        capabilities=tuple(layout.model.capabilities),
    )
    if engine == "sim":
        from servekit.local.simrun import sim_run_spec

        spec = sim_run_spec(spec, plan, run)
    atomic_write_text(run.launch, spec.model_dump_json(indent=2) + "\n")
    atomic_write_text(run.versions, json.dumps(versions(), indent=2, sort_keys=True) + "\n")
    return spec
