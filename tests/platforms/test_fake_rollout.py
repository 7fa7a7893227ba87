"""The fake cluster's LeaderWorkerSet rolling update (``fakerollout``) decides as LWS does.

The cases are the LWS controller's own (kubernetes-sigs/lws 060ab4d,
``leaderworkerset_controller_test.go``, and the rollout-strategy page's table), as
facts: inputs and the partition and replicas LWS answers. A model of the two
controllers over pods that become Ready in any order then shows the guarantees a
strategy gives: never fewer serving groups than ``replicas - maxUnavailable``, surge
groups only at the indexes above ``replicas``, old groups replaced from the highest
index down, and the rollout ending at ``replicas`` groups of the new revision.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings, strategies as st

from servekit.platforms.k8s.fakerollout import (
    GroupState,
    LeaderSet,
    PodState,
    Strategy,
    revision,
    rolling_update,
    scaled,
    statefulset_step,
    surge_replicas,
)


@pytest.mark.parametrize(
    ("replicas", "surge", "unavailable", "not_done", "want"),
    [
        (1, 1, 0, 1, 2),  # keeps the surge while the budget does not cover the unready
        (4, 2, 1, 2, 5),  # reclaims the surge gradually
        (2, 2, 1, 2, 3),  # reclaims before the partition reaches 0 when allowed
        (1, 1, 0, 0, 1),  # back to replicas once every group is ready
        (1, 1, 1, 1, 1),  # maxUnavailable covers the one unready group
        (3, 0, 0, 1, 3),  # no surge without maxSurge
    ],
)
def test_surge_replicas_are_lws_own(
    replicas: int, surge: int, unavailable: int, not_done: int, want: int
) -> None:
    assert surge_replicas(replicas, Strategy(unavailable, surge), not_done) == want


@pytest.mark.parametrize(
    ("replicas", "unavailable", "surge", "changed", "want"),
    [
        (3, 0, 1, False, (0, 3)),  # scaled up from 2, no template change: no extra surge
        (3, 0, 1, True, (2, 3)),  # scaled up with a new template: the new index first
        (2, 1, 2, True, (2, 3)),  # a new template, maxUnavailable 1 reclaims one surge
    ],
)
def test_rolling_update_parameters_are_lws_own(
    replicas: int, unavailable: int, surge: int, changed: bool, want: tuple[int, int]
) -> None:
    sts = LeaderSet(replicas=2, partition=0, replicas_annotation=2)
    states = [GroupState(ready=True, updated=not changed)] * 2
    assert rolling_update(replicas, Strategy(unavailable, surge), sts, states, changed) == want


def test_the_documented_rollout_of_four_groups() -> None:
    """LWS's rollout-strategy page: replicas 4, maxSurge 2, maxUnavailable 2."""
    strategy = Strategy(2, 2)
    new, old = GroupState(True, True), GroupState(True, False)
    rolling, unready_new = GroupState(False, False), GroupState(False, True)
    sts = LeaderSet(4, 0, 4)
    # stage 2: the rollout starts: partition 4, two surge groups
    assert rolling_update(4, strategy, sts, [old] * 4, True) == (4, 6)
    sts = LeaderSet(6, 4, 4)
    # stage 3: surges not ready yet: partition 2 (maxUnavailable 2 from the top)
    assert rolling_update(4, strategy, sts, [old] * 4 + [unready_new] * 2, False) == (2, 6)
    sts = LeaderSet(6, 2, 4)
    # stage 4: the last group is not ready: the partition stays
    states = [old, old, rolling, rolling, new, unready_new]
    assert rolling_update(4, strategy, sts, states, False) == (2, 6)
    # stage 5: both surges ready: partition 0
    states = [old, old, rolling, rolling, new, new]
    assert rolling_update(4, strategy, sts, states, False) == (0, 6)
    sts = LeaderSet(6, 0, 4)
    # stage 6-7: groups 2 and 3 ready: scale down to 4 at once
    states = [rolling, rolling, new, new, new, new]
    assert rolling_update(4, strategy, sts, states, False) == (0, 4)
    # stage 9: done
    assert rolling_update(4, strategy, LeaderSet(4, 0, 4), [new] * 4, False) == (0, 4)


def test_strategy_reads_the_spec_with_lws_defaults() -> None:
    assert Strategy.of({}) == Strategy(1, 0, 0)
    spec = {"rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration":
                                {"maxSurge": "50%", "maxUnavailable": "30%"}}}  # fmt: skip
    assert Strategy.of(spec).counts(5) == (1, 3)  # 1.5 down, 2.5 up
    assert Strategy(0, 9).counts(2) == (0, 2)  # never more surge than replicas
    assert Strategy(0, 1).statefulset_max_unavailable(3) == 1
    assert scaled(3, 10, round_up=False) == 3
    with pytest.raises(ValueError, match="percentage"):
        scaled("x%", 10, round_up=True)


def test_only_the_template_makes_a_revision() -> None:
    spec = {"replicas": 2, "leaderWorkerTemplate": {"size": 1, "workerTemplate": {"a": 1}}}
    scaled_spec = {**spec, "replicas": 5, "rolloutStrategy": {"type": "RollingUpdate"}}
    changed = {**spec, "leaderWorkerTemplate": {"size": 1, "workerTemplate": {"a": 2}}}
    assert revision(spec) == revision(scaled_spec) != revision(changed)


def test_the_statefulset_replaces_the_highest_old_pod_within_its_budget() -> None:
    old, new = PodState("r1", True, False), PodState("r2", True, False)
    pods = {0: old, 1: old, 2: new}
    create, delete = statefulset_step(pods, replicas=3, partition=1, max_unavailable=1,
                                      current="r1", update="r2")  # fmt: skip
    assert (create, delete) == ({}, [1])
    pods[1] = PodState("r1", True, True)  # terminating: unavailable, nothing more
    assert statefulset_step(pods, replicas=3, partition=0, max_unavailable=1,
                            current="r1", update="r2") == ({}, [])  # fmt: skip
    del pods[1]  # gone: made again from the update revision (at or above the partition)
    assert statefulset_step(pods, replicas=3, partition=1, max_unavailable=1,
                            current="r1", update="r2") == ({1: "r2"}, [])  # fmt: skip
    # below the partition a missing ordinal comes back at the current revision; the
    # surge ordinal beyond replicas goes
    assert statefulset_step({2: new}, replicas=2, partition=1, max_unavailable=1,
                            current="r1", update="r2") == ({0: "r1", 1: "r2"}, [2])  # fmt: skip


@dataclass
class _Model:
    """Pods of one LWS under both controllers; Ready and gone when the test says."""

    replicas: int
    strategy: Strategy
    pods: dict[int, list[object]] = field(default_factory=dict)  # index -> [rev, ready, leaving]
    sts: LeaderSet = field(default_factory=lambda: LeaderSet(0, 0, 0))
    update: str = "r1"
    current: str = "r1"
    made: list[int] = field(default_factory=list)
    replaced: list[int] = field(default_factory=list)

    def start(self) -> None:
        self.sts = LeaderSet(self.replicas, 0, self.replicas)
        self.pods = {i: ["r1", True, False] for i in range(self.replicas)}

    def serving(self) -> int:
        return sum(1 for _, ready, leaving in self.pods.values() if ready and not leaving)

    def reconcile(self, changed: bool) -> None:
        states = [
            GroupState(bool(p[1]), p[0] == self.update) if (p := self.pods.get(i)) else
            GroupState(False, False) for i in range(self.sts.replicas)
        ]  # fmt: skip
        partition, replicas = rolling_update(self.replicas, self.strategy, self.sts, states,
                                             changed)  # fmt: skip
        self.sts = LeaderSet(replicas, partition, self.replicas)
        view = {i: PodState(str(p[0]), bool(p[1]), bool(p[2])) for i, p in self.pods.items()}
        create, delete = statefulset_step(
            view, replicas=replicas, partition=partition, current=self.current,
            update=self.update, max_unavailable=self.strategy.statefulset_max_unavailable(
                self.replicas),
        )  # fmt: skip
        for i in delete:
            if self.pods[i][0] != self.update and i < replicas:
                self.replaced.append(i)
            self.pods[i][2] = True
        for i, rev in create.items():
            self.pods[i] = [rev, False, False]
            self.made.append(i)
        if all(self.pods.get(i, [""])[0] == self.update for i in range(replicas)):
            self.current = self.update


@settings(max_examples=60, deadline=None)
@given(
    replicas=st.integers(1, 5),
    surge=st.integers(0, 3),
    unavailable=st.integers(0, 2),
    moves=st.lists(st.tuples(st.booleans(), st.integers(0, 7)), min_size=120, max_size=120),
)
def test_any_order_of_readiness_keeps_the_strategys_promise(
    replicas: int, surge: int, unavailable: int, moves: list[tuple[bool, int]]
) -> None:
    if surge == 0 and unavailable == 0:
        unavailable = 1  # LWS's webhook refuses both 0
    m = _Model(replicas, Strategy(unavailable, surge))
    m.start()
    m.update = "r2"
    m.reconcile(changed=True)
    fewest = m.serving()
    for ready, index in moves:  # a pod becomes Ready, or a leaving one is gone
        pod = m.pods.get(index)
        if pod is not None and ready and not pod[1] and not pod[2]:
            pod[1] = True
        elif pod is not None and not ready and pod[2]:
            del m.pods[index]
        m.reconcile(changed=False)
        fewest = min(fewest, m.serving())
    for _ in range(4 * (replicas + surge) + 4):  # then everything settles
        for pod in m.pods.values():
            pod[1] = True
        for i in [i for i, p in m.pods.items() if p[2]]:
            del m.pods[i]
        m.reconcile(changed=False)
        fewest = min(fewest, m.serving())
    count = min(surge, replicas)
    assert fewest >= replicas - min(unavailable, replicas)
    assert {i for i in m.made if i >= replicas} <= set(range(replicas, replicas + count))
    assert m.replaced == sorted(m.replaced, reverse=True)
    assert sorted(m.replaced) == list(range(replicas))
    assert m.sts == LeaderSet(replicas, 0, replicas)
    assert sorted(m.pods) == list(range(replicas))
    assert all(p[0] == "r2" and p[1] and not p[2] for p in m.pods.values())
