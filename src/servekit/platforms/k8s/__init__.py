"""Kubernetes: LeaderWorkerSets (or one DisaggregatedSet), the proxy, kustomize.

See docs/kubernetes.md. :func:`render` is the platform table's entry; the
dry-run cluster is :mod:`servekit.platforms.k8s.fake`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from servekit.errors import UsageError
from servekit.vocabulary import PD_ROLES

if TYPE_CHECKING:
    from servekit.platforms.request import Files, RenderRequest


def render(req: RenderRequest) -> Files:
    from servekit.platforms.k8s.build import render_k8s
    from servekit.platforms.k8s.groups import engine_groups
    from servekit.platforms.k8s.names import check_names
    from servekit.platforms.k8s.settings import parse_settings
    from servekit.render import bundle_files

    if req.layout is None:
        raise ValueError("a Kubernetes rendering needs the layout (its hardware)")
    opts = replace(parse_settings(req.settings, req.layout), preflight=req.preflight)
    check_names(engine_groups(req.plan, opts.prefix), opts.prefix, opts.kind)
    roles = {p.role for p in req.plan.processes}
    if opts.kind == "disaggregatedset" and not set(PD_ROLES) <= roles:
        raise UsageError(
            f"--k8s-kind disaggregatedset: {req.layout.name} has no prefill/decode proxy; "
            "render it as leaderworkerset"
        )
    files = render_k8s(req.plan, req.layout, opts, bundle_files())
    files["plan.json"] = req.plan.model_dump_json(indent=2) + "\n"
    return files


def k8s_requirements(name: str, catalog: Path | None = None) -> list[str]:
    """What a layout's pods need from a Kubernetes cluster by default, one line each with its reason."""
    from servekit.catalog import load
    from servekit.platforms.k8s.build import decide
    from servekit.platforms.k8s.settings import parse_settings
    from servekit.render import build_plan

    layout = load(name, catalog).layout
    opts = parse_settings({}, layout)
    r = decide(build_plan(layout), layout, opts)
    lines = [
        f"kubernetes: {g.name} replicas {g.replicas} x size {g.size}, "
        f"{len(g.leader().devices)} x {opts.accelerator or 'no accelerator'} per pod"
        for g in r.groups
    ]
    lines.append(f"kubernetes pod security: the {r.level} level (with the default k8s settings)")
    lines += [f"kubernetes requirement {req.line()}" for req in r.requirements]
    return lines
