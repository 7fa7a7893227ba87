"""A running Kubernetes deployment, named the way ``verify``/``deployment`` take it.

``--target URL --pods POD=ADDRESS,...``: the proxy's Service URL (or the entry
engine's) and each engine pod's address (``kubectl get pods -o wide``), pods
named as LWS names them (``sk-decode-0``, ``sk-decode-0-1``, ...). Every API
process of the Plan is then reached at its pod's address on its Plan port.
"""

from __future__ import annotations

import ipaddress

from servekit.errors import UsageError
from servekit.platforms.k8s.groups import engine_groups
from servekit.render import Plan

PREFIX = "sk"


def parse_pods(text: str, plan: Plan, prefix: str = PREFIX) -> dict[str, str]:
    """``POD=ADDRESS,...`` -> {pod: address}, every engine pod of the rendering named once."""
    want = [pod.name for g in engine_groups(plan, prefix) for pod in g.pods]
    pods: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, address = part.partition("=")
        if not sep or name not in want:
            raise UsageError(
                f"--pods {part!r}: give POD=ADDRESS for each engine pod of the rendering "
                f"({', '.join(want[:4])}{', ...' if len(want) > 4 else ''})"
            )
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise UsageError(f"--pods {part!r}: {address!r} is not an IP address") from None
        if name in pods:
            raise UsageError(f"--pods: {name} is given twice")
        pods[name] = address
    missing = [n for n in want if n not in pods]
    if missing:
        raise UsageError(f"--pods: no address for {', '.join(missing[:4])}; give every engine pod")
    return pods


def process_hosts(plan: Plan, pods: dict[str, str], prefix: str = PREFIX) -> dict[str, str]:
    """Process name -> the address of the pod that runs it (engines only)."""
    return {
        p.name: pods[pod.name]
        for g in engine_groups(plan, prefix)
        for pod in g.pods
        for p in pod.processes
    }
