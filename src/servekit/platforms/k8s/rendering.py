"""What one Kubernetes rendering decided: the groups, the pods' processes, the host access.

A leaf of the k8s folder, so the pod templates (:mod:`.podspec`) and the manifests
(:mod:`.build`) both read it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from servekit.catalog import Layout
from servekit.platforms.k8s.groups import Group
from servekit.platforms.k8s.settings import K8sSettings
from servekit.platforms.k8s.wiring import Change
from servekit.render import Plan, ProcessPlan

Level = Literal["baseline", "privileged"]


@dataclass(frozen=True)
class Requirement:
    """Host access the pods are given, why, the Pod Security level it needs, and the way out."""

    field: str
    groups: tuple[str, ...]
    reason: str
    level: Level
    instead: str

    def line(self) -> str:
        return (
            f"{self.field} on {', '.join(self.groups)} ({self.level}): {self.reason}; "
            f"instead: {self.instead}"
        )


@dataclass
class K8sRendering:
    """Everything one rendering decided, for the files and the summary."""

    plan: Plan
    layout: Layout
    options: K8sSettings
    groups: tuple[Group, ...]
    processes: dict[str, ProcessPlan]
    changes: list[Change]
    host_network_groups: tuple[str, ...] = ()
    rdma_groups: tuple[str, ...] = ()
    requirements: list[Requirement] = field(default_factory=list)

    def labels(self, role: str) -> dict[str, str]:
        return {
            "app.kubernetes.io/name": "servekit",
            "app.kubernetes.io/instance": self.options.prefix,
            "app.kubernetes.io/component": role,
        }

    @property
    def proxy(self) -> ProcessPlan | None:
        return next((p for p in self.plan.processes if p.kind == "proxy"), None)

    @property
    def level(self) -> Level:
        """The Pod Security Standards level the namespace must allow for these pods."""
        return (
            "privileged" if any(q.level == "privileged" for q in self.requirements) else "baseline"
        )
