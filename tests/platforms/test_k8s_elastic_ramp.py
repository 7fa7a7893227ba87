"""End to end on the fake cluster (issue 41): a 4x ramp through an elastic 1P1D.

The reduced run of ``benchmarks/elastic_ramp.py``: the rendered manifests of
``a3/dsv41-ced-pd`` with ``k8s.elastic=on`` and KEDA objects, simulated engines, the
HPA emulated from the rendered ScaledObjects reading the proxy's
``servekit_desired_replicas``; a decode pod deleted (gracefully, as ``kubectl delete
pod``) mid-answer at the peak. Every request must succeed with the very bytes a
static 1P1D deployment answers, both roles must grow and at least one shrink while
streams run.
"""

from __future__ import annotations

import pytest
from tests.platforms.elastic_ramp import (
    changed,
    compressed,
    elastic_sets,
    ramp_trace,
    run,
)

pytestmark = pytest.mark.slow

SPAN_S = 32.0
SLO = (1.0, 0.05)


def test_a_ramp_scales_both_roles_and_loses_nothing() -> None:
    # from the ramp down on, answers of 512 tokens: streams run across the scale-down
    # that follows; tail requests go on at the low rate until one began (on a loaded
    # host it comes late). Grace 0: every stream of a leaving decoder migrates at once
    # (where another decoder takes work), the hardest case for "nothing lost".
    trace = ramp_trace(SPAN_S, 1.0, prompt_words=1500, max_tokens=128, late_tokens=512,
                       tail_s=16.0)  # fmt: skip
    sets = elastic_sets("1,2,2,4,2", SLO, grace=0, max_replicas=4)
    elastic = run("elastic", trace, sets, autoscale=True, delete_at=SPAN_S * 0.45)
    static = run("static 1P1D", compressed(elastic.sent(trace), 3.0), sets, autoscale=False)
    print("migrations", elastic.migrations, "leaving", elastic.leaving_under_load())
    assert elastic.failed() == 0, [r.error for r in elastic.results if not r.ok][:3]
    assert static.failed() == 0, [r.error for r in static.results if not r.ok][:3]
    assert changed(elastic, static) == []
    assert set(elastic.migrations) <= {"ok"}, elastic.migrations  # none failed or diverged
    peak = {role: max(c[role] for _, c in elastic.timeline) for role in ("prefill", "decode")}
    assert peak["prefill"] > 1 and peak["decode"] > 1, peak
    # the proxy routed to the new engines, found without a restart (in this 32 s trace a
    # role's new engine, ready late on a loaded machine, may come after the last request:
    # one role must show it here; the benchmark's full ramp shows both)
    served = {role: sorted(pods) for role, pods in elastic.served.items()}
    assert len(served["prefill"]) > 1 or len(served["decode"]) > 1, served
    downs = [(lws, n) for _, lws, n, _ in elastic.history]
    assert any(n < max(m for l2, m in downs if l2 == lws) for lws, n in downs), downs
    # (a list: a pod name made again by a scale-up can leave twice; CI once had
    # sk-prefill-2 leave with 7 streams in flight, then again with 0)
    leaving = elastic.leaving_under_load()
    assert any(pod == elastic.deleted and n > 0 for pod, n in leaving), leaving
    assert any(n > 0 for pod, n in leaving if pod != elastic.deleted), leaving
