"""The rendered ModelArts scripts of an external-DP PD layout feed the proxy's kv-events policy.

``a3/glm5.2/1x2p1x2d`` runs on four loopback nodes under dash with the simulated
``vllm``: every DP rank gets the same ``--kv-events-config`` and publishes on its
port plus its rank, as vLLM does; the proxy, started from its rendered script,
subscribes to each of the 10 ranks at the port the Plan planned for it, and its
/metrics shows every feed ``live``. (The control, ``kv_events`` off: no feed at
all, is ``tests/local/test_sim_kv_events.py``; ``KV_EVENTS=0`` taking the words
out of the scripts is ``tests/render/test_kv_events.py``.)
"""

from __future__ import annotations

import time
import urllib.request

import pytest

from servekit.catalog import load
from servekit.platforms import dry_cluster
from servekit.render import PlanOptions, build_plan, url

NAME = "a3/glm5.2/1x2p1x2d"


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text: str = r.read().decode()
    return text


@pytest.mark.slow
def test_every_rank_of_a_rendered_external_dp_layout_feeds_the_proxy() -> None:
    with dry_cluster(NAME, speed=10.0, reference=False) as cluster:
        plan = build_plan(load(NAME).layout, PlanOptions(hosts=cluster.addresses))
        proxy = plan.process("proxy").proxy
        assert proxy is not None and len(proxy.kv_events) == 2 + 8
        live = [
            f'servekit_proxy_kv_events_state{{engine="{url(e.engine, plan.host_of)}",state="live"}} 1.0'
            for e in proxy.kv_events
        ]
        deadline = time.monotonic() + 60
        text = _metrics(cluster.entry_url)
        while not all(line in text for line in live) and time.monotonic() < deadline:
            time.sleep(1)
            text = _metrics(cluster.entry_url)
    missing = [line for line in live if line not in text]
    assert missing == [], "\n".join(x for x in text.splitlines() if "kv_events_state" in x)
