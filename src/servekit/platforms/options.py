"""The options of ``servekit render``: one model for the CLI, the code and the docs."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from servekit.platforms.table import TargetName
from servekit.vocabulary import StrictModel


class RenderOptions(StrictModel):
    """What ``servekit render`` is asked."""

    name: str = Field(description="layout name, e.g. a3/1p1d")
    out: Path = Field(
        description="folder to write (a new or empty folder, or an earlier rendering)"
    )
    target: TargetName = Field(
        "modelarts",
        description="modelarts: one entry every node runs from the rank table; "
        "nodes: a bash folder per node (export NODE<i>_IP); "
        "k8s: LeaderWorkerSets, the proxy's Deployment and Service, kustomization.yaml",
    )
    k8s_kind: Literal["leaderworkerset", "disaggregatedset"] = Field(
        "leaderworkerset",
        description="k8s: one LeaderWorkerSet per engine group, or one DisaggregatedSet "
        "(LWS v0.9 or v0.10) with a role per group",
    )
    set: tuple[str, ...] = Field(
        (),
        description="override a field, e.g. engines.decode0.settings.max_num_seqs=64; "
        "k8s.KEY=VALUE for --target k8s, e.g. k8s.model=pvc:CLAIM or k8s.network=host "
        "(docs/kubernetes.md lists them) (repeatable)",
    )
    preflight: bool = Field(
        True,
        description="run the preflight on every node (pod) before the engines start: devices, "
        "NPU links, ports and model checked, the nodes compared (PREFLIGHT=0 skips it at launch)",
    )
    force: bool = Field(False, description="replace an --out folder that holds other files")
    catalog: Path | None = Field(
        None, description="catalog folder (default: SERVEKIT_CATALOG or the packaged catalog)"
    )
