"""A generated Mooncake trace with shared prefixes replayed against real vLLM CPU.

Uses ``local/single`` up with ``servekit up --detach`` (real vLLM, the tiny
model, prefix caching on as vLLM's default), replays two dozen requests whose
prompts share 512-token blocks, and checks what the issue asks the report to
show: exact lengths by the server's usage, lateness, and prefix-cache hits read
from vLLM's own counters, near what the trace's ids imply. Marked ``vllm``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.engines import SharedRuns

from servekit.bench import RunSettings, run_workloads
from servekit.bench.config import TraceReplay
from servekit.bench.report import render_markdown
from servekit.bench.trace import read_trace
from servekit.bench.tracegen import TraceShape, write_trace
from servekit.bench.workloads.trace import trace_hit_rate
from servekit.deployment import load_deployment

LAYOUT = "local/single"


@pytest.fixture
def single(shared_vllm: SharedRuns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """local/single up (shared: each replay tags its prompts afresh, so no cache is inherited)."""
    env = shared_vllm.up(LAYOUT)
    monkeypatch.setenv("SERVEKIT_RUNS", env["SERVEKIT_RUNS"])
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.vllm
@pytest.mark.slow
def test_a_shared_prefix_trace_replays_on_real_vllm(single: Path) -> None:
    shape = TraceShape(
        requests=24, rate=4.0, groups=2, shared_blocks=2, own_blocks=(0, 1), output_tokens=(4, 16)
    )
    path = write_trace(single / "trace.jsonl", shape)
    trace = read_trace(path)
    result = run_workloads(
        load_deployment(LAYOUT),
        [TraceReplay(path=str(path))],
        RunSettings(runs=1, warmup=1, slo_ms={"ttft": 5000.0}),
    )
    (point,) = result.points
    assert point.errors == 0, point.evidence["error_samples"]
    rows = result.requests
    assert [r.prompt_tokens for r in rows] == [q.input_tokens for q in trace.requests]
    assert [r.output_tokens for r in rows] == [q.output_tokens for q in trace.requests]
    for name in ("lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms", "goodput"):
        assert point.figures[name].median is not None, name
    hits = point.figures["prefix_cache_hits"].median
    rate = point.figures["prefix_cache_hit_rate"].median
    implied = trace_hit_rate(trace)
    assert hits is not None and hits > 0 and rate is not None and implied is not None
    # vLLM caches whole 16-token blocks of what it has seen: about what the ids imply.
    assert abs(rate - implied) < 0.1, (rate, implied)
    text = render_markdown(result)
    assert "lateness_p99_ms" in text and "prefix_cache_hit_rate" in text
