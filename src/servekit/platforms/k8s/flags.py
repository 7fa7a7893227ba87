"""``servekit render --target k8s``'s own flags: a field per flag, ``k8s_<setting>``.

The render command's options model takes these fields from the platform table
(:mod:`servekit.platforms.options`), so the flag, its help and its docs row are
this model's; given with another ``--target`` it is refused.
"""

from __future__ import annotations

from pydantic import Field

from servekit.platforms.k8s.settings import K8sKind
from servekit.vocabulary import StrictModel


class K8sFlags(StrictModel):
    k8s_kind: K8sKind = Field(
        "leaderworkerset",
        description="k8s: one LeaderWorkerSet per engine group, or one DisaggregatedSet "
        "(LWS v0.9 or v0.10) with a role per group",
    )
