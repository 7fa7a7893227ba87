"""How a Kubernetes rendering is started: ``kubectl apply -k``, after k8s.md's requirements."""

from __future__ import annotations

from servekit.platforms.platform import Start
from servekit.render import Plan


def start(plan: Plan, out: str) -> Start:
    return Start(
        f"Kubernetes: LeaderWorkerSets and the proxy; {out}/k8s.md lists what the cluster needs",
        (f"kubectl apply -k {out}   # after setting the image and namespace in an overlay",),
        ("kustomization.yaml", "k8s.md"),
    )
