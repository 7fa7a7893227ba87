"""LeaderWorkerSet's rolling update, as its controller decides it, for the fake cluster.

A LeaderWorkerSet's groups are the pods of one StatefulSet of leaders (one ordinal per
group index); the LWS controller drives that StatefulSet's ``replicas`` and rolling
``partition``, and the StatefulSet controller creates, deletes and replaces the pods.
The facts below are read from kubernetes-sigs/lws at 060ab4d (2026-08-21, v0.10 line),
``pkg/controllers/leaderworkerset_controller.go``, and Kubernetes'
``pkg/controller/statefulset/stateful_set_control.go``; this module states them in its
own terms, for :class:`servekit.platforms.k8s.fakelws.Elastic` to run against pods.

- **What starts a rollout** (``getUpdatedRevision``, ``revision_utils.getPatch``): a
  change of ``spec.leaderWorkerTemplate`` (or ``networkConfig``): a new revision, its
  hash in every pod's ``leaderworkerset.sigs.k8s.io/template-revision-hash`` label.
  ``replicas`` and ``rolloutStrategy`` are not part of it.
- **The strategy** (``RollingUpdateConfiguration``): ``maxUnavailable`` (default 1; a
  percentage of ``replicas`` rounded down) and ``maxSurge`` (default 0; rounded up,
  never above ``replicas``); both 0 is refused by LWS's webhook.
- **When the template changes** (``rollingUpdateParameters``, its "new rolling update"
  case): the partition is set to ``min(replicas, leader StatefulSet replicas)`` (no
  old group is touched yet) and the StatefulSet grows to ``replicas + maxSurge`` unless
  few enough groups need updating (:func:`surge_replicas`). The StatefulSet creates the
  new ordinals from the update revision: **the surge groups are the indexes
  ``replicas .. replicas + maxSurge - 1``, made with the new template from the start**.
- **Each step after** (``rollingUpdatePartition``): counting from the highest index
  down, the groups that are both ready and updated form the ready tail; the partition
  moves down to ``StatefulSet replicas - tail - step`` (at least 0), ``step`` being
  ``maxUnavailable + maxSurge`` minus the surge not (or no longer) there. So **old
  groups are replaced from the highest index down, only once as many new groups are
  ready above them**; with ``maxUnavailable: 0`` a replaced group is always covered by
  a ready new one. Groups below the partition that are not ready raise it again (never
  make more unavailable); groups just above it that are unready or already updated
  lower it (they cost nothing); it never moves up during a rollout.
- **The surge leaves** (``calculateRollingUpdateReplicas``): while more than
  ``maxSurge`` groups below ``replicas`` are unready or old, the StatefulSet keeps
  ``replicas + maxSurge``; once at most ``maxSurge`` are, it keeps ``replicas +
  max(0, those - maxUnavailable)``: with ``maxUnavailable: 0`` the last surge group is
  removed when the last old group's replacement is ready, not before.
- **Done** when the partition is 0 and the StatefulSet's replicas equal the LWS's;
  ``replicas`` changed mid-rollout keeps the partition at most ``replicas + maxSurge``.
- **Group state** (``getReplicaStates``): a group is ready when its leader pod is
  Running and Ready and its workers' StatefulSet is ready (a terminating pod that is
  still Ready counts); updated when leader and workers carry the update revision.
- **The StatefulSet controller** (``updateStatefulSet``; LWS runs it with
  ``podManagementPolicy: Parallel`` and ``maxUnavailable = maxUnavailable + maxSurge``
  (at least 1), ``constructLeaderStatefulSetApplyConfiguration``): every missing
  ordinal below its replicas is created at once (the current revision below the
  partition, the update revision from it up); every pod at or above its replicas is
  deleted at once; then, if no more pods are unavailable than its ``maxUnavailable``
  (missing, unready or terminating ones count; Kubernetes 1.35 turns
  ``MaxUnavailableStatefulSet`` on), it deletes old-revision pods at or above the
  partition, the highest ordinal first, up to ``maxUnavailable`` minus the unavailable.
  A deleted ordinal is made again once its pod is gone, from the revision its place
  gives (the update revision at or above the partition).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

REVISION_LABEL = "leaderworkerset.sigs.k8s.io/template-revision-hash"


def revision(spec: dict[str, Any]) -> str:
    """The revision key of a LeaderWorkerSet spec: what its template and network config hash to."""
    patch = {
        "leaderWorkerTemplate": spec.get("leaderWorkerTemplate", {}),
        "networkConfig": spec.get("networkConfig", {"subdomainPolicy": "Shared"}),
    }
    return hashlib.sha256(json.dumps(patch, sort_keys=True).encode()).hexdigest()[:10]


def scaled(value: int | str, total: int, round_up: bool) -> int:
    """An int-or-percent of ``total`` (Kubernetes' ``GetScaledValueFromIntOrPercent``)."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not text.endswith("%") or not text[:-1].isdigit():
        raise ValueError(f"{value!r} is neither a count nor a percentage")
    exact = int(text[:-1]) * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


@dataclass(frozen=True)
class Strategy:
    """A LeaderWorkerSet's ``rolloutStrategy.rollingUpdateConfiguration``."""

    max_unavailable: int | str = 1
    max_surge: int | str = 0
    partition: int = 0

    @classmethod
    def of(cls, spec: dict[str, Any]) -> Strategy:
        config = (spec.get("rolloutStrategy") or {}).get("rollingUpdateConfiguration") or {}
        return cls(
            config.get("maxUnavailable", 1), config.get("maxSurge", 0), config.get("partition", 0)
        )

    def counts(self, replicas: int) -> tuple[int, int]:
        """(maxUnavailable, maxSurge) as counts for ``replicas`` groups."""
        surge = min(scaled(self.max_surge, replicas, round_up=True), replicas)
        return scaled(self.max_unavailable, replicas, round_up=False), surge

    def statefulset_max_unavailable(self, replicas: int) -> int:
        unavailable, surge = self.counts(replicas)
        return max(1, unavailable + surge)


@dataclass(frozen=True)
class GroupState:
    """One group index as the LWS controller sees it."""

    ready: bool
    updated: bool


@dataclass
class LeaderSet:
    """The leaders' StatefulSet as the LWS controller writes it."""

    replicas: int
    partition: int
    replicas_annotation: int
    """The LWS's ``replicas`` when it last wrote this StatefulSet."""


def surge_replicas(replicas: int, strategy: Strategy, not_done: int) -> int:
    """The StatefulSet's replicas while ``not_done`` groups below ``replicas`` are unready
    or old: all the surge while more than ``maxSurge`` are, then only what covers those
    beyond ``maxUnavailable``."""
    unavailable, surge = strategy.counts(replicas)
    if not_done <= surge:
        return replicas + max(0, not_done - unavailable)
    return replicas + surge


def not_done(states: list[GroupState], replicas: int) -> int:
    """Groups below ``replicas`` that are missing, unready or not yet updated."""
    return sum(
        1
        for i in range(replicas)
        if i >= len(states) or not (states[i].ready and states[i].updated)
    )


def _partition(states: list[GroupState], sts_replicas: int, step: int, current: int) -> int:
    tail = 0
    for state in reversed(states):
        if not (state.ready and state.updated):
            break
        tail += 1
    floor = max(0, sts_replicas - tail - step)
    partition = floor + sum(1 for s in states[:floor] if not s.ready)
    for i in range(min(partition, sts_replicas - 1), floor - 1, -1):
        if states[i].ready and not states[i].updated:
            break
        partition = i
    return min(partition, current)


def rolling_update(
    replicas: int,
    strategy: Strategy,
    sts: LeaderSet,
    states: list[GroupState],
    template_changed: bool,
) -> tuple[int, int]:
    """The leader StatefulSet's (partition, replicas) after one reconcile of the LWS.

    ``states``: one per ordinal below ``sts.replicas``; ``template_changed``: the
    template differs from the revision the StatefulSet was last written with.
    """
    partition, sts_replicas = _rolling_update(replicas, strategy, sts, states, template_changed)
    return max(partition, strategy.partition), sts_replicas


def _rolling_update(
    replicas: int,
    strategy: Strategy,
    sts: LeaderSet,
    states: list[GroupState],
    template_changed: bool,
) -> tuple[int, int]:
    unavailable, surge = strategy.counts(replicas)
    burst = replicas + surge
    if template_changed:  # a new rollout: scale first, touch no old group yet
        partition = min(replicas, sts.replicas)
        if sts.replicas < replicas:
            return partition, replicas
        return partition, surge_replicas(replicas, strategy, replicas)
    if sts.partition == 0 and sts.replicas == replicas:
        return 0, replicas  # at rest
    if sts.replicas < replicas:
        return sts.partition, replicas
    left = not_done(states, replicas)
    if sts.replicas_annotation != replicas:  # replicas changed during the rollout
        return min(sts.partition, burst), surge_replicas(replicas, strategy, left)
    step = unavailable + surge - (burst - sts.replicas)
    partition = _partition(states, sts.replicas, step, sts.partition)
    return partition, surge_replicas(replicas, strategy, left)


@dataclass(frozen=True)
class PodState:
    """One ordinal's pod as the StatefulSet controller sees it."""

    revision: str
    ready: bool
    terminating: bool


def statefulset_step(
    pods: dict[int, PodState],
    *,
    replicas: int,
    partition: int,
    max_unavailable: int,
    current: str,
    update: str,
) -> tuple[dict[int, str], list[int]]:
    """What the StatefulSet controller does in one pass: the ordinals it creates (each
    with its revision) and the ordinals whose pods it deletes."""
    create = {i: (update if i >= partition else current) for i in range(replicas) if i not in pods}
    delete = sorted((i for i, p in pods.items() if i >= replicas and not p.terminating),
                    reverse=True)  # fmt: skip
    down = sum(1 for i in range(replicas)
               if i not in pods or not pods[i].ready or pods[i].terminating)  # fmt: skip
    if down > max_unavailable:
        return create, delete
    room = max_unavailable - down
    for i in range(replicas - 1, partition - 1, -1):
        if room <= 0:
            break
        pod = pods.get(i)
        if pod is not None and pod.revision != update and not pod.terminating:
            delete.append(i)
            room -= 1
    return create, delete
