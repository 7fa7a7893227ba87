"""PD roles as vLLM does them, and the first seed's incident, over loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servekit.sim.testing import RunningSim, running_sim

from .webclient import get, metric, post

PROMPT = "Summarise the history of paged attention in three sentences. " * 20


def _spec(tmp: Path, **decode: Any) -> dict[str, Any]:
    return {
        "endpoints": [
            {"name": "single", "port": 0},
            {
                "name": "p0",
                "port": 0,
                "role": "prefill",
                "engine_id": "0",
                "kv_port": 36000,
                "dp_rank": 1,
                "dp_size": 4,
                "tp": 4,
            },
            {
                "name": "d0",
                "port": 0,
                "role": "decode",
                "engine_id": "1",
                "kv_port": 36100,
                "log": str(tmp / "d0.log"),
                **decode,
            },
        ],
        "admin": {"port": 0},
    }


@pytest.fixture
def pd(tmp_path: Path) -> Iterator[RunningSim]:
    with running_sim(_spec(tmp_path, guard=True)) as sim:
        yield sim


def _prefill(sim: RunningSim, prompt: str = PROMPT) -> dict[str, Any]:
    body = {
        "prompt": prompt,
        "max_tokens": 1,
        "min_tokens": 1,
        "stream": False,
        "kv_transfer_params": {
            "do_remote_decode": True,
            "do_remote_prefill": False,
            "remote_engine_id": None,
            "remote_block_ids": None,
            "remote_host": None,
            "remote_port": None,
        },
    }
    status, doc = post(f"{sim.urls['p0']}/v1/completions", body)
    assert status == 200
    assert doc["usage"]["completion_tokens"] == 1
    params: dict[str, Any] = doc["kv_transfer_params"]
    return params


def _decode(
    sim: RunningSim, params: dict[str, Any] | None, prompt: str = PROMPT
) -> tuple[int, Any]:
    body: dict[str, Any] = {"prompt": prompt, "max_tokens": 64, "temperature": 0}
    if params is not None:
        body["kv_transfer_params"] = params
    return post(f"{sim.urls['d0']}/v1/completions", body)


def test_prefill_returns_vllm_shaped_kv_transfer_params(pd: RunningSim) -> None:
    params = _prefill(pd)
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert params["remote_engine_id"] == "0"
    assert params["remote_host"] == "127.0.0.1"
    assert params["remote_port"] == 36000 + 1 * 4  # kv_port + dp_rank x tp
    assert params["tp_size"] == 4
    (group,) = params["remote_block_ids"]  # one list per KV cache group, as NIXL writes it
    assert len(group) == -(-_prompt_tokens(pd) // 16)
    assert isinstance(params["remote_request_id"], str)


def _prompt_tokens(sim: RunningSim) -> int:
    _, doc = post(f"{sim.url}/tokenize", {"prompt": PROMPT})
    return int(doc["count"])


def test_pd_equals_single_and_decode_skips_prefill(pd: RunningSim) -> None:
    _, single = post(
        f"{pd.urls['single']}/v1/completions",
        {"prompt": PROMPT, "max_tokens": 64, "temperature": 0},
    )
    status, decoded = _decode(pd, _prefill(pd))
    assert status == 200
    assert decoded["choices"][0]["text"] == single["choices"][0]["text"]
    n = decoded["usage"]["prompt_tokens"]
    assert decoded["usage"]["prompt_tokens_details"]["cached_tokens"] == n - 1
    _, text = get(f"{pd.urls['d0']}/metrics")
    assert metric(text, "vllm:external_prefix_cache_hits_total") == n
    assert metric(text, "vllm:prefix_cache_hits_total") == 0


def test_prefill_holds_blocks_until_the_decoder_pulls_them(pd: RunningSim) -> None:
    params = _prefill(pd)
    _, held = get(f"{pd.urls['p0']}/metrics")
    assert metric(held, "vllm:kv_cache_usage_perc") > 0
    assert _decode(pd, params)[0] == 200
    _, freed = get(f"{pd.urls['p0']}/metrics")
    assert metric(freed, "vllm:kv_cache_usage_perc") == 0


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"remote_engine_id": "7"}, "names no prefill engine"),
        ({"remote_port": 36001}, "is not a KV port"),
        ({"remote_block_ids": [123456789]}, "never produced"),
        ({"remote_request_id": "nobody"}, "never produced"),
    ],
)
def test_mismatched_params_are_refused(pd: RunningSim, change: dict[str, Any], needle: str) -> None:
    params = {**_prefill(pd), **change}
    status, doc = _decode(pd, params)
    assert status == 400 and needle in doc["error"]["message"]
    assert get(f"{pd.urls['d0']}/health")[0] == 200


def test_consumed_and_wrong_prompt_params_are_refused(pd: RunningSim) -> None:
    params = _prefill(pd)
    status, doc = _decode(pd, params, prompt=PROMPT + " changed")
    assert status == 400 and "prompt differs" in doc["error"]["message"]
    params = _prefill(pd)
    assert _decode(pd, params)[0] == 200
    status, doc = _decode(pd, params)
    assert status == 400 and "already consumed" in doc["error"]["message"]


def test_unclaimed_blocks_expire(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    spec["endpoints"][1]["profile"] = {"name": "short-hold", "kv_hold_timeout_s": 0.05}
    with running_sim(spec) as sim:
        params = _prefill(sim)
        time.sleep(0.2)
        status, doc = _decode(sim, params)
    assert status == 400 and "expired" in doc["error"]["message"]


def test_guarded_decoder_refuses_plain_requests_and_stays_healthy(pd: RunningSim) -> None:
    status, doc = _decode(pd, None)
    assert status == 400
    assert doc["error"]["code"] == "decode_role_requires_kv_transfer_params"
    assert get(f"{pd.urls['d0']}/health")[0] == 200
    assert get(f"{pd.urls['d0']}/metrics")[0] == 200


def test_unguarded_incident_kills_the_decoder_until_restart(tmp_path: Path) -> None:
    with running_sim(_spec(tmp_path, unguarded_incident=True)) as sim:
        status, doc = _decode(sim, None)
        assert status == 500 and doc["error"]["type"] == "EngineDeadError"
        assert get(f"{sim.urls['d0']}/health")[0] == 500
        assert _decode(sim, _prefill(sim))[0] == 500
        log = (tmp_path / "d0.log").read_text()
        assert "EngineDeadError" in log and "replay limit" in log
        status, _ = post(f"{sim.admin_url}/sim/endpoints/d0/restart", {})
        assert status == 200
        assert get(f"{sim.urls['d0']}/health")[0] == 200
        assert _decode(sim, _prefill(sim))[0] == 200
        assert log.count("GPU KV cache size:") == 1
        assert (tmp_path / "d0.log").read_text().count("GPU KV cache size:") == 2


def test_prompt_keyed_mode_needs_no_params(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    for ep in spec["endpoints"][1:]:
        ep["kv_mode"] = "prompt"
    with running_sim(spec) as sim:
        status, _ = post(f"{sim.urls['p0']}/v1/completions", {"prompt": PROMPT, "max_tokens": 1})
        assert status == 200
        status, hit = _decode(sim, None)
        assert status == 200
        _, text = get(f"{sim.urls['d0']}/metrics")
        assert (
            metric(text, "vllm:external_prefix_cache_hits_total") == hit["usage"]["prompt_tokens"]
        )
        assert "External Cache Hit!" in (tmp_path / "d0.log").read_text()
        status, miss = _decode(sim, None, prompt="A prompt nobody prefilled.")
        assert status == 200 and miss["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_a_dead_prefill_rank_loses_only_its_own_offers(tmp_path: Path) -> None:
    spec = _spec(tmp_path, guard=True)
    spec["endpoints"].append(
        {
            "name": "p1",
            "port": 0,
            "role": "prefill",
            "engine_id": "0",
            "kv_port": 36000,
            "dp_rank": 2,
            "dp_size": 4,
            "tp": 4,
        }
    )
    with running_sim(spec) as sim:
        keep = _prefill(sim)
        body = {
            "prompt": PROMPT + " other",
            "max_tokens": 1,
            "kv_transfer_params": {"do_remote_decode": True},
        }
        _, doc = post(f"{sim.urls['p1']}/v1/completions", body)
        lost = doc["kv_transfer_params"]
        assert lost["remote_port"] == 36008 and keep["remote_port"] == 36004
        assert post(f"{sim.urls['p1']}/sim/kill", {})[0] == 200
        status, err = _decode(sim, lost, prompt=PROMPT + " other")
        assert status == 500 and "KV load failed" in err["error"]["message"]
        assert _decode(sim, keep)[0] == 200


def _a3_1p3d() -> dict[str, Any]:
    """The endpoint shape of a3/1p3d: 4 prefill ranks (DP4 x TP4) and 3 x 16 decode ranks."""
    eps: list[dict[str, Any]] = [
        {
            "name": f"p-{r}",
            "port": 0,
            "role": "prefill",
            "engine_id": "0",
            "kv_port": 36000,
            "dp_rank": r,
            "dp_size": 4,
            "tp": 4,
            "served_model_name": "deepseek_v4",
        }
        for r in range(4)
    ]
    for engine in (1, 3, 5):
        eps += [
            {
                "name": f"d{engine}-{r}",
                "port": 0,
                "role": "decode",
                "engine_id": str(engine),
                "kv_port": 36100,
                "dp_rank": r,
                "dp_size": 16,
                "guard": True,
                "served_model_name": "deepseek_v4",
            }
            for r in range(16)
        ]
    eps.append({"name": "single", "port": 0, "served_model_name": "deepseek_v4"})
    return {"endpoints": eps, "admin": {"port": 0}}


def test_the_a3_1p3d_shape_runs_in_one_process() -> None:
    with running_sim(_a3_1p3d()) as sim:
        assert len(sim.urls) == 53
        assert all(get(f"{url}/health")[0] == 200 for url in sim.urls.values())
        prefill = [n for n in sim.urls if n.startswith("p-")]
        decode = [n for n in sim.urls if n.startswith("d")]
        for i in range(12):
            prompt = f"Request {i}: explain data parallel rank {i}."
            body = {
                "prompt": prompt,
                "max_tokens": 1,
                "kv_transfer_params": {"do_remote_decode": True},
            }
            _, pre = post(f"{sim.urls[prefill[i % 4]]}/v1/completions", body)
            params = pre["kv_transfer_params"]
            assert params["remote_port"] == 36000 + (i % 4) * 4
            final = {"prompt": prompt, "max_tokens": 32, "kv_transfer_params": params}
            status, got = post(f"{sim.urls[decode[(i * 7) % 48]]}/v1/completions", final)
            _, ref = post(
                f"{sim.urls['single']}/v1/completions", {"prompt": prompt, "max_tokens": 32}
            )
            assert status == 200 and got["choices"][0]["text"] == ref["choices"][0]["text"]


def test_responses_api_through_pd(pd: RunningSim) -> None:
    ask = {"input": PROMPT, "max_output_tokens": 24}
    prefill = {**ask, "max_output_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}}
    _, pre = post(f"{pd.urls['p0']}/v1/responses", prefill)
    params = pre["kv_transfer_params"]
    assert params["do_remote_prefill"] is True
    status, decoded = post(f"{pd.urls['d0']}/v1/responses", {**ask, "kv_transfer_params": params})
    _, single = post(f"{pd.urls['single']}/v1/responses", ask)
    assert status == 200
    text = decoded["output"][0]["content"][0]["text"]
    assert text == single["output"][0]["content"][0]["text"]


def test_kv_of_a_prefill_that_is_gone_fails_the_decode_as_vllm_does(pd: RunningSim) -> None:
    """The pull fails (vLLM's kv_load_failure_policy "fail": a 500), rather than the
    params being refused (400, which a proxy would hand the client as the answer);
    the control: the same prompt's params from a prefill alive, answered."""
    params = _prefill(pd)
    pd.set_faults("p0", unreachable=True)
    try:
        status, doc = _decode(pd, params)
    finally:
        pd.set_faults("p0", unreachable=False)
    assert status == 500 and "KV load failed" in doc["error"]["message"]
    assert _decode(pd, _prefill(pd))[0] == 200
