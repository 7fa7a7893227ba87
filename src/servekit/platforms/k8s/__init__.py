"""Kubernetes: LeaderWorkerSets (or one DisaggregatedSet), the proxy, kustomize.

See docs/kubernetes.md. :data:`PLATFORM` is this folder's row of the platform
table: :func:`render`, how its files start (:mod:`.start`), its ``--k8s-kind``
flag (:mod:`.flags`) and ``--set k8s.*`` settings (:mod:`.settings`), the
summary it prints (``k8s.md``), its attach (``--pods``, :mod:`.attach`) and its
dry-run cluster (:mod:`.fake`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servekit.platforms.k8s.entry import render
from servekit.platforms.k8s.flags import K8sFlags
from servekit.platforms.k8s.settings import NAMES as SETTINGS
from servekit.platforms.k8s.start import start
from servekit.platforms.platform import Attach, Platform

if TYPE_CHECKING:
    from servekit.platforms.fake import DryCluster, NodeOutcome
    from servekit.render import Plan


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


def attach_hosts(text: str, plan: Plan) -> dict[str, str]:
    from servekit.platforms.k8s.attach import attach_pods

    return attach_pods(text, plan)


@contextmanager
def fake(name: str, **kwargs: Any) -> Iterator[DryCluster]:
    from servekit.platforms.k8s.fake import k8s_dry_cluster

    with k8s_dry_cluster(name, **kwargs) as cluster:
        yield cluster


def refused(name: str, *args: Any, **kwargs: Any) -> list[NodeOutcome]:
    from servekit.platforms.k8s.fake import k8s_refused

    return k8s_refused(name, *args, **kwargs)


PLATFORM = Platform(
    name="k8s",
    describe="LeaderWorkerSets, the proxy's Deployment and Service, kustomization.yaml",
    where="Kubernetes",
    render=render,
    start=start,
    settings=SETTINGS,
    set_examples=("k8s.model=pvc:CLAIM", "k8s.network=host"),
    settings_page="docs/kubernetes.md",
    flags=K8sFlags,
    summary="k8s.md",
    attach=Attach(
        field="pods",
        example="POD=IP,...",
        what="each engine pod's address",
        entry="the proxy Service's URL",
        hosts=attach_hosts,
    ),
    requirements=k8s_requirements,
    fake=fake,
    refused=refused,
)
