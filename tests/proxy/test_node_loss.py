"""One run of each node-loss scenario on simulated a3/deepseekv4-flash/2p2d (tests/proxy/node_loss.py).

The 10 runs of 10 are benchmarks/migration_campaign.py's; this is the reduced but
real run the suite keeps: 16 greedy streams, every one whole and byte for byte the
unfaulted answer, with streams carried on (the fault was met) and none refused.
"""

from __future__ import annotations

import pytest

from .node_loss import SCENARIOS, STREAMS, campaign


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_sixteen_streams_survive_the_loss_of_an_engines_node(scenario: str) -> None:
    ((run,),) = campaign(scenario, groups=1, runs_per_group=1)
    assert (run.whole, run.same) == (STREAMS, STREAMS), run
    assert run.migrations["refused"] == run.migrations["diverged"] == 0
    if scenario.startswith("decode"):
        assert run.migrations["ok"] >= 1, "no stream was on the lost engine: nothing was proven"
        assert run.failures["node"] >= 1  # the proxy said the node is gone
    else:
        assert run.met, "no prefill ran, and no KV was pulled, on the lost node"
