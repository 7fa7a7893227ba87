"""A template change rolled through a running elastic deployment loses nothing (issue 41).

``a3/dsv41-ced-pd`` rendered with ``k8s.elastic=on`` runs on the fake cluster from its
manifests (simulated engines, the proxy discovering the pods); the manifests rendered
again with a decode ``--set`` are applied while greedy streamed completions go through
the proxy every 0.25 s, and the emulated LWS and StatefulSet controllers roll the
decode LeaderWorkerSet as its rendered ``rolloutStrategy`` (``maxSurge: 1,
maxUnavailable: 0``) says (tests/platforms/rollout.py checks it).

Positive control first, on the same cluster at the rendered 1 decode group: the same
kind of rollout with the manifests' ``rolloutStrategy`` removed (LWS's defaults,
``maxUnavailable: 1, maxSurge: 0``: what a rendering without ``k8s.elastic`` gets)
must be found out by the same check: no group able to serve while the only one is
replaced, and requests that found the proxy without a decoder (they wait for one, the
rendered ``k8s.pool_wait``; without it they are refused).
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.platforms.elastic_ramp import _wait_ready
from tests.platforms.rollout import LAYOUT, SETS, problems, roll

from servekit.platforms.k8s.fake import k8s_dry_cluster

pytestmark = pytest.mark.slow
DECODE = "sk-decode"


def _lws_defaults(obj: dict[str, Any]) -> None:
    if obj["kind"] == "LeaderWorkerSet":
        obj["spec"].pop("rolloutStrategy", None)


def test_a_rollout_surges_drains_and_loses_nothing() -> None:
    with k8s_dry_cluster(LAYOUT, reference=False, sets=SETS, ready_timeout_s=180) as cluster:
        elastic = cluster.elastic
        assert elastic is not None
        control = roll(cluster, DECODE, [*SETS, "engines.decode.env.ROLLOUT_MARK=v2"],
                       edit=_lws_defaults)  # fmt: skip
        elastic.scale(DECODE, 2)
        _wait_ready(cluster, {"decode": 2})
        rollout = roll(cluster, DECODE, [*SETS, "engines.decode.env.ROLLOUT_MARK=v3"])
        prefill = [p.name for p in elastic.run.pods_of["sk"] if p.workload == "sk-prefill"]
        prefill_events = [(p, w) for _, p, w in rollout.events if p in prefill]
    found = problems(control)
    assert control.max_surge == 0 and control.replaced == [f"{DECODE}-0"]
    assert any(f.startswith("unavailable: 0 of 1 groups") for f in found), found
    # the proxy had no decoder to route to: requests waited (the rendered --pool-wait 60)
    assert any(f.startswith("empty pool: ") for f in found), found
    assert problems(rollout) == []
    assert rollout.replaced == [f"{DECODE}-1", f"{DECODE}-0"]
    assert f"{DECODE}-2" in rollout.served  # the surge group took requests through the proxy
    assert rollout.fewest_serving() == 2 and len(rollout.results) >= 12
    assert rollout.counted.waited_drains > 0  # streams were running on engines as they left
    # the prefill LeaderWorkerSet's template did not change: its pod never moved
    assert prefill == ["sk-prefill-0"] and ("sk-prefill-0", "terminating") not in prefill_events
    print(
        f"control: {len(control.failed())}/{len(control.results)} failed, "
        f"{control.counted.pool_waits} waited for a decoder; rollout: "
        f"{len(rollout.results)} requests over {rollout.span[1] - rollout.span[0]:.1f} s, "
        f"0 failed, {rollout.counted}"
    )
