"""The simulator's and the guard's kv_transfer_params against what real connectors produce.

``tests/fixtures/kv_params.json`` holds the params recorded from real vLLM CPU
engines (NixlConnector, MooncakeConnector through servekit's local layouts) and
the keys vllm-ascend's Mooncake connectors return from ``request_finished``.
The simulator must produce the same shapes field by field (names, JSON types,
block-id nesting) and accept the same decode params; the decode guard must let
every real shape through in strict mode, and refuse the prompt-keyed marker
there. A drift on either side fails here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servekit.guard import asks_remote_prefill, kv_params_pass
from servekit.proxy.payloads import bootstrap_decode_params, bootstrap_prefill_params
from servekit.sim.pd import KvRegistry, KvTransferError, Producer

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "kv_params.json").read_text())
MARK = {"servekit_prompt_keyed": True}


def _shape(value: Any) -> Any:
    """A JSON value's type tree: what must agree between the real params and the simulator's."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return ["list", *sorted({json.dumps(_shape(v)) for v in value})]
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    return type(value).__name__


def _offer(producer: Producer, transfer_id: str | None = None) -> dict[str, Any] | None:
    reg = KvRegistry()
    reg.add_producer(producer)
    return reg.offer(
        producer, request_id="cmpl-x-0-1", prompt=(7, 8), n_blocks=1, window=(0.0, 480.0),
        release=lambda: None, transfer_id=transfer_id,
    )  # fmt: skip


def test_the_simulators_nixl_params_equal_the_recorded_ones_field_by_field() -> None:
    real = FIXTURE["nixl"]["prefill_answer"]
    sim = _offer(Producer("0", "127.0.0.1", 5600, 1, connector="NixlConnector"))
    assert sim is not None
    assert list(sim) == list(real)  # same fields, same order as vLLM writes them
    for key, value in real.items():
        assert _shape(sim[key]) == _shape(value), key
    for key in ("do_remote_prefill", "do_remote_decode", "transfer_mode", "dcp_size", "pp_size"):
        assert sim[key] == real[key], key


def test_the_simulators_ascend_params_use_vllm_ascends_keys() -> None:
    sim = _offer(Producer("0", "10.0.0.1", 36000, 4, connector="MooncakeHybridConnector"))
    assert sim is not None
    assert list(sim) == FIXTURE["vllm_ascend"][0]["keys"]  # the kv_p2p scheduler's keys
    assert all(isinstance(g, list) for g in sim["remote_block_ids"])  # one list per group


def _ascend_params(keys: list[str]) -> dict[str, Any]:
    """vllm-ascend's params with values of the types its request_finished writes."""
    values: dict[str, Any] = {
        "do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [[1, 2], [3]],
        "remote_engine_id": "0", "remote_request_id": "chatcmpl-1", "remote_host": "10.0.0.1",
        "remote_port": 36000, "last_token_id": 42, "remote_num_prompt_tokens": 40,
        "remote_multi_nodes_meta_mapping": {}, "num_prompt_blocks": 1, "remote_block_size": 128,
    }  # fmt: skip
    return {k: values.get(k, 1) for k in keys}


def test_the_strict_guard_passes_every_real_shape_and_refuses_the_marker() -> None:
    shapes = [FIXTURE["nixl"]["prefill_answer"]]
    shapes += [_ascend_params(e["keys"]) for e in FIXTURE["vllm_ascend"]]
    if "mooncake" in FIXTURE:
        shapes.append(FIXTURE["mooncake"]["decode_request"])
    for params in shapes:
        assert kv_params_pass(params, accept_prompt_keyed=False), params
    assert not kv_params_pass(MARK, accept_prompt_keyed=False)
    assert kv_params_pass(MARK, accept_prompt_keyed=True)
    assert not asks_remote_prefill(MARK)


def test_bootstrap_prefill_answers_nothing_and_decode_claims_by_transfer_id() -> None:
    producer = Producer("0", "127.0.0.1", 8998, 1, connector="MooncakeConnector", bootstrap=True)
    reg = KvRegistry()
    reg.add_producer(producer)
    sent = bootstrap_prefill_params("tid-1")
    answer = reg.offer(
        producer, request_id="cmpl-m", prompt=(9, 8), n_blocks=1, window=(0.0, 480.0),
        release=lambda: None, transfer_id=sent["transfer_id"],
    )  # fmt: skip
    assert answer is None  # the real MooncakeConnector prefill answers no kv_transfer_params
    decode = bootstrap_decode_params("tid-1", "0", producer.bootstrap_addr)
    if "mooncake" in FIXTURE:
        real = FIXTURE["mooncake"]
        assert real["prefill_answer"] is None
        assert list(sent) == list(real["prefill_request"])
        assert _shape(decode) == _shape(real["decode_request"])
    with pytest.raises(KvTransferError, match="bootstrap server"):
        reg.claim({**decode, "remote_bootstrap_addr": "http://127.0.0.1:1"}, 9, 1.0)
    with pytest.raises(KvTransferError, match="transfer_id"):
        reg.claim({**decode, "transfer_id": "other"}, 9, 1.0)
    assert reg.claim(decode, 9, 1.0) is not None
    with pytest.raises(KvTransferError, match="already consumed"):
        reg.claim(decode, 9, 1.0)
