"""The render targets, spelled once: name -> how a Plan becomes that platform's files.

A fourth platform (Slurm, Volcano) is one folder beside ``modelarts/``, ``nodes/``
and ``k8s/`` with a ``render`` function, and one row here; ``TargetName`` is the
CLI's choice list (tests/platforms checks the two agree).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from servekit.catalog import Layout
from servekit.platforms.k8s.settings import NAMES as K8S_SETTINGS
from servekit.platforms.request import Files, RenderRequest
from servekit.render import Plan

TargetName = Literal["modelarts", "nodes", "k8s"]


@dataclass(frozen=True)
class Platform:
    describe: str
    render: Callable[[RenderRequest], Files]
    settings: tuple[str, ...] = ()


def _modelarts(req: RenderRequest) -> Files:
    from servekit.platforms.modelarts import render

    return render(req)


def _nodes(req: RenderRequest) -> Files:
    from servekit.platforms.nodes import render

    return render(req)


def _k8s(req: RenderRequest) -> Files:
    from servekit.platforms.k8s import render

    return render(req)


PLATFORMS: dict[TargetName, Platform] = {
    "modelarts": Platform("one entry every node runs from the rank table", _modelarts),
    "nodes": Platform("a bash folder per node (export NODE<i>_IP)", _nodes),
    "k8s": Platform(
        "Kubernetes manifests: a LeaderWorkerSet per engine group, the proxy's Deployment "
        "and Service, kustomization.yaml",
        _k8s,
        settings=K8S_SETTINGS,
    ),
}
TARGETS: tuple[TargetName, ...] = get_args(TargetName)


def render_files(
    plan: Plan,
    target: TargetName = "modelarts",
    layout: Layout | None = None,
    settings: dict[str, str] | None = None,
    *,
    preflight: bool = True,
) -> Files:
    """Every rendered file of a Plan for one platform, by relative path (pure)."""
    return PLATFORMS[target].render(RenderRequest(plan, layout, settings or {}, preflight))


def write_rendering(
    plan: Plan,
    out: Path,
    target: TargetName = "modelarts",
    *,
    force: bool = False,
    preflight: bool = True,
) -> list[Path]:
    """Write one platform's rendering to ``out`` atomically (whole or not at all)."""
    from servekit.render import write_files

    return write_files(render_files(plan, target, preflight=preflight), out, force=force)
