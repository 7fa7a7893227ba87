"""The latency model, checked on the model's own (virtual-time) accounting.

Figures come from /metrics (vLLM's histograms and spec-decode counters), the
way the benchmark harness reads a real engine; nothing here reads a wall clock.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from servekit.sim.profile import load_profile
from servekit.sim.testing import RunningSim, running_sim

from .webclient import get, metric, post

A3 = load_profile("a3-dsv4-flash")


def _prompt(n: int, salt: str = "w") -> str:
    return "".join(f" {salt}{i}" for i in range(n))


def _hist_mean(text: bytes, name: str) -> float:
    return metric(text, f"{name}_sum") / metric(text, f"{name}_count")


def _together(sim: RunningSim, n: int, body: dict[str, Any]) -> list[int]:
    """``n`` requests that reach the engine in one event-loop tick, whatever the host's load.

    They are held by the ``hang`` fault until all ``n`` wait, then released at once.
    """
    sim.set_faults(hang=True)
    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(post, f"{sim.url}/v1/completions", body, 60.0) for _ in range(n)]
        deadline = time.monotonic() + 30
        while sim.call(lambda ep: ep.hung) < n:
            assert time.monotonic() < deadline, "requests did not arrive"
            time.sleep(0.01)
        sim.set_faults(hang=False)
        return [f.result()[0] for f in futures]


def _a3_spec(time_scale: float, **extra: Any) -> dict[str, Any]:
    ep = {"name": "a3", "port": 0, "profile": "a3-dsv4-flash", "max_model_len": 65536, **extra}
    return {"endpoints": [ep], "time_scale": time_scale}


def test_single_stream_matches_the_published_a3_figures() -> None:
    with running_sim(_a3_spec(0.02)) as sim:
        body = {"prompt": _prompt(16384), "max_tokens": 64, "ignore_eos": True}
        status, doc = post(f"{sim.url}/v1/completions", body)
        assert status == 200 and doc["usage"]["completion_tokens"] == 64
        _, m = get(f"{sim.url}/metrics")
    ttft = metric(m, "vllm:time_to_first_token_seconds_sum")
    assert 16384 / ttft == pytest.approx(7100, rel=0.02)  # two 8192-token chunks
    steps = metric(m, "vllm:spec_decode_num_drafts_total")
    accepted = metric(m, "vllm:spec_decode_num_accepted_tokens_total")
    assert 1 + accepted / steps == pytest.approx(A3.acceptance_length, rel=0.05)
    assert metric(m, "vllm:spec_decode_num_draft_tokens_total") == 5 * steps
    window = metric(m, "vllm:e2e_request_latency_seconds_sum") - ttft
    assert window / steps == pytest.approx(0.02484, rel=1e-3)  # ms/step, as the bench computes
    assert _hist_mean(m, "vllm:inter_token_latency_seconds") == pytest.approx(0.02484, rel=1e-3)
    assert metric(m, "vllm:request_prefill_time_seconds_sum") == pytest.approx(ttft, rel=1e-6)
    assert metric(m, "vllm:request_decode_time_seconds_sum") == pytest.approx(window, rel=1e-6)


def test_prefix_cache_hit_makes_hot_ttft_short() -> None:
    with running_sim(_a3_spec(0.02)) as sim:
        body = {"prompt": _prompt(8192, "h"), "max_tokens": 4}
        post(f"{sim.url}/v1/completions", body)
        _, cold = get(f"{sim.url}/metrics")
        _, hot_doc = post(f"{sim.url}/v1/completions", body)
        _, hot = get(f"{sim.url}/metrics")
    cold_ttft = metric(cold, "vllm:time_to_first_token_seconds_sum")
    hot_ttft = metric(hot, "vllm:time_to_first_token_seconds_sum") - cold_ttft
    assert hot_doc["usage"]["prompt_tokens_details"]["cached_tokens"] == 8192 - 128
    assert hot_ttft == pytest.approx(A3.prefill_overhead_s + 128 * A3.prefill_per_token_s, rel=0.05)
    assert metric(hot, "vllm:prefix_cache_hits_total") == 8192 - 128


def test_step_time_follows_the_running_batch() -> None:
    with running_sim(_a3_spec(0.2)) as sim:
        body = {"prompt": "short prompt", "max_tokens": 64, "ignore_eos": True}
        assert _together(sim, 4, body) == [200] * 4
        _, m = get(f"{sim.url}/metrics")
    itl = _hist_mean(m, "vllm:inter_token_latency_seconds")
    assert itl == pytest.approx(A3.decode_step(4), rel=1e-3)


def test_waiting_queue_when_max_num_seqs_is_reached() -> None:
    profile = {"name": "two-slots", "max_num_seqs": 2, "decode_step_s": [[1, 0.05]]}
    spec = {"endpoints": [{"name": "e", "port": 0, "profile": profile}], "time_scale": 0.2}
    with running_sim(spec) as sim:
        body = {"prompt": "go", "max_tokens": 20, "ignore_eos": True}
        assert _together(sim, 4, body) == [200] * 4
        _, m = get(f"{sim.url}/metrics")
    # 19 decode steps of 50 ms: two sequences finish at 0.95 s; the other two waited
    # for their slots and finish 0.95 s later.
    # Arrival stamps come from the wall clock: a host that pauses the process while
    # the four are released shifts them a little, hence the absolute tolerance.
    e2e = "vllm:e2e_request_latency_seconds"
    assert metric(m, f"{e2e}_bucket", le="1.0") == 2
    assert metric(m, f"{e2e}_bucket", le="1.5") == 2
    assert metric(m, f"{e2e}_bucket", le="2.0") == 4
    assert metric(m, f"{e2e}_sum") == pytest.approx(2 * 0.95 + 2 * 1.90, abs=0.1)
    queued = "vllm:request_queue_time_seconds"
    assert metric(m, f"{queued}_sum") == pytest.approx(2 * 0.95, abs=0.1)
    assert metric(m, "vllm:request_decode_time_seconds_sum") == pytest.approx(4 * 0.95)


def test_kv_capacity_limits_admission_and_rejects_oversized_requests() -> None:
    profile = {
        "name": "tiny-kv",
        "block_size": 16,
        "kv_capacity_tokens": 64,
        "decode_step_s": [[1, 0.05]],
    }
    spec = {"endpoints": [{"name": "e", "port": 0, "profile": profile}], "time_scale": 0.2}
    with running_sim(spec) as sim:
        body = {"prompt": _prompt(20), "max_tokens": 20, "ignore_eos": True}  # 40 tokens: 3 blocks
        assert _together(sim, 2, body) == [200] * 2
        _, m = get(f"{sim.url}/metrics")
        status, doc = post(f"{sim.url}/v1/completions", {"prompt": _prompt(60), "max_tokens": 10})
    # the second fits only once the first has freed its blocks
    assert metric(m, "vllm:request_queue_time_seconds_sum") == pytest.approx(0.95, abs=0.1)
    assert metric(m, "vllm:e2e_request_latency_seconds_sum") == pytest.approx(2.85, abs=0.1)
    assert metric(m, "vllm:request_decode_time_seconds_sum") == pytest.approx(2 * 0.95)
    assert status == 400 and "KV blocks" in doc["error"]["message"]


def test_decode_pays_the_kv_transfer_time() -> None:
    n = 16384
    eps = [
        {
            "name": "p",
            "port": 0,
            "role": "prefill",
            "engine_id": "0",
            "profile": "a3-dsv4-flash",
            "max_model_len": 65536,
        },
        {
            "name": "d",
            "port": 0,
            "role": "decode",
            "engine_id": "1",
            "profile": "a3-dsv4-flash",
            "max_model_len": 65536,
        },
    ]
    with running_sim({"endpoints": eps, "time_scale": 0.02}) as sim:
        prompt = _prompt(n, "t")
        _, pre = post(
            f"{sim.urls['p']}/v1/completions",
            {"prompt": prompt, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}},
        )
        body = {"prompt": prompt, "max_tokens": 8, "kv_transfer_params": pre["kv_transfer_params"]}
        assert post(f"{sim.urls['d']}/v1/completions", body)[0] == 200
        _, m = get(f"{sim.urls['d']}/metrics")
    expected = A3.transfer_time(n) + A3.decode_step(1)
    assert metric(m, "vllm:time_to_first_token_seconds_sum") == pytest.approx(expected, rel=0.05)
    assert metric(m, "vllm:prefix_cache_queries_total") == n


def test_decode_step_grows_with_the_context_the_batch_holds() -> None:
    # 10 ms per step plus 1 us per context token: a 1,000-token prompt decodes
    # its 10 tokens at 11.0-11.01 ms per step, a 5,000-token one at 15 ms.
    profile = {
        "name": "context",
        "decode_step_s": [[1, 0.010]],
        "decode_per_context_token_s": 1e-6,
    }
    spec = {"endpoints": [{"name": "e", "port": 0, "profile": profile}], "time_scale": 0.2}
    itls = []
    for n in (1000, 5000):
        with running_sim(spec) as sim:
            body = {"prompt": _prompt(n), "max_tokens": 11, "ignore_eos": True}
            status, doc = post(f"{sim.url}/v1/completions", body)
            assert status == 200
            prompt_len = doc["usage"]["prompt_tokens"]
            _, m = get(f"{sim.url}/metrics")
        itls.append(_hist_mean(m, "vllm:inter_token_latency_seconds"))
        # Step k (1..10) reads prompt + k tokens of context.
        expected = 0.010 + 1e-6 * (prompt_len + 5.5)
        assert itls[-1] == pytest.approx(expected, rel=1e-6)
    assert itls[1] > itls[0] + 0.003
