"""The harness against servekit's simulator: spec-decode counters, logs, metrics."""

from __future__ import annotations

from pathlib import Path

from servekit.bench import KVCapacity, MultiStream, RunSettings, SingleStream, run_workloads
from servekit.deployment import Deployment, Endpoint
from servekit.sim.profile import load_profile
from servekit.sim.testing import running_sim


def test_acceptance_length_and_kv_capacity_from_a_calibrated_profile(tmp_path: Path) -> None:
    profile = load_profile("a3-dsv4-flash")
    log = tmp_path / "engine.log"
    spec = {
        "endpoints": [{"name": "e0", "port": 0, "profile": "a3-dsv4-flash", "log": str(log)}],
        "time_scale": 0.02,
    }
    with running_sim(spec) as sim:
        deployment = Deployment(
            entry_url=sim.url,
            engine="sim",
            endpoints=(Endpoint(name="e0", role="mixed", url=sim.url, log=log),),
        )
        workloads = [
            SingleStream(prompt_tokens=64, output_tokens=96),
            MultiStream(streams=(2,), input_tokens=64, output_tokens=16),
            KVCapacity(),
        ]
        result = run_workloads(deployment, workloads, RunSettings(runs=2))
    single, multi, kv = result.points
    assert single.errors == multi.errors == 0
    # The simulator accepts 2.89 tokens per step on average; the harness reads
    # it from the spec-decode counters, never assumes it.
    accept = single.figures["acceptance_length"]
    assert accept.median is not None and abs(accept.median - profile.acceptance_length) < 0.15
    assert {r["steps_source"] for r in single.evidence["runs"]} == {"spec_decode drafts delta"}
    # tok/s is A x 1000 / ms_per_step for every run.
    for run in single.evidence["runs"]:
        assert abs(run["tok_per_s"] - run["acceptance_length"] * 1000 / run["ms_per_step"]) < 1e-6
    # The engine log line, as vLLM writes it (whole blocks), is the figure.
    assert "KV cache size: 2,987,648 tokens" in log.read_text()
    assert kv.figures["kv_cache_tokens"].median == 2_987_648
    assert kv.evidence["source"] == "engine log"
    assert kv.evidence["metrics_tokens"] == profile.num_blocks * profile.block_size
