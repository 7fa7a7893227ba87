"""Each workload end to end through run_workloads against the simulated engine (via the spy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.bench import (
    ConcurrencySweep,
    KVCapacity,
    MultiStream,
    Prefill,
    RateSweep,
    RunSettings,
    SingleStream,
    run_workloads,
)
from servekit.deployment import Deployment, Endpoint

from .conftest import CROWDED, STEP_S, Engine, Setup, count_tokens

FAST = RunSettings(runs=2, warmup=1, idle_timeout_s=10)
STEP_MS = STEP_S * 1000  # the simulated engine's decode step


def dep(engine: Engine) -> Deployment:
    return Deployment(entry_url=engine.url)


def test_single_stream_without_spec_decode_is_one_token_per_step(engine: Engine) -> None:
    result = run_workloads(dep(engine), [SingleStream(prompt_tokens=32, output_tokens=8)], FAST)
    (point,) = result.points
    assert point.workload == "single_stream" and point.label == "ISL=32"
    assert point.requests == 2 and point.errors == 0 and point.invalid_runs == 0
    figs = point.figures
    assert figs["acceptance_length"].runs == (1.0, 1.0)
    for run in point.evidence["runs"]:
        assert run["steps_source"] == "one token per step (no spec-decode counters)"
        assert run["steps"] == 7
        assert run["tok_per_s"] == pytest.approx(
            run["acceptance_length"] * 1000 / run["ms_per_step"]
        )
    assert figs["tok_per_s"].median is not None
    assert figs["tok_per_s"].min <= figs["tok_per_s"].median <= figs["tok_per_s"].max  # type: ignore[operator]
    # Warm-up plus two shots, every prompt exactly 32 tokens and distinct.
    assert engine.prompt_tokens == [32, 32, 32]
    assert len(set(engine.spy.prompts)) == 3
    assert result.inputs.model == "fake-model"
    assert result.inputs.versions == {"engine": "servekit-sim"}


SPEC3 = Setup(profile={"num_speculative_tokens": 2, "acceptance_length": 3.0})


@pytest.mark.parametrize("engine", [SPEC3], indirect=True)
def test_single_stream_reads_acceptance_from_spec_decode_counters(engine: Engine) -> None:
    # 7 tokens: 1 + 3 + 3 -> 2 drafts, 4 accepted -> A = 3.0 exactly.
    result = run_workloads(dep(engine), [SingleStream(prompt_tokens=16, output_tokens=7)], FAST)
    (point,) = result.points
    assert point.figures["acceptance_length"].runs == (3.0, 3.0)
    assert {r["steps_source"] for r in point.evidence["runs"]} == {"spec_decode drafts delta"}
    assert {r["drafts"] for r in point.evidence["runs"]} == {2.0}


BESIDE = Setup(profile=CROWDED, beside_on=frozenset({2}))


@pytest.mark.parametrize("engine", [BESIDE], indirect=True)
def test_single_stream_point_with_other_load_is_invalid_and_rerun(engine: Engine) -> None:
    result = run_workloads(dep(engine), [SingleStream(prompt_tokens=16, output_tokens=4)], FAST)
    (point,) = result.points
    assert point.invalid_runs == 1
    assert point.requests == 3  # two valid shots and the discarded one
    assert len(point.figures["tok_per_s"].runs) == 2
    assert all(r["max_running"] <= 1 for r in point.evidence["runs"])


@pytest.mark.parametrize("engine", [Setup(unseen_on=frozenset({2}))], indirect=True)
def test_single_stream_catches_a_short_foreign_request_by_its_finish(engine: Engine) -> None:
    result = run_workloads(dep(engine), [SingleStream(prompt_tokens=16, output_tokens=4)], FAST)
    (point,) = result.points
    assert point.invalid_runs == 1 and point.requests == 3
    assert [r["foreign_requests"] for r in point.evidence["runs"]] == [0.0, 0.0]


# A 100 ms step: with no /metrics the frames are the only clock, and at 2 ms a
# loaded client reads two frames at once (then the run is rightly "not measured").
SLOW_STEPS = {"decode_step_s": [[1, 0.1]]}


@pytest.mark.parametrize("engine", [Setup(profile=SLOW_STEPS, hide=("/metrics",))], indirect=True)
def test_target_without_metrics_still_measures_and_says_so(engine: Engine) -> None:
    result = run_workloads(dep(engine), [SingleStream(prompt_tokens=16, output_tokens=4)], FAST)
    (point,) = result.points
    assert point.evidence["idle_checked"] is False
    assert point.figures["ms_per_step"].median is not None
    runs = point.evidence["runs"]
    assert {r["steps_source"] for r in runs} == {"token frames after the first (no /metrics)"}


def test_multi_stream_points_and_unique_prefixes(engine: Engine) -> None:
    spec = MultiStream(streams=(1, 4), input_tokens=24, output_tokens=6)
    result = run_workloads(dep(engine), [spec], FAST)
    assert [p.label for p in result.points] == ["N=1", "N=4"]
    assert [p.requests for p in result.points] == [2, 8]
    for p in result.points:
        for name in ("per_stream_tok_per_s", "total_tok_per_s", "ms_per_step", "ttft_p50_ms"):
            assert len(p.figures[name].runs) == 2, name
    assert result.points[1].evidence["runs"][0]["output_tokens"] == 24
    prefixes = [p.split()[0] for p in engine.spy.prompts]
    assert len(prefixes) == len(set(prefixes)) == 1 + 2 + 8
    assert set(engine.prompt_tokens) == {24}


def test_two_runs_against_one_server_never_repeat_a_prompt(engine: Engine) -> None:
    # A rerun (a baseline and its successor) must not be served from the prefix
    # cache the first run filled: prompt ids restart, so each run tags its own.
    spec = MultiStream(streams=(2,), input_tokens=24, output_tokens=4)
    run_workloads(dep(engine), [spec], FAST)
    first = set(engine.spy.prompts)
    run_workloads(dep(engine), [spec], FAST)
    second = set(engine.spy.prompts) - first
    assert len(first) == len(second) == 1 + 2 * 2


@pytest.mark.parametrize("engine", [SPEC3], indirect=True)
def test_multi_stream_steps_follow_the_acceptance_length(engine: Engine) -> None:
    spec = MultiStream(streams=(3,), input_tokens=16, output_tokens=7)
    result = run_workloads(dep(engine), [spec], FAST)
    (point,) = result.points
    assert point.figures["acceptance_length"].runs == (3.0, 3.0)
    for run in point.evidence["runs"]:
        assert run["acceptance_length"] == 3.0
    fig = point.figures
    assert fig["ms_per_step"].median is not None and fig["per_stream_tok_per_s"].median


def test_prefill_uses_cold_prefixes_and_one_output_token(engine: Engine) -> None:
    result = run_workloads(dep(engine), [Prefill(streams=(1, 2), prompt_tokens=40)], FAST)
    assert [p.label for p in result.points] == ["N=1", "N=2"]
    run = result.points[1].evidence["runs"][0]
    assert run["prompt_tokens"] == 80 and run["cached_tokens"] == 0
    assert result.points[1].figures["prefill_tok_per_s"].median is not None
    assert len(set(engine.spy.prompts)) == len(engine.spy.prompts) == 1 + 2 + 4


def test_concurrency_sweep_caps_in_flight_and_computes_goodput(engine: Engine) -> None:
    spec = ConcurrencySweep(concurrencies=(3,), requests=9, input_tokens=16, output_tokens=5)
    settings = FAST.model_copy(update={"slo_ms": {"ttft": 60_000.0, "e2el": 60_000.0}})
    result = run_workloads(dep(engine), [spec], settings)
    (point,) = result.points
    assert point.label == "C=3" and point.requests == 18 and point.errors == 0
    assert engine.spy.max_in_flight <= 3
    figs = point.figures
    assert figs["goodput"].runs == figs["request_throughput"].runs  # every request meets it
    for name in ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_p99_ms", "tpot_p50_ms"):
        assert figs[name].median is not None, name
    assert figs["ttft_p50_ms"].unit == "ms" and figs["output_throughput"].unit == "tok/s"
    assert len(point.evidence["per_request"][0]["ttft_ms"]) == 9
    # The harness's own loop lag is measured during every run.
    assert all(r["loop_lag_p99_ms"] is not None for r in point.evidence["runs"])
    assert "loop_lag_p99_ms" not in figs
    assert figs["harness_loop_lag_p99_ms"].median is not None


@pytest.mark.parametrize("engine", [Setup(fail_every=3)], indirect=True)
def test_failed_requests_are_counted_never_dropped(engine: Engine) -> None:
    spec = RateSweep(
        rates=(200.0,), arrival="constant", requests=6, input_tokens=8, output_tokens=3
    )
    result = run_workloads(dep(engine), [spec], RunSettings(runs=1, warmup=0))
    (point,) = result.points
    assert point.requests == 6 and point.errors == 2
    assert point.error_kinds == {"http": 2}
    assert point.evidence["error_samples"][0].startswith("HTTP 500")
    assert point.evidence["runs"][0]["failed"] == 2.0
    assert point.evidence["runs"][0]["completed"] == 4.0


def test_poisson_rate_sweep_labels_and_figures(engine: Engine) -> None:
    spec = RateSweep(rates=(50.0, 100.0), requests=4, input_tokens=8, output_tokens=3)
    result = run_workloads(dep(engine), [spec], RunSettings(runs=1, warmup=0))
    assert [p.label for p in result.points] == ["rate=50/s poisson", "rate=100/s poisson"]
    assert all(p.figures["request_throughput"].median for p in result.points)


def test_kv_capacity_from_log_then_metrics(engine: Engine, tmp_path: Path) -> None:
    log = tmp_path / "decode.log"
    log.write_text("INFO KV cache size: 1,000 tokens\nINFO GPU KV cache size: 2,987,727 tokens\n")
    deployment = Deployment(
        entry_url=engine.url,
        endpoints=(
            Endpoint(name="proxy", role="proxy", url=engine.url),
            Endpoint(name="decode-0", role="decode", url=engine.url, log=log),
            Endpoint(name="prefill-0", role="prefill", url=engine.url),
        ),
    )
    result = run_workloads(deployment, [KVCapacity()], FAST)
    by_label = {p.label: p for p in result.points}
    assert set(by_label) == {"decode-0", "prefill-0"}
    metrics_tokens = engine.sim.call(lambda ep: ep.profile.num_blocks * ep.profile.block_size)
    assert by_label["decode-0"].figures["kv_cache_tokens"].median == 2_987_727
    assert by_label["decode-0"].evidence["metrics_tokens"] == metrics_tokens
    assert by_label["prefill-0"].figures["kv_cache_tokens"].median == metrics_tokens
    assert by_label["prefill-0"].evidence["source"] == "metrics"


def test_prompt_lengths_are_exact_for_every_workload(engine: Engine) -> None:
    run_workloads(dep(engine), [MultiStream(streams=(2,), input_tokens=33, output_tokens=2)], FAST)
    assert engine.spy.prompts and all(count_tokens(p) == 33 for p in engine.spy.prompts)


def test_pd_entry_without_tokenize_or_metrics_uses_the_engine_endpoints(engine: Engine) -> None:
    from .spy import Spy

    with Spy(engine.sim.url, hide=("/tokenize", "/metrics")) as proxy:
        deployment = Deployment(
            entry_url=proxy.url,
            endpoints=(
                Endpoint(name="proxy", role="proxy", url=proxy.url),
                Endpoint(name="decode-0", role="decode", url=engine.url),
            ),
        )
        result = run_workloads(deployment, [SingleStream(prompt_tokens=16, output_tokens=4)], FAST)
    (point,) = result.points
    assert point.errors == 0 and point.evidence["idle_checked"] is True
    assert proxy.calls["/v1/completions"] == 3 and proxy.calls["/tokenize"] == 0
    decode = engine.spy.calls
    assert decode["/v1/completions"] == 0
    assert decode["/tokenize"] >= 3 and decode["/metrics"] > 0


MERGED = {"merge_frames": True}
NO_DECODE_TIME = ("vllm:request_decode_time_seconds",)


@pytest.mark.parametrize("engine", [Setup(faults=MERGED, strip=NO_DECODE_TIME)], indirect=True)
def test_stream_without_a_decode_window_is_invalid_not_a_number(engine: Engine) -> None:
    spec = SingleStream(prompt_tokens=16, output_tokens=6, max_retries=1)
    result = run_workloads(dep(engine), [spec], FAST)
    (point,) = result.points
    assert point.errors == 0 and point.requests == 4 and point.invalid_runs == 4
    assert point.figures["tok_per_s"].median is None
    assert all("not measured" in r["note"] for r in point.evidence["runs"])
    assert len(point.evidence["rejected_runs"]) == point.invalid_runs


@pytest.mark.parametrize("engine", [Setup(faults=MERGED)], indirect=True)
def test_merged_frames_take_the_window_from_the_engines_decode_time(engine: Engine) -> None:
    # The whole stream arrives in one read: the client sees no window, the
    # engine reports its own first-to-last-token time, 5 steps of STEP_MS.
    spec = SingleStream(prompt_tokens=16, output_tokens=6, max_retries=0)
    result = run_workloads(dep(engine), [spec], FAST)
    (point,) = result.points
    assert point.errors == 0 and point.invalid_runs == 0
    for run in point.evidence["runs"]:
        assert run["frames_merged"] is True and run["reads"] == 1
        assert run["window_source"].startswith("engine:")
        assert run["window_ms"] == pytest.approx(5 * STEP_MS)
        assert run["ms_per_step"] == pytest.approx(STEP_MS)
    assert point.figures["tok_per_s"].median == pytest.approx(1000 / STEP_MS)


SPACED_S = 0.1  # steps far apart: at 0.02 s a heavily loaded host (4 busy processes on 2 cores) read two at once


@pytest.mark.parametrize(
    "engine", [Setup(profile={"decode_step_s": [[1, SPACED_S]]})], indirect=True
)
def test_separate_frames_keep_the_clients_window(engine: Engine) -> None:
    result = run_workloads(dep(engine), [SingleStream(prompt_tokens=16, output_tokens=6)], FAST)
    (point,) = result.points
    for run in point.evidence["runs"]:
        assert run["frames_merged"] is False and run["reads"] == 6
        assert run["window_source"].startswith("client:")
        assert run["engine_decode_ms"] == pytest.approx(5 * SPACED_S * 1000)


@pytest.mark.parametrize("engine", [Setup(profile={"finished_lag_s": 0.3})], indirect=True)
def test_a_request_counted_late_does_not_invalidate_the_next_shot(engine: Engine) -> None:
    # The engine counts a request as finished 0.3 s after its last frame (vLLM
    # records metrics after streaming): the shot waits for its own count, so
    # the next shot does not see it as someone else's request.
    spec = SingleStream(prompt_tokens=16, output_tokens=4, max_retries=0)
    result = run_workloads(dep(engine), [spec], RunSettings(runs=3, warmup=0, idle_timeout_s=10))
    (point,) = result.points
    assert point.invalid_runs == 0
    assert [r["foreign_requests"] for r in point.evidence["runs"]] == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("engine", [Setup(faults=MERGED)], indirect=True)
def test_multi_stream_with_merged_frames_uses_the_engines_mean_decode_time(
    engine: Engine,
) -> None:
    spec = MultiStream(streams=(2,), input_tokens=16, output_tokens=6)
    result = run_workloads(dep(engine), [spec], FAST)
    (point,) = result.points
    for run in point.evidence["runs"]:
        assert run["merged_streams"] == 2
        assert run["window_source"].startswith("engine:")
        assert run["engine_mean_decode_ms"] == pytest.approx(5 * STEP_MS)
        assert run["per_stream_tok_per_s"] == pytest.approx(1000 / STEP_MS)
        assert run["ms_per_step"] == pytest.approx(STEP_MS)
        # 12 tokens over at least the mean decode time: an upper bound.
        assert run["total_tok_per_s"] <= 12 / (5 * STEP_S) + 1e-6


def test_kv_line_of_the_endpoint_wins_in_a_shared_log(tmp_path: Path) -> None:
    from servekit.bench.workloads.kv_capacity import kv_from_log

    log = tmp_path / "sim.log"
    log.write_text(
        "INFO [engine.prefill] GPU KV cache size: 1,000 tokens\n"
        "INFO [engine.decode] GPU KV cache size: 2,000 tokens\n"
    )
    assert kv_from_log(log, "prefill") == 1000
    assert kv_from_log(log, "decode") == 2000
    assert kv_from_log(log, "other") == 2000
    assert kv_from_log(tmp_path / "missing.log") is None


def test_load_generators_run_with_the_heap_frozen(engine: Engine) -> None:
    # A full collection of the imported heap must not land inside a measured
    # window: the generators freeze it for the run and unfreeze it after.
    import asyncio
    import gc
    from typing import Any

    from servekit.bench.load import run_at_rate, run_concurrent, stream_body
    from servekit.client import OpenAIClient, RequestRecord

    seen: list[int] = []

    class Watching(OpenAIClient):
        async def completion(self, body: dict[str, Any]) -> RequestRecord:
            seen.append(gc.get_freeze_count())
            return await super().completion(body)

    async def go() -> None:
        async with Watching(engine.url) as client:
            bodies = [stream_body("[req-1] the of and", 2, None) for _ in range(3)]
            await run_concurrent(client, bodies, 2)
            await run_at_rate(client, bodies, 1000.0, "constant")

    asyncio.run(go())
    assert len(seen) == 6 and all(n > 0 for n in seen)
    assert gc.get_freeze_count() == 0
