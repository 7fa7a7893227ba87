"""Faults set in the spec or at run time through the admin API."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from servekit.sim.endpoint import SimEndpoint
from servekit.sim.testing import RunningSim, running_sim

from .webclient import get, metric, post, request

NEEDLE = "The secret code for needle B is QQ11-2233.\n\nWhat is the secret code for needle B?"


@pytest.fixture
def sim() -> Iterator[RunningSim]:
    spec = {"endpoints": [{"name": "a", "port": 0}, {"name": "b", "port": 0}], "admin": {"port": 0}}
    with running_sim(spec) as running:
        yield running


def _faults(sim: RunningSim, name: str, **patch: Any) -> tuple[int, Any]:
    return post(f"{sim.admin_url}/sim/endpoints/{name}/faults", patch)


def _complete(url: str, timeout: float = 10.0, **extra: Any) -> tuple[int, Any]:
    return post(f"{url}/v1/completions", {"prompt": "hello", "max_tokens": 8, **extra}, timeout)


def test_error_rate_and_status(sim: RunningSim) -> None:
    assert _faults(sim, "a", error_rate=1.0, error_status=503)[0] == 200
    assert [_complete(sim.urls["a"])[0] for _ in range(5)] == [503] * 5
    assert _complete(sim.urls["b"])[0] == 200
    _faults(sim, "a", error_rate=0.5)
    codes = [_complete(sim.urls["a"])[0] for _ in range(40)]
    assert codes.count(503) > 5 and codes.count(200) > 5


def test_latency_spike_shows_in_the_model_ttft(sim: RunningSim) -> None:
    _faults(sim, "a", spike_rate=1.0, spike_s=0.3)
    for _ in range(3):
        assert _complete(sim.urls["a"])[0] == 200
    _, text = get(f"{sim.urls['a']}/metrics")
    mean = metric(text, "vllm:time_to_first_token_seconds_sum") / metric(
        text, "vllm:time_to_first_token_seconds_count"
    )
    assert mean == pytest.approx(0.3, abs=0.03)


def test_hang_never_answers_while_health_says_200_until_cleared(sim: RunningSim) -> None:
    _faults(sim, "a", hang=True)
    with pytest.raises(TimeoutError):
        _complete(sim.urls["a"], timeout=0.5)
    assert get(f"{sim.urls['a']}/health")[0] == 200
    result: list[int] = []
    waiter = threading.Thread(target=lambda: result.append(_complete(sim.urls["a"])[0]))
    waiter.start()
    time.sleep(0.2)
    assert result == []
    _faults(sim, "a", hang=False)
    waiter.join(timeout=120)  # returns as soon as it answers
    assert result == [200]


async def _stream_until_reset(
    url: str, max_tokens: int = 40
) -> tuple[list[str], BaseException | None]:
    lines: list[str] = []
    async with aiohttp.ClientSession() as session:
        try:
            body = {"prompt": "hello", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
            async with session.post(f"{url}/v1/completions", json=body) as resp:
                async for raw in resp.content:
                    if raw.strip():
                        lines.append(raw.decode().strip())
        except (aiohttp.ClientError, ConnectionError) as exc:
            return lines, exc
    return lines, None


def test_connection_reset_mid_stream(sim: RunningSim) -> None:
    _faults(sim, "a", reset_rate=1.0, reset_after_tokens=0)
    lines, error = asyncio.run(_stream_until_reset(sim.urls["a"]))
    assert error is not None
    assert "data: [DONE]" not in lines
    with pytest.raises(ConnectionError):
        _complete(sim.urls["a"])
    lines, error = asyncio.run(_stream_until_reset(sim.urls["b"]))
    assert error is None and lines[-1] == "data: [DONE]"


@pytest.mark.slow
def test_slow_start_answers_503_then_serves() -> None:
    spec = {"endpoints": [{"name": "a", "port": 0, "faults": {"slow_start_s": 2.0}}]}
    with running_sim(spec) as sim:
        assert sim.call(lambda ep: ep.health_status()) == 503
        assert get(f"{sim.url}/health")[0] == 503
        assert _complete(sim.url)[0] == 503
        deadline = time.monotonic() + 30
        while get(f"{sim.url}/health")[0] != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert _complete(sim.url)[0] == 200
        status, state = post(f"{sim.url}/sim/restart", {"slow_start_s": 30})
        assert status == 200 and state["health"] == 503  # a restart loads weights again


def test_dead_at_start_and_restart_through_the_endpoint() -> None:
    spec = {"endpoints": [{"name": "a", "port": 0, "faults": {"dead": True}}]}
    with running_sim(spec) as sim:
        assert get(f"{sim.url}/health")[0] == 500
        assert _complete(sim.url)[0] == 500
        status, state = post(f"{sim.url}/sim/restart", {"slow_start_s": 0})
        assert status == 200 and state["health"] == 200
        assert _complete(sim.url)[0] == 200


def test_kill_fails_running_stream_and_restart_resets_counters() -> None:
    spec = {
        "endpoints": [
            {"name": "a", "port": 0, "profile": {"name": "slow", "decode_step_s": [[1, 0.02]]}}
        ]
    }
    with running_sim(spec) as sim:
        assert _complete(sim.url)[0] == 200
        outcome: list[Any] = []
        t = threading.Thread(
            target=lambda: outcome.append(asyncio.run(_stream_until_reset(sim.url, 5000)))
        )
        t.start()
        deadline = time.monotonic() + 120
        while sim.call(lambda ep: len(ep.engine.running)) == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert post(f"{sim.url}/sim/kill", {})[0] == 200
        t.join(timeout=120)
        lines, _ = outcome[0]
        assert any("EngineDeadError" in line for line in lines)
        assert get(f"{sim.url}/health")[0] == 500
        post(f"{sim.url}/sim/restart", {})
        _, text = get(f"{sim.url}/metrics")
        assert metric(text, "vllm:generation_tokens_total") == 0
        assert _complete(sim.url)[0] == 200


def test_misbehave_and_disagree_at_run_time(sim: RunningSim) -> None:
    def answer(name: str) -> str:
        _, doc = post(f"{sim.urls[name]}/v1/completions", {"prompt": NEEDLE, "max_tokens": 64})
        return str(doc["choices"][0]["text"])

    assert answer("a") == answer("b") == "QQ11-2233"
    _faults(sim, "a", misbehave="wrong_code")
    assert answer("a") != "QQ11-2233"
    _faults(sim, "a", misbehave="none", disagree_seed=5)
    assert answer("a") != answer("b")
    sim.set_faults("a", disagree_seed=None)
    assert answer("a") == "QQ11-2233"


def test_admin_rejects_bad_fault_fields_and_lists_endpoints(sim: RunningSim) -> None:
    status, doc = _faults(sim, "a", error_rate=2)
    assert status == 400 and "error_rate" in doc["error"]["message"]
    status, doc = _faults(sim, "a", nonsense=1)
    assert status == 400 and "nonsense" in doc["error"]["message"]
    assert post(f"{sim.admin_url}/sim/endpoints/zzz/faults", {})[0] == 404
    status, body = get(f"{sim.admin_url}/sim/endpoints")
    assert status == 200 and b'"name":"a"' in body and b'"name":"b"' in body


def _running(url: str) -> float:
    return metric(get(f"{url}/metrics")[1], "vllm:num_requests_running")


def test_client_disconnect_frees_the_engine() -> None:
    profile = {"name": "slow", "decode_step_s": [[1, 0.05]]}
    spec = {"endpoints": [{"name": "a", "port": 0, "profile": profile}]}
    with running_sim(spec) as sim:
        body = {"prompt": "long", "max_tokens": 400, "ignore_eos": True}
        with pytest.raises(TimeoutError):
            post(f"{sim.url}/v1/completions", body, timeout=0.3)

        async def stream_then_leave() -> None:
            async with aiohttp.ClientSession() as session:
                stream = {**body, "stream": True}
                async with session.post(f"{sim.url}/v1/completions", json=stream) as resp:
                    await resp.content.readline()

        asyncio.run(stream_then_leave())
        deadline = time.monotonic() + 10
        while _running(sim.url) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _running(sim.url) == 0
        _, text = get(f"{sim.url}/metrics")
        assert metric(text, "vllm:generation_tokens_total") < 2 * 400


def test_an_internal_engine_error_fails_requests_instead_of_hanging() -> None:
    with running_sim({"endpoints": [{"name": "a", "port": 0}]}) as sim:
        broken = sim.call(lambda ep: ep.engine.profile)
        sim.call(lambda ep: setattr(ep.engine, "profile", None))
        status, doc = _complete(sim.url)
        assert status == 500 and "internal simulator error" in doc["error"]["message"]
        sim.call(lambda ep: setattr(ep.engine, "profile", broken))
        assert _complete(sim.url)[0] == 200


def test_group_admin_kills_and_restarts_a_whole_engine() -> None:
    eps = [
        {
            "name": f"d{e}-{r}",
            "port": 0,
            "role": "decode",
            "engine_id": str(e),
            "dp_rank": r,
            "dp_size": 2,
        }
        for e in (1, 3)
        for r in range(2)
    ]
    with running_sim({"endpoints": eps, "admin": {"port": 0}}) as sim:
        admin = sim.admin_url
        status, states = post(f"{admin}/sim/group/kill", {"select": {"engine_id": 3}})
        assert status == 200 and sorted(s["name"] for s in states) == ["d3-0", "d3-1"]
        health = {name: get(f"{url}/health")[0] for name, url in sim.urls.items()}
        assert health == {"d1-0": 200, "d1-1": 200, "d3-0": 500, "d3-1": 500}
        assert post(f"{admin}/sim/group/restart", {"select": {"engine_id": "3"}})[0] == 200
        assert all(get(f"{url}/health")[0] == 200 for url in sim.urls.values())
        patch = {"select": {"role": "decode"}, "faults": {"error_rate": 1.0, "error_status": 502}}
        assert post(f"{admin}/sim/group/faults", patch)[0] == 200
        assert {_complete(url)[0] for url in sim.urls.values()} == {502}


def test_group_admin_rejects_bad_selections_without_side_effects() -> None:
    eps = [{"name": "a", "port": 0}, {"name": "b", "port": 0}]
    with running_sim({"endpoints": eps, "admin": {"port": 0}}) as sim:
        admin = sim.admin_url
        assert post(f"{admin}/sim/group/kill", {"select": {"role": "prefill"}})[0] == 404
        assert post(f"{admin}/sim/group/kill", {"select": {"colour": "red"}})[0] == 400
        bad = {"select": {"names": ["a", "b"]}, "faults": {"error_rate": 5}}
        status, doc = post(f"{admin}/sim/group/faults", bad)
        assert status == 400 and "error_rate" in doc["error"]["message"]
        assert all(_complete(url)[0] == 200 for url in sim.urls.values())


def test_empty_200_answers(sim: RunningSim) -> None:
    _faults(sim, "a", empty_rate=1.0)
    status, body = request("POST", f"{sim.urls['a']}/v1/completions", {"prompt": "x"})
    assert status == 200 and body == b""
    stream = {"prompt": "x", "stream": True}
    status, body = request("POST", f"{sim.urls['a']}/v1/completions", stream)
    assert status == 200 and body == b""
    assert _running(sim.urls["a"]) == 0
    assert _complete(sim.urls["b"])[0] == 200


def _die_and_restart(ep: SimEndpoint) -> None:
    ep.kill("test")
    ep.restart(0.0)


def test_a_step_in_flight_at_death_delivers_nothing_after_restart() -> None:
    profile = {"name": "slow-steps", "decode_step_s": [[1, 0.5]]}
    with running_sim({"endpoints": [{"name": "a", "port": 0, "profile": profile}]}) as sim:
        outcome: list[Any] = []
        t = threading.Thread(
            target=lambda: outcome.append(asyncio.run(_stream_until_reset(sim.url, 50)))
        )
        t.start()
        deadline = time.monotonic() + 30
        while sim.call(lambda ep: ep.engine.steps) < 2:  # decoding, a 0.5 s step in flight
            assert time.monotonic() < deadline
            time.sleep(0.01)
        sim.call(_die_and_restart)
        t.join(timeout=30)
        time.sleep(0.6)  # past the end of the step that was in flight
        _, text = get(f"{sim.url}/metrics")
        assert metric(text, "vllm:generation_tokens_total") == 0
        assert metric(text, "vllm:num_requests_running") == 0
