"""Every catalog layout rendered for Kubernetes once per test process (shared by the tests)."""

from __future__ import annotations

import functools
from typing import Any

import yaml

from servekit.catalog import load_all
from servekit.platforms import PLATFORMS, RenderRequest
from servekit.platforms.k8s.build import K8sOptions, K8sRendering, decide
from servekit.platforms.k8s.groups import engine_groups
from servekit.render import Plan, build_plan

CATALOG = {loaded.layout.name: loaded.layout for loaded in load_all()}
LAYOUTS = tuple(sorted(CATALOG))
PD_LAYOUTS = tuple(
    n for n in LAYOUTS if {"prefill", "decode"} <= {e.role for e in CATALOG[n].engines}
)


@functools.cache
def files(name: str, kind: str = "leaderworkerset") -> dict[str, str | bytes]:
    """The platform table's k8s renderer on the catalog read once (the CLI path is
    tests/platforms/test_k8s_render.py's)."""
    layout = CATALOG[name]
    req = RenderRequest(plan=plan(name), layout=layout, settings={"kind": kind})
    return PLATFORMS["k8s"].render(req)


@functools.cache
def plan(name: str) -> Plan:
    return build_plan(CATALOG[name])


@functools.cache
def _objects(name: str, kind: str) -> tuple[dict[str, Any], ...]:
    return tuple(_parse(name, kind))


def objects(name: str, kind: str = "leaderworkerset") -> list[dict[str, Any]]:
    """The rendered objects (parsed once; callers that change one deep-copy it first)."""
    return list(_objects(name, kind))


def _parse(name: str, kind: str = "leaderworkerset") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path, text in files(name, kind).items():
        if path.endswith(".yaml") and path != "kustomization.yaml":
            assert isinstance(text, str)
            out += [o for o in yaml.load_all(text, Loader=yaml.CSafeLoader) if o]
    return out


@functools.cache
def rendering(name: str) -> K8sRendering:
    return decide(plan(name), CATALOG[name], K8sOptions(accelerator="x.io/dev"))


__all__ = ["LAYOUTS", "PD_LAYOUTS", "engine_groups", "files", "objects", "plan", "rendering"]
