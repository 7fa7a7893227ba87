"""The Kubernetes renderer: the platform table's entry (the row in ``__init__.py``)."""

from __future__ import annotations

from dataclasses import replace
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
