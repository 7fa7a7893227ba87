"""``servekit up NAME --engine sim``: one simulator process serves every engine endpoint.

The Plan's API processes become the simulator's endpoints (same names, roles,
engine ids and mapped ports); the proxy stays a real process launched with the
Plan's own argv, so the proxy is exercised exactly as with real engines.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from servekit.errors import UsageError
from servekit.guard import ENV_SWITCH as GUARD_ENV, METASERVER_ENV
from servekit.local.rundir import RunDir
from servekit.local.runspec import Launch, RunSpec
from servekit.render import Plan, ProcessPlan
from servekit.vocabulary import atomic_write_text, url_for

SIM_PROCESS = "sim"
NO_PREFIX_CACHING = "--no-enable-prefix-caching"
# The simulator's latency profile per engine kind of the Plan; "zero" elsewhere.
SIM_PROFILES = {"vllm-ascend": "a3-dsv4-flash", "vllm-cpu": "cpu-tiny"}


def require_sim() -> None:
    """The simulator must be runnable with ``python -m servekit.sim``."""
    if importlib.util.find_spec("servekit.sim.__main__") is None:
        raise UsageError(
            "this servekit build has no simulator entry point (python -m servekit.sim); "
            "use --engine vllm or update servekit"
        )


def _profile(proc: ProcessPlan, plan: Plan) -> object:
    """The profile's name, or the profile inline when the Plan turns prefix caching off.

    A layout that runs with ``--no-enable-prefix-caching`` (PREFIX=0, or the flag
    in its verified command, as the A3 DeepSeek layouts have it) gets a
    simulator without prefix caching too, as ``servekit sim serve`` does for
    the rendered scripts, so a dry run sees what the cluster will do.
    """
    name = SIM_PROFILES.get(plan.engine_kind, "zero")
    if proc.settings.get("PREFIX") != "0" and NO_PREFIX_CACHING not in proc.argv:
        return name
    from servekit.sim import load_profile

    return load_profile(name).model_copy(update={"enable_prefix_caching": False}).model_dump()


def _metaservers(proc: ProcessPlan) -> tuple[str, ...]:
    """The proxy URLs a layerwise decoder's guard trusts (SERVEKIT_GUARD_METASERVER)."""
    value = proc.env.get(METASERVER_ENV)
    return tuple(value.split()) if isinstance(value, str) else ()


def _kv_events(port: int) -> dict[str, object]:
    return {"endpoint": url_for("*", port, scheme="tcp")}


def _has_flag(proc: ProcessPlan, flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in proc.argv)


def _context(proc: ProcessPlan) -> int | None:
    """The process's ``--max-model-len``; None where it passes none (the engine's default)."""
    argv = list(proc.argv)
    if "--max-model-len" in argv[:-1]:
        return int(argv[argv.index("--max-model-len") + 1])
    return None


def _endpoint(proc: ProcessPlan, plan: Plan) -> dict[str, object]:
    return {
        "name": proc.name,
        "host": proc.host,
        "port": proc.api_port,
        "role": proc.role,
        "engine_id": proc.engine_id,
        "kv_mode": proc.kv_mode or "params",
        "metaservers": _metaservers(proc),
        "kv_connector": proc.kv_connector or "NixlConnector",
        # what the real guard reads: the Plan's SERVEKIT_DECODE_GUARD (unset: strict)
        "guard_mode": "prompt-keyed" if proc.env.get(GUARD_ENV) == "prompt-keyed" else "strict",
        "dp_rank": proc.dp_rank or 0,
        "dp_size": proc.dp_size or 1,
        "tp": proc.tp,
        "kv_port": proc.kv_port or 0,
        "served_model_name": plan.served_model_name,
        # what the engine was told (its --max-model-len), else the simulator's own default
        **({"max_model_len": context} if (context := _context(proc)) is not None else {}),
        "guard": proc.guard,
        # the engine's parsers, as its vllm command has them
        "reasoning_parser": _has_flag(proc, "--reasoning-parser"),
        "tool_call_parser": _has_flag(proc, "--tool-call-parser")
        and _has_flag(proc, "--enable-auto-tool-choice"),
        "node": str(proc.node),
        "profile": _profile(proc, plan),
        # the Plan's publisher port (vLLM's DP-rank offset already in it); * binds the host
        "kv_events": None if proc.kv_events_port is None else _kv_events(proc.kv_events_port),
    }


def sim_spec_doc(plan: Plan) -> dict[str, object]:
    """A SimSpec document for every non-headless engine API process of the Plan."""
    engines = [p for p in plan.api_processes() if p.kind == "engine" and not p.headless]
    return {"endpoints": [_endpoint(p, plan) for p in engines]}


def sim_run_spec(spec: RunSpec, plan: Plan, run: RunDir, speed: float | None = None) -> RunSpec:
    """Replace the engine launches with one simulator launch serving all their ports.

    ``speed`` (``servekit up --speed X``) runs simulated time X times faster;
    it is written into ``sim.json`` and recorded in the run's deployment.
    """
    from servekit.sim import spec_from_mapping

    doc = sim_spec_doc(plan)
    sim_spec = spec_from_mapping(doc, where="plan -> sim spec")
    if speed is not None:
        sim_spec = sim_spec.at_speed(speed)
    path = run.root / "sim.json"
    atomic_write_text(path, sim_spec.model_dump_json(indent=2) + "\n")
    engines = [x for x in spec.launches if x.kind == "engine"]
    sim = Launch(
        name=SIM_PROCESS,
        role="sim",
        kind="sim",
        argv=(sys.executable, "-m", "servekit.sim", "--spec", str(path)),
        env={},
        url=None,
        port=None,
        ready_urls=tuple(x.url for x in engines if x.url is not None),
        ready_model=plan.served_model_name,
        log=run.log_of(SIM_PROCESS),
    )
    others = tuple(x for x in spec.launches if x.kind != "engine")
    endpoints = tuple(
        e.model_copy(update={"process": SIM_PROCESS}) if e.role != "proxy" else e
        for e in spec.endpoints
    )
    return spec.model_copy(
        update={
            "engine": "sim",
            "launches": (sim, *others),
            "endpoints": endpoints,
            "sim_speed": sim_spec.speed,
        }
    )


def layout_sim_spec(name: str, out: Path, catalog: str | None = None) -> Path:
    """``servekit sim --layout NAME``: the SimSpec of a layout's engines, on free local ports.

    Only the engine endpoints are served (no proxy): the same conversion
    ``servekit up NAME --engine sim`` uses, written to ``out`` for the simulator.
    """
    from servekit.catalog import load
    from servekit.local.portplan import LOOPBACK, port_map
    from servekit.render import PlanOptions, build_plan
    from servekit.sim import spec_from_mapping

    layout = load(name, catalog).layout
    options = PlanOptions(
        hosts=(LOOPBACK,) * layout.nodes,
        bind_host=LOOPBACK,
        port_map=port_map(layout, free_ports=True),
    )
    spec = spec_from_mapping(sim_spec_doc(build_plan(layout, options)), where=f"{name} -> sim spec")
    atomic_write_text(out, spec.model_dump_json(indent=2) + "\n")
    return out
