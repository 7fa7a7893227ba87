"""Every name a Kubernetes rendering makes, checked against the rule its kind must follow.

``--set k8s.prefix=NAME`` is the only free text in the objects' names: the ConfigMaps
(``NAME-scripts``), the proxy's Service and Deployment (``NAME-proxy``), one
LeaderWorkerSet per engine group (``NAME-decode``), or one DisaggregatedSet (``NAME``)
whose controller makes a LeaderWorkerSet per role, and the pods and Services those
create. :mod:`.settings` takes the prefix as a short DNS label; this checks what is
derived from it for this layout: Kubernetes refuses a Service name that is not a
DNS-1035 label (at most 63 characters), and a StatefulSet's pods carry the label
``controller-revision-hash: <statefulset>-<10 characters>`` (at most 63), so a
LeaderWorkerSet's name must leave room for its worker StatefulSets'
(``<lws>-<group index>``) and that hash. A DisaggregatedSet's child LeaderWorkerSet is
``<set>-<slice>-<revision, 8 characters>-<role>`` and its webhook applies the same
budget (kubernetes-sigs/lws, ``pkg/webhooks/disaggregatedset``,
``validateGeneratedNames``). A name over its bound is refused in one line naming it and
the longest prefix that fits the layout; the values reach ``pod.sh`` only quoted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from servekit.errors import UsageError
from servekit.platforms.k8s.groups import Group

LABEL_MAX = 63
SUBDOMAIN_MAX = 253
DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
REVISION_LABEL = 11
"""``-`` and the 10-character hash a StatefulSet appends in its pods' revision label."""
DS_REVISION = 8
DS_SLICE_DIGITS = 1  # the rendering asks for one slice: index 0
DS_PRIVATE_SERVICE = len("-prv")


@dataclass(frozen=True)
class Name:
    """One name the rendering writes (or makes Kubernetes write), and what bounds it."""

    what: str
    text: str
    room: int
    """Characters Kubernetes adds after it (a hash, an index) within ``limit``."""
    limit: int = LABEL_MAX
    shown: str = ""
    """How a message writes it, when a part is Kubernetes' to choose (a revision hash)."""

    @property
    def fits(self) -> bool:
        return len(self.text) + self.room <= self.limit


def _shown(value: str) -> str:
    return value if value.isprintable() and len(value) <= 80 else repr(value[:80])


def _digits(count: int) -> int:
    return len(str(max(count - 1, 0)))


def _group_names(group: Group, prefix: str, kind: str) -> list[Name]:
    if kind == "disaggregatedset":
        role = group.name.removeprefix(prefix + "-")
        child = "-".join([prefix, "0" * DS_SLICE_DIGITS, "r" * DS_REVISION, role])
        room = max(DS_PRIVATE_SERVICE, 1 + _digits(group.replicas) + REVISION_LABEL)
        shown = f"{prefix}-0-<revision>-{role}"
        what = f"the DisaggregatedSet's LeaderWorkerSet of role {role}"
        names = [Name(what, child, room, shown=shown)]
        names += [Name("the engine pod's Service", pod.name, 0) for pod in group.pods]
        return names
    room = REVISION_LABEL + (1 + _digits(group.replicas) if group.size > 1 else 0)
    return [Name("the LeaderWorkerSet", group.name, room)]


def written_names(groups: tuple[Group, ...], prefix: str, kind: str) -> list[Name]:
    """Every name the rendering writes or makes Kubernetes derive, with its bound."""
    names = [
        Name("the engines' bundle ConfigMap", f"{prefix}-bundle", 0, SUBDOMAIN_MAX),
        Name("the proxy's ConfigMap", f"{prefix}-proxy-scripts", 0, SUBDOMAIN_MAX),
        Name("the proxy's Service", f"{prefix}-proxy", 0),
        Name("the app.kubernetes.io/instance label", prefix, 0),
    ]
    names += [Name("a group's ConfigMap", f"{g.name}-scripts", 0, SUBDOMAIN_MAX) for g in groups]
    if kind == "disaggregatedset":
        names.append(Name("the DisaggregatedSet", prefix, 0))
    for group in groups:
        names += _group_names(group, prefix, kind)
    return names


def check_names(groups: tuple[Group, ...], prefix: str, kind: str) -> None:
    """Refuse (one line) a prefix that makes any name longer than Kubernetes allows."""
    names = written_names(groups, prefix, kind)
    over = [n for n in names if not n.fits]
    if not over:
        return
    worst = over[0]
    longest = min(n.limit - n.room - (len(n.text) - len(prefix)) for n in names)
    added = f" plus {worst.room} characters Kubernetes adds" if worst.room else ""
    raise UsageError(
        f"--set k8s.prefix={_shown(prefix)}: {worst.what} would be "
        f"{(worst.shown or worst.text)[:90]!r} "
        f"({len(worst.text)} characters{added}; Kubernetes allows {worst.limit}); "
        f"use a prefix of at most {max(longest, 1)} characters for this layout"
    )
