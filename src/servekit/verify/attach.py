"""``verify --target`` / ``--nodes``: the running deployment, completed from the layout.

A bare URL knows nothing of the engines behind it; the layout's Plan does. So
the deployment a verify run attaches to is built from what the user gave:

- ``--nodes IP,...`` (with or without ``--target URL``): every endpoint from the
  Plan on those addresses, reached directly;
- ``--target URL`` of a layout with a proxy: the node addresses recovered from
  the proxy's ``/metrics/engines``, the engines reached only through it;
- ``--target URL`` of a layout whose only API server is the entry: that server;
- ``--target URL`` and a platform's attach flag (its row's ``attach``; Kubernetes:
  ``--pods POD=IP,...``, each engine pod's address): every endpoint from the Plan
  at the address that platform's folder reads for it;
- ``--target NAME|FILE``: the deployment.json, with the layout's capabilities
  and model filled in when it lacks them.

``--logs DIR`` names every process's log file. What the engines are is not
taken from ``--engine``: the flow asks them (:mod:`servekit.verify.identity`),
refuses an ``--engine`` they contradict, and :func:`with_identity` records
what they said. A simulated target's speed is read from an engine's
``/sim/state`` when an engine is reachable.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servekit.catalog import NOT_OBSERVED, Layout
from servekit.deployment import Deployment
from servekit.errors import UsageError
from servekit.render import Plan, build_plan
from servekit.verify.cluster import (
    Fetch,
    RelayMismatch,
    attached_hosts,
    cluster_deployment,
    parse_nodes,
    relay_deployment,
    single_entry_nodes,
)
from servekit.verify.components import Attacher
from servekit.verify.identity import Identity, fetch_text
from servekit.verify.options import VerifyOptions
from servekit.vocabulary import ROLES, check_url, is_url


def check_attach_inputs(opts: VerifyOptions, layout: Layout) -> None:
    """Bad combinations of --target, --nodes, --logs and --speed, before anything runs."""
    if is_url(opts.target):
        check_url(str(opts.target))
    by = opts.attached_by()
    if by is not None:
        a = by.attach
        if opts.nodes is not None or not is_url(opts.target):
            raise UsageError(
                f"{a.flag}: give --target URL ({a.entry}) and no --nodes; {a.flag} names {a.what}"
            )
        attached_hosts(a, by.text, layout)
    if opts.nodes is not None:
        parse_nodes(opts.nodes, layout)
        if opts.target is not None and not is_url(opts.target):
            raise UsageError(
                f"--target {opts.target}: with --nodes give the entry URL (or no --target "
                "to use the Plan's entry on node 0)"
            )
    if opts.logs is not None and not opts.logs.is_dir():
        raise UsageError(
            f"--logs {opts.logs}: no such folder; give the folder run.sh's LOG_DIR wrote"
        )
    if opts.reference is not None:
        if not is_url(opts.reference):
            raise UsageError(
                f"--reference {opts.reference}: give a URL such as http://10.0.0.9:8080"
            )
        check_url(opts.reference, "--reference")
    if opts.reference is not None and not opts.attached:
        raise UsageError("--reference: only with --target or --nodes (up starts the reference)")
    if opts.logs is not None and not opts.attached:
        raise UsageError(
            "--logs: only with --target or --nodes (runs started here keep their logs)"
        )
    if opts.engine != "sim" and (opts.speed is not None or opts.bench_speed is not None):
        raise UsageError(
            "--speed/--bench-speed: only simulated engines have a speed; add --engine sim"
        )


def attach_deployment(
    opts: VerifyOptions,
    layout: Layout,
    attach: Attacher,
    fetch: Fetch = fetch_text,
    old_names: Sequence[str] = (),
) -> Deployment:
    """The deployment this run attaches to (see the module docstring for each case).

    ``old_names`` are the layout's aliases (``aliases.yaml``): a deployment.json
    written under one of them is a deployment of this layout.
    """
    engine: Any = "external"  # what they are is asked of the engines, never assumed
    plan = build_plan(layout)
    by = opts.attached_by()
    if by is not None:
        hosts = attached_hosts(by.attach, by.text, layout, plan)
        dep = cluster_deployment(
            layout, (), entry=opts.target, logs=opts.logs, engine=engine, process_hosts=hosts,
            plan=plan,
        )  # fmt: skip
    elif opts.nodes is not None:
        nodes = parse_nodes(opts.nodes, layout)
        dep = cluster_deployment(
            layout, nodes, entry=opts.target, logs=opts.logs, engine=engine, plan=plan
        )
    else:
        assert opts.target is not None
        dep = attach(opts.target)
        if is_url(opts.target) and not dep.endpoints:
            dep = _behind_url(layout, plan, opts.target, fetch, logs=opts.logs, engine=engine)
        else:
            dep = _filled(dep, layout, plan, opts.logs, old_names)
    if opts.reference is not None:
        dep = dep.model_copy(update={"reference_url": opts.reference.rstrip("/")})
    return dep


def _behind_url(
    layout: Layout, plan: Plan, target: str, fetch: Fetch, *, logs: Path | None, engine: Any
) -> Deployment:
    if layout.proxy is not None:
        try:
            return relay_deployment(layout, target, fetch, logs=logs, engine=engine, plan=plan)
        except RelayMismatch as exc:
            raise RelayMismatch(
                f"{exc}; the engines behind {target} are unknown: pass --nodes IP,... "
                "(the nodes' addresses in rank order)"
            ) from None
    nodes = single_entry_nodes(layout, target, plan)
    if nodes is None:
        raise RelayMismatch(
            f"{layout.name} has API servers on several nodes and no proxy to list them: "
            "pass --nodes IP,... (the nodes' addresses in rank order)"
        )
    return cluster_deployment(layout, nodes, entry=target, logs=logs, engine=engine, plan=plan)


def _filled(
    dep: Deployment, layout: Layout, plan: Plan, logs: Path | None, old_names: Sequence[str] = ()
) -> Deployment:
    """A deployment.json (or a bare URL) with what the layout knows and it lacks."""
    if dep.layout is not None and dep.layout not in (layout.name, *old_names):
        raise UsageError(
            f"--target: that deployment runs {dep.layout}, not {layout.name}; "
            f"verify {dep.layout}, or give the deployment of {layout.name}"
        )
    update: dict[str, Any] = {"layout": layout.name}
    if not dep.capabilities:
        update["capabilities"] = tuple(layout.model.capabilities)
    if dep.model is None:
        update["model"] = layout.model.served_name
    if logs is not None:
        names = [p.name for p in plan.processes]
        update["process_logs"] = {n: logs / f"{n}.log" for n in names}
        update["endpoints"] = tuple(
            e.model_copy(update={"log": logs / f"{e.name}.log"}) for e in dep.endpoints
        )
    return dep.model_copy(update=update)


def check_engine_flag(flag: str | None, identity: Identity, where: str) -> None:
    """``--engine`` the engines contradict is refused (one line, exit 2)."""
    if flag is None or identity.kind in ("unconfirmed", flag):
        return
    said = "servekit's simulator" if identity.kind == "sim" else "real vLLM"
    raise UsageError(
        f"--engine {flag}: the engines behind {where} answer as {said} ({identity.why}); "
        f"drop --engine or pass --engine {identity.kind}"
    )


def with_identity(
    dep: Deployment, identity: Identity, opts: VerifyOptions, fetch: Fetch
) -> Deployment:
    """``dep`` as the engines said: their kind, reported versions and (observed) image."""
    image = None if identity.image == NOT_OBSERVED else identity.image
    update: dict[str, Any] = {"engine": identity.engine, "image": image}
    if identity.kind != "sim":
        update["sim_speed"] = None
    if identity.kind == "vllm":
        update["versions"] = {**dep.versions, **identity.versions}
    return with_speed(dep.model_copy(update=update), opts, fetch)


def with_speed(dep: Deployment, opts: VerifyOptions, fetch: Fetch) -> Deployment:
    """A simulated deployment's speed: its own record, an engine's /sim/state, else --speed."""
    if not dep.simulated or dep.sim_speed is not None:
        return dep
    speed = sim_speed_of(dep, fetch) if dep.direct else None
    speed = speed or opts.speed
    return dep.model_copy(update={"sim_speed": speed}) if speed else dep


def sim_speed_of(dep: Deployment, fetch: Fetch) -> float | None:
    """``launch.speed`` from the first engine's ``GET /sim/state`` (servekit sim serve)."""
    engines = [e for e in dep.endpoints if e.role in ROLES]
    if not engines:
        return None
    try:
        state = json.loads(fetch(f"{engines[0].url.rstrip('/')}/sim/state"))
    except (OSError, ValueError):
        return None
    launch = state.get("launch") if isinstance(state, dict) else None
    speed = launch.get("speed") if isinstance(launch, dict) else None
    return float(speed) if isinstance(speed, int | float) and speed > 0 else None


def describe(dep: Deployment) -> str:
    """The up step's line for an attached deployment."""
    engines = [e for e in dep.endpoints if e.role in ROLES]
    nodes = {e.node for e in dep.endpoints if e.node is not None}
    where = f" on {len(nodes)} node(s)" if nodes else ""
    how = (
        "engines reached directly"
        if dep.direct
        else "engines reached only through the proxy's /metrics/engines (no --nodes)"
    )
    if not engines:
        return f"attached to {dep.entry_url}"
    return f"attached to {dep.entry_url}: {len(engines)} engine endpoints{where}, {how}"
