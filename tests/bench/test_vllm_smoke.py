"""CI smoke: bench local/1p1d on real vLLM CPU for a few seconds.

Starts the layout with ``servekit up --detach`` (real vLLM, the tiny model),
benches it through its proxy by layout name, and stops it. Marked ``vllm``:
slow, run by CI, not by the quick suite.
"""

from __future__ import annotations

import pytest
from tests.helpers.engines import SharedRuns

from servekit.bench import KVCapacity, MultiStream, RunSettings, SingleStream, run_workloads
from servekit.deployment import load_deployment

LAYOUT = "local/1p1d"


@pytest.fixture
def runs_root(shared_vllm: SharedRuns, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """local/1p1d up (shared: this test only sends requests); SERVEKIT_RUNS finds it."""
    env = shared_vllm.up(LAYOUT)
    monkeypatch.setenv("SERVEKIT_RUNS", env["SERVEKIT_RUNS"])
    return env


@pytest.mark.vllm
@pytest.mark.slow
def test_bench_1p1d_on_real_vllm(runs_root: dict[str, str]) -> None:
    deployment = load_deployment(LAYOUT)
    workloads = [
        SingleStream(prompt_tokens=64, output_tokens=32),
        MultiStream(streams=(1, 2), input_tokens=64, output_tokens=16),
        KVCapacity(),
    ]
    result = run_workloads(deployment, workloads, RunSettings(runs=1, warmup=1))
    why = {p.label: p.evidence.get("error_samples") for p in result.points if p.errors}
    assert sum(p.errors for p in result.points) == 0, why
    single = result.point("single_stream", "ISL=64")
    assert single is not None
    assert single.invalid_runs == 0, single.evidence["rejected_runs"]
    # No speculative decoding in this layout: A must be exactly 1.
    assert single.figures["acceptance_length"].median == 1.0
    assert (single.figures["tok_per_s"].median or 0) > 0
    multi = result.point("multi_stream", "N=2")
    assert multi is not None and (multi.figures["total_tok_per_s"].median or 0) > 0
    kv = [p for p in result.points if p.workload == "kv_capacity"]
    assert kv and all((p.figures["kv_cache_tokens"].median or 0) > 0 for p in kv)
    assert {p.params["role"] for p in kv} >= {"prefill", "decode"}
