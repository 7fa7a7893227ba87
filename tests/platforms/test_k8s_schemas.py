"""Every catalog layout's Kubernetes rendering passes the real schemas (issue 32).

Core kinds through kubernetes-validate's strict Kubernetes 1.34 schemas, each
LeaderWorkerSet pod template as a core PodTemplate, LeaderWorkerSet and
DisaggregatedSet through LWS v0.9.0's CRD schemas (strict) and webhook rules
(tests/platforms/k8s_schemas.py). Each check has its positive control: one bad
field of each kind is refused, for that field.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from tests.platforms.k8s_schemas import problems
from tests.platforms.rendered import LAYOUTS, PD_LAYOUTS, objects


def test_every_layout_passes_the_schemas() -> None:
    """One test over the whole catalog (validators built once): nothing refused."""
    refused = {}
    kinds: set[str] = set()
    for name in LAYOUTS:
        for obj in objects(name):
            kinds.add(obj["kind"])
            found = problems(obj)
            if found:
                refused[f"{name} {obj['kind']} {obj['metadata']['name']}"] = found[:3]
    assert not refused, refused
    assert {"ConfigMap", "Service", "Deployment", "LeaderWorkerSet"} <= kinds


def test_every_pd_layout_passes_as_a_disaggregatedset() -> None:
    refused = {}
    for name in PD_LAYOUTS:
        sets = [o for o in objects(name, "disaggregatedset") if o["kind"] == "DisaggregatedSet"]
        assert len(sets) == 1, name
        for obj in objects(name, "disaggregatedset"):
            found = problems(obj)
            if found:
                refused[f"{name} {obj['kind']} {obj['metadata']['name']}"] = found[:3]
    assert not refused, refused


def _one(
    kind: str, name: str = "a3/glm5.1/1x2p1x4d", k8s_kind: str = "leaderworkerset"
) -> dict[str, Any]:
    return copy.deepcopy(next(o for o in objects(name, k8s_kind) if o["kind"] == kind))


def _refused_at(obj: dict[str, Any], where: str) -> None:
    found = problems(obj)
    assert found, "a bad field passed"
    assert any(
        at == where or at.startswith(where + ".") or at.startswith(where + "[") for at, _ in found
    ), found


def _lws_container(obj: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any] = obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][
        0
    ]
    return c


CONTROLS = {
    # core kinds: an unknown field, a wrong type
    "configmap-unknown": ("ConfigMap", lambda o: o.update(stray=1), ""),
    "configmap-binary-type": ("ConfigMap", lambda o: o["data"].update({"x.sh": 5}), "data.x.sh"),
    "service-port-type": (
        "Service",
        lambda o: o["spec"]["ports"][0].update(port="http"),
        "spec.ports[0].port",
    ),
    "deployment-unknown": ("Deployment", lambda o: o["spec"].update(podCount=1), "spec"),
    "deployment-replicas": (
        "Deployment",
        lambda o: o["spec"].update(replicas="one"),
        "spec.replicas",
    ),
    # a pod template inside an LWS, checked as a core PodTemplate
    "podtemplate-unknown": (
        "LeaderWorkerSet",
        lambda o: _lws_container(o).update(gpus=16),
        "spec.leaderWorkerTemplate.workerTemplate.spec.containers[0]",
    ),
    "podtemplate-probe": (
        "LeaderWorkerSet",
        lambda o: _lws_container(o)["readinessProbe"].update(periodSeconds="5s"),
        "spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].readinessProbe.periodSeconds",
    ),
    # the CRD schema: unknown field, enum, type
    "lws-unknown": ("LeaderWorkerSet", lambda o: o["spec"].update(groups=2), "spec"),
    "lws-restart-enum": (
        "LeaderWorkerSet",
        lambda o: o["spec"]["leaderWorkerTemplate"].update(restartPolicy="Always"),
        "spec.leaderWorkerTemplate.restartPolicy",
    ),
    "lws-size-type": (
        "LeaderWorkerSet",
        lambda o: o["spec"]["leaderWorkerTemplate"].update(size="4"),
        "spec.leaderWorkerTemplate.size",
    ),
    # the webhook's rules
    "lws-size-zero": (
        "LeaderWorkerSet",
        lambda o: o["spec"]["leaderWorkerTemplate"].update(size=0),
        "spec.leaderWorkerTemplate.size",
    ),
    "lws-subgroup-divides": (
        "LeaderWorkerSet",
        lambda o: o["spec"]["leaderWorkerTemplate"].update(subGroupPolicy={"subGroupSize": 3}),
        "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize",
    ),
}


@pytest.mark.parametrize("control", sorted(CONTROLS))
def test_one_bad_field_is_refused_for_that_field(control: str) -> None:
    kind, spoil, where = CONTROLS[control]
    obj = _one(kind)  # for an LWS: the prefill's, with a leader and a worker template
    assert not problems(obj)
    spoil(obj)
    _refused_at(obj, where)


def test_a_bad_disaggregatedset_field_is_refused() -> None:
    obj = _one("DisaggregatedSet", k8s_kind="disaggregatedset")
    assert not problems(obj)
    bad = copy.deepcopy(obj)
    bad["spec"]["roles"][0]["ratio"] = 2
    _refused_at(bad, "spec.roles[0]")
    bad = copy.deepcopy(obj)
    bad["spec"]["roles"][1]["spec"]["leaderWorkerTemplate"]["size"] = 0
    _refused_at(bad, "spec.roles[1].spec.leaderWorkerTemplate.size")
    bad = copy.deepcopy(obj)
    bad["spec"]["roles"][0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["hostPID"] = (
        "yes"
    )
    _refused_at(bad, "spec.roles[0].spec.leaderWorkerTemplate.workerTemplate.spec.hostPID")
