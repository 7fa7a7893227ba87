"""Trace replay against the simulator: exact lengths, shared prefixes, lateness, cache hits.

The spy in front of the simulated engine sees every prompt as sent, so the test
checks what a prefix cache would see (equal leading hash ids, equal leading
text; different ids, different text) and the server's own usage checks the
lengths. A one-hour generated trace replays on a simulator running 60x with a
60x replay speed, its schedule and lateness on the simulated clock.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.bench import RunSettings, run_workloads, write_outputs
from servekit.bench.config import TraceReplay
from servekit.bench.records import RECORDS_FILE
from servekit.bench.report import render_markdown
from servekit.bench.trace import read_trace
from servekit.bench.tracegen import TraceShape, write_trace
from servekit.deployment import Deployment, Endpoint
from servekit.sim.testing import running_sim

from .conftest import PROFILE, Engine, count_tokens

NS = 1_000_000_000


def _common_prefix(a: str, b: str) -> int:
    """Characters two prompts share from the start (text, not paths)."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def test_a_generated_trace_replays_with_exact_lengths_and_shared_prefixes(
    engine: Engine, tmp_path: Path
) -> None:
    shape = TraceShape(requests=16, rate=4.0, groups=2, shared_blocks=2, own_blocks=(0, 1), seed=3)
    path = write_trace(tmp_path / "gen.jsonl", shape)
    trace = read_trace(path)
    spec = TraceReplay(path=str(path), speed=8.0)
    result = run_workloads(
        Deployment(entry_url=engine.url), [spec], RunSettings(runs=1, slo_ms={"ttft": 5000})
    )
    (point,) = result.points
    assert point.errors == 0, point.evidence["error_samples"]
    # Every prompt is exactly its trace length, as the engine counts it and as usage says.
    sent = engine.spy.prompts[-len(trace.requests) :]
    assert [count_tokens(p) for p in sent] == [r.input_tokens for r in trace.requests]
    rows = [r for r in result.requests if r.workload == "trace"]
    assert [r.prompt_tokens for r in rows] == [r.input_tokens for r in trace.requests]
    assert [r.output_tokens for r in rows] == [r.output_tokens for r in trace.requests]
    # Equal leading ids share their blocks' text; a different first id shares no block.
    by_first: dict[int, list[str]] = {}
    for req, text in zip(trace.requests, sent, strict=True):
        by_first.setdefault(req.hash_ids[0], []).append(text)
    groups = list(by_first.values())
    assert len(groups) == 2 and all(len(g) >= 2 for g in groups)
    for texts in groups:
        shared = min(_common_prefix(texts[0], t) for t in texts[1:])
        assert count_tokens(texts[0][:shared]) >= 2 * 512 - 1
    across = _common_prefix(groups[0][0], groups[1][0])
    assert count_tokens(groups[0][0][:across]) < 16  # only the block tag's opening
    # The engine's prefix cache saw the sharing, and the report says so.
    hits = point.figures["prefix_cache_hits"].median
    assert hits is not None and hits > 0
    rate = point.figures["prefix_cache_hit_rate"].median
    assert rate is not None and 0 < rate < 1
    for name in ("lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms", "goodput"):
        assert point.figures[name].median is not None, name
    text = render_markdown(result)
    assert "Trace replay" in text and "lateness_p99_ms" in text and "prefix_cache_hits" in text
    assert "a perfect prefix cache would hit" in text
    names = {p.name for p in write_outputs(result, tmp_path / "out")}
    assert {RECORDS_FILE, "trace_latency.png", "trace_goodput.png"} <= names


def test_runs_never_hit_each_others_cache(engine: Engine, tmp_path: Path) -> None:
    """A fresh tag per run: run 2's first request of a group misses like run 1's did."""
    shape = TraceShape(requests=4, rate=50.0, groups=1, shared_blocks=1, own_blocks=(0, 0), seed=1)
    path = write_trace(tmp_path / "one.jsonl", shape)
    result = run_workloads(
        Deployment(entry_url=engine.url), [TraceReplay(path=str(path))], RunSettings(runs=2)
    )
    runs = result.points[0].evidence["runs"]
    assert runs[0]["prefix_cache_hits"] == runs[1]["prefix_cache_hits"] > 0


def test_a_one_hour_trace_replays_on_the_simulated_clock(tmp_path: Path) -> None:
    shape = TraceShape(
        requests=24,
        rate=24 / 3600,
        groups=2,
        shared_blocks=1,
        own_blocks=(0, 0),
        tail_tokens=(1, 100),
        output_tokens=(4, 8),
        seed=5,
    )
    path = write_trace(tmp_path / "hour.jsonl", shape)
    trace = read_trace(path)
    assert trace.span_s > 1800  # about an hour of trace time
    sim_speed = 60.0
    profile = {**PROFILE, "decode_step_s": [[1, 0.002 * sim_speed]]}
    spec = {
        "endpoints": [{"name": "e", "port": 0, "served_model_name": "m", "profile": profile}],
        "time_scale": 1 / sim_speed,
    }
    with running_sim(spec) as sim:
        deployment = Deployment(
            entry_url=sim.url,
            engine="sim",
            sim_speed=sim_speed,
            endpoints=(Endpoint(name="e", role="mixed", url=sim.url),),
        )
        result = run_workloads(
            deployment, [TraceReplay(path=str(path), speed=60.0)], RunSettings(runs=1)
        )
    (point,) = result.points
    assert point.errors == 0, point.evidence["error_samples"]
    assert point.params["clock_factor"] == 3600.0 and point.params["engine_clock"] == sim_speed
    rows = result.requests
    # The schedule is the trace's time divided by speed x simulator speed ...
    assert [r.scheduled_ns for r in rows] == [round(q.at_s / 3600.0 * NS) for q in trace.requests]
    # ... and lateness is reported on the simulated clock (wall lateness x simulator speed).
    late = sorted((r.lateness_ns or 0) * sim_speed / 1e6 for r in rows)
    assert point.figures["lateness_max_ms"].median == pytest.approx(late[-1])
    assert point.evidence["lateness_clock"].startswith("engine")
