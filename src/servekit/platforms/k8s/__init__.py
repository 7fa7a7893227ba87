"""Kubernetes: LeaderWorkerSets (or one DisaggregatedSet), the proxy, kustomize.

See docs/kubernetes.md. :func:`render` is the platform table's entry; the
dry-run cluster is :mod:`servekit.platforms.k8s.fake`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, get_args

from servekit.errors import UsageError
from servekit.vocabulary import PD_ROLES

if TYPE_CHECKING:
    from servekit.platforms.request import Files, RenderRequest


def render(req: RenderRequest) -> Files:
    from servekit.platforms.k8s.build import ACCELERATORS, K8sKind, K8sOptions, render_k8s
    from servekit.render import bundle_files

    if req.layout is None:
        raise ValueError("a Kubernetes rendering needs the layout (its hardware)")
    kind = req.settings.get("kind", "leaderworkerset")
    kinds: tuple[K8sKind, ...] = get_args(K8sKind)
    chosen = next((k for k in kinds if k == kind), None)
    if chosen is None:
        raise UsageError(f"--k8s-kind {kind!r}: choose one of {', '.join(kinds)}")
    accelerator = req.settings.get("accelerator", ACCELERATORS[req.layout.hardware.accelerator])
    opts = K8sOptions(
        accelerator=accelerator or None, kind=chosen, prefix=req.settings.get("prefix", "sk")
    )
    roles = {p.role for p in req.plan.processes}
    if chosen == "disaggregatedset" and not set(PD_ROLES) <= roles:
        raise UsageError(
            f"--k8s-kind disaggregatedset: {req.layout.name} has no prefill/decode proxy; "
            "render it as leaderworkerset"
        )
    files = render_k8s(req.plan, req.layout, opts, bundle_files())
    files["plan.json"] = req.plan.model_dump_json(indent=2) + "\n"
    return files


def k8s_requirements(name: str, catalog: Path | None = None) -> list[str]:
    """What a layout's pods need from a Kubernetes cluster, one line each with its reason."""
    from servekit.catalog import load
    from servekit.platforms.k8s.build import ACCELERATORS, K8sOptions, decide
    from servekit.render import build_plan

    layout = load(name, catalog).layout
    opts = K8sOptions(accelerator=ACCELERATORS[layout.hardware.accelerator])
    r = decide(build_plan(layout), layout, opts)
    lines = [
        f"kubernetes: {g.name} replicas {g.replicas} x size {g.size}, "
        f"{len(g.leader().devices)} x {opts.accelerator or 'no accelerator'} per pod"
        for g in r.groups
    ]
    lines += [f"kubernetes requirement {req.line()}" for req in r.requirements]
    if not r.requirements:
        lines.append("kubernetes requirement: none (no hostNetwork, hostIPC or privileges)")
    return lines
