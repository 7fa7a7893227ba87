"""A running Kubernetes deployment, named the way ``verify``/``deployment`` take it.

``--target URL --pods POD=ADDRESS,...``: the proxy's Service URL (or the entry
engine's) and each engine pod's address (``kubectl get pods -o wide``), pods
named as LWS names them (``sk-decode-0``, ``sk-decode-0-1``, ...; with
``--set k8s.prefix=prod`` at render time ``prod-decode-0``, ...). The prefix is
read from the names given: the one prefix that makes every name a pod of the
rendering. Every API process of the Plan is then reached at its pod's address on
its Plan port (an IPv6 pod address in brackets in its URL).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from servekit.errors import UsageError
from servekit.platforms.k8s.groups import engine_groups
from servekit.platforms.k8s.names import DNS1035
from servekit.render import Plan

PREFIX = "sk"


def rendered_prefix(names: Iterable[str], plan: Plan) -> str | None:
    """The ``k8s.prefix`` the pods named ``names`` were rendered with, if exactly one fits.

    Every pod name is ``<prefix>`` plus a suffix the Plan fixes (``-decode-0-1``);
    the rendering's prefix is the one left by some suffix on every name given.
    """
    suffixes = [pod.name for group in engine_groups(plan, "") for pod in group.pods]
    common: set[str] | None = None
    for name in names:
        found = {name[: -len(s)] for s in suffixes if name.endswith(s) and len(name) > len(s)}
        common = found if common is None else common & found
    fitting = {p for p in common or () if DNS1035.fullmatch(p)}
    return fitting.pop() if len(fitting) == 1 else None


def parse_pods(text: str, plan: Plan, prefix: str | None = None) -> dict[str, str]:
    """``POD=ADDRESS,...`` -> {pod: address}, every engine pod of the rendering named once.

    ``prefix``: the rendering's ``k8s.prefix``; by default read from the names given.
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    names = [part.partition("=")[0] for part in parts]
    prefix = prefix or rendered_prefix(names, plan) or PREFIX
    want = [pod.name for g in engine_groups(plan, prefix) for pod in g.pods]
    pods: dict[str, str] = {}
    for part in parts:
        name, sep, address = part.partition("=")
        if not sep or name not in want:
            raise UsageError(
                f"--pods {part!r}: give POD=ADDRESS for each engine pod of the rendering "
                f"({', '.join(want[:4])}{', ...' if len(want) > 4 else ''}; each name "
                f"starts with the k8s.prefix it was rendered with, {prefix!r} here)"
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


def process_hosts(plan: Plan, pods: dict[str, str], prefix: str | None = None) -> dict[str, str]:
    """Process name -> the address of the pod that runs it (engines only)."""
    prefix = prefix or rendered_prefix(pods, plan) or PREFIX
    return {
        p.name: pods[pod.name]
        for g in engine_groups(plan, prefix)
        for pod in g.pods
        for p in pod.processes
    }


def attach_pods(text: str, plan: Plan) -> dict[str, str]:
    """``--pods POD=IP,...`` -> process name -> its pod's address (the platform's attach)."""
    return process_hosts(plan, parse_pods(text, plan))
