"""From a layout name to a ready-to-run RunSpec: checks, model, ports, Plan, run directory.

This is the only place that calls :func:`servekit.render.plan.build_plan` for a
local run. It checks the input, builds the tiny model when a CPU layout needs it
and it is missing, settles the ports (:mod:`servekit.local.portplan`: mapped
when the layout's nodes share port numbers or ``--free-ports`` asks), hides
torch companions that cannot load (:mod:`servekit.local.companions`), builds
the Plan with loopback hosts, that port map, this interpreter and the run's
scratch folder, then records the Plan and the launch list in the run directory
before anything starts. What it did on the user's behalf comes back as the
RunSpec's ``notes``, one line each.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from servekit.catalog import Layout, load
from servekit.deployment import run_dir_for, run_dirs_of
from servekit.local import companions, portplan, preflight
from servekit.local.observe import names_of_one_layout
from servekit.local.options import UpOptions
from servekit.local.portplan import LOOPBACK
from servekit.local.rundir import RunDir, versions
from servekit.local.runspec import Launch, RunSpec, vllm_run_spec
from servekit.local.simrun import require_sim, sim_run_spec
from servekit.local.tinymodel.ondemand import ensure_tiny_model
from servekit.render import PlanOptions, build_plan, write_bundle
from servekit.vocabulary import Startable, atomic_write_text


def _engine_checks(
    layout: Layout, engine: Startable, here: Path
) -> tuple[list[str], tuple[companions.Broken, ...]]:
    """The engine's own checks; the notes to show and the companions to hide from engines."""
    if engine == "sim":
        require_sim()
        return [], ()
    preflight.check_engine_installed()
    notes = [built] if (built := ensure_tiny_model(layout, here)) else []
    preflight.check_model_dir(here / layout.model.path)
    broken = companions.find_broken()
    if broken:
        notes.append(companions.note(broken))
    return notes, broken


def _hidden(launch: Launch, broken: tuple[companions.Broken, ...]) -> Launch:
    """An engine launch with the broken companions hidden; its own PYTHONPATH (the guard's
    bundle folder) stays behind the hook."""
    if launch.kind != "engine" or not broken:
        return launch
    extra = companions.engine_env(broken, launch.env.get("PYTHONPATH"))
    return launch.model_copy(update={"env": {**launch.env, **extra}})


def _with_engine_env(
    spec: RunSpec, broken: tuple[companions.Broken, ...], notes: list[str]
) -> RunSpec:
    launches = tuple(_hidden(x, broken) for x in spec.launches)
    return spec.model_copy(update={"launches": launches, "notes": (*spec.notes, *notes)})


def prepare_run(opts: UpOptions, *, cwd: Path | None = None) -> RunSpec:
    """Check everything, build the Plan, write the run directory; start nothing.

    ``opts`` is ``servekit up``'s own model (its flags already checked);
    ``cwd`` is where the engines run (default: here).
    """
    here = (cwd or Path.cwd()).resolve()
    name, engine, speed = opts.name, opts.engine, opts.speed
    layout = load(name, str(opts.catalog) if opts.catalog else None).layout
    preflight.check_hardware(layout, engine)
    names = tuple(names_of_one_layout(name, opts.catalog))
    for other in names:
        for existing in run_dirs_of(other):
            preflight.check_not_running(RunDir(existing).state, other)
    run = RunDir(run_dir_for(name))
    notes, broken = _engine_checks(layout, engine, here)
    ports = portplan.choose(layout, opts.free_ports)
    notes += [ports.note] if ports.note else []
    options = PlanOptions(
        hosts=(LOOPBACK,) * layout.nodes,
        bind_host=LOOPBACK,
        port_map=ports.mapping,
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
        spec = sim_run_spec(spec, plan, run, speed)
    spec = _with_engine_env(spec, broken, notes).model_copy(update={"layout_names": names})
    atomic_write_text(run.launch, spec.model_dump_json(indent=2) + "\n")
    atomic_write_text(run.versions, json.dumps(versions(), indent=2, sort_keys=True) + "\n")
    return spec
