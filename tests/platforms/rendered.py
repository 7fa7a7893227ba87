"""Every catalog layout rendered for Kubernetes once per test process (shared by the tests)."""

from __future__ import annotations

import functools
from typing import Any

import yaml

from servekit.catalog import load_all
from servekit.platforms import PLATFORMS, RenderRequest
from servekit.platforms.k8s.build import K8sRendering, decide
from servekit.platforms.k8s.groups import engine_groups
from servekit.platforms.k8s.settings import parse_settings
from servekit.render import Plan, build_plan

CATALOG = {loaded.layout.name: loaded.layout for loaded in load_all()}
LAYOUTS = tuple(sorted(CATALOG))
PD_LAYOUTS = tuple(
    n for n in LAYOUTS if {"prefill", "decode"} <= {e.role for e in CATALOG[n].engines}
)


EVERYTHING: tuple[tuple[str, str], ...] = (
    ("model", "hf:zai-org/GLM-5.1@main"),
    ("model_cache", "pvc:models/glm"),
    ("model_secret", "hf-token"),
    ("model_endpoint", "https://hf-mirror.example.com"),
    ("network", "host"),
    ("host_files", "off"),
    ("gang", "volcano"),
    ("volcano_queue", "serving"),
    ("exclusive_topology", "kubernetes.io/hostname"),
    ("node_selector", "node.kubernetes.io/instance-type=a3"),
    ("tolerations", "huawei.com/ascend-1980:NoSchedule,dedicated=serving:NoExecute"),
    ("image_pull_secrets", "registry"),
    ("podmonitor", "on"),
    ("cpu", "96"),
    ("memory", "800Gi"),
    ("shm", "64Gi"),
)
"""Every k8s option at once, away from its default (for the Ascend layouts)."""


@functools.cache
def files(
    name: str, kind: str = "leaderworkerset", settings: tuple[tuple[str, str], ...] = ()
) -> dict[str, str | bytes]:
    """The platform table's k8s renderer on the catalog read once (the CLI path is
    tests/platforms/test_k8s_render.py's); ``settings``: ``k8s.*`` options as pairs."""
    layout = CATALOG[name]
    req = RenderRequest(plan=plan(name), layout=layout, settings={"kind": kind, **dict(settings)})
    return PLATFORMS["k8s"].render(req)


@functools.cache
def plan(name: str) -> Plan:
    return build_plan(CATALOG[name])


@functools.cache
def _objects(
    name: str, kind: str, settings: tuple[tuple[str, str], ...]
) -> tuple[dict[str, Any], ...]:
    return tuple(_parse(name, kind, settings))


def objects(
    name: str, kind: str = "leaderworkerset", settings: tuple[tuple[str, str], ...] = ()
) -> list[dict[str, Any]]:
    """The rendered objects (parsed once; callers that change one deep-copy it first)."""
    return list(_objects(name, kind, settings))


def _parse(
    name: str, kind: str = "leaderworkerset", settings: tuple[tuple[str, str], ...] = ()
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path, text in files(name, kind, settings).items():
        if path.endswith(".yaml") and path != "kustomization.yaml":
            assert isinstance(text, str)
            out += [o for o in yaml.load_all(text, Loader=yaml.CSafeLoader) if o]
    return out


@functools.cache
def rendering(name: str) -> K8sRendering:
    layout = CATALOG[name]
    return decide(plan(name), layout, parse_settings({"accelerator": "x.io/dev"}, layout))


__all__ = [
    "EVERYTHING",
    "LAYOUTS",
    "PD_LAYOUTS",
    "engine_groups",
    "files",
    "objects",
    "plan",
    "rendering",
]
