"""The PD flow: what each stage receives and what the client gets back."""

from __future__ import annotations

import json

from servekit.guard import guard_rejects
from servekit.proxy.payloads import PREFILL_KV_PARAMS, PROMPT_KEYED_MARK

from .harness import run, stack


def test_streamed_pd_request_prefills_one_token_then_streams_decode_byte_for_byte() -> None:
    async def scenario() -> None:
        async with stack() as s:
            body = {"model": "m", "prompt": "hello " * 40, "max_tokens": 9, "stream": True,
                    "stream_options": {"include_usage": True}}  # fmt: skip
            status, out = await s.post("/v1/completions", body)
            assert status == 200
            assert out == s.decode[0].stream_bytes()  # frames, usage, finish_reason, [DONE]
            (pre,) = s.prefill[0].gen_requests()
            assert pre.body["max_tokens"] == 1 and pre.body["min_tokens"] == 1
            assert pre.body["stream"] is False and "stream_options" not in pre.body
            assert pre.body["kv_transfer_params"] == PREFILL_KV_PARAMS
            assert pre.body["prompt"] == body["prompt"]
            (dec,) = s.decode[0].gen_requests()
            kv = dec.body["kv_transfer_params"]
            assert kv["remote_engine_id"] == "p0" and kv["remote_block_ids"] == [1, 2, 3]
            assert {k: v for k, v in dec.body.items() if k != "kv_transfer_params"} == body
            assert pre.headers["X-Request-Id"] == dec.headers["X-Request-Id"]
            assert s.loads_are_zero()

    run(scenario())


def test_unstreamed_chat_answer_is_the_decoders_json() -> None:
    async def scenario() -> None:
        async with stack() as s:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                    "max_completion_tokens": 5}  # fmt: skip
            status, out = await s.post("/v1/chat/completions", body)
            assert status == 200
            doc = json.loads(out)
            assert doc["choices"][0]["text"] == "d0-out"
            assert doc["usage"]["completion_tokens"] == 4
            assert doc["echo_kv"]["remote_engine_id"] == "p0"
            (pre,) = s.prefill[0].gen_requests()
            assert pre.body["max_completion_tokens"] == 1 and pre.body["max_tokens"] == 1
            assert pre.path == "/v1/chat/completions"

    run(scenario())


def test_responses_route_limits_max_output_tokens_in_the_prefill_copy() -> None:
    async def scenario() -> None:
        async with stack() as s:
            status, _ = await s.post("/v1/responses", {"model": "m", "input": "hi"})
            assert status == 200
            (pre,) = s.prefill[0].gen_requests()
            assert pre.path == "/v1/responses" and pre.body["max_output_tokens"] == 1
            assert "max_tokens" not in pre.body
            assert s.decode[0].gen_requests()[0].body["kv_transfer_params"]["remote_port"] == 5600

    run(scenario())


def test_pd_never_sends_decode_without_kv_transfer_params() -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.prefill[0].fault = "no_kv"
            status, out = await s.post("/v1/completions", {"prompt": "x", "stream": True})
            assert status == 502
            err = json.loads(out)["error"]
            assert err["code"] == "missing_kv_transfer_params" and err["stage"] == "prefill"
            assert s.decode[0].gen_requests() == []

    run(scenario())


def test_prompt_keyed_mode_sends_the_clients_request_marked_as_routed_to_decode() -> None:
    async def scenario() -> None:
        async with stack(mode="prompt-keyed") as s:
            body = {"model": "m", "prompt": "same prompt", "max_tokens": 3, "stream": True}
            status, out = await s.post("/v1/completions", body)
            assert status == 200 and out == s.decode[0].stream_bytes()
            (pre,) = s.prefill[0].gen_requests()
            assert "kv_transfer_params" not in pre.body and pre.body["max_tokens"] == 1
            (dec,) = s.decode[0].gen_requests()
            assert dec.body == {**body, "kv_transfer_params": PROMPT_KEYED_MARK}
            assert not guard_rejects("POST", dec.path, json.dumps(dec.body).encode())
            own = {**body, "kv_transfer_params": {"client": "params"}}
            status, _ = await s.post("/v1/completions", own)
            assert status == 200 and s.decode[0].gen_requests()[1].body == own

    run(scenario())


def test_replica_mode_spreads_requests_and_forwards_untouched() -> None:
    async def scenario() -> None:
        async with stack(prefill=0, decode=0, replica=3, decode_policy="round-robin") as s:
            body = {"model": "m", "prompt": "p", "stream": True}
            for _ in range(6):
                status, out = await s.post("/v1/completions", body)
                assert status == 200 and out.endswith(b"data: [DONE]\n\n")
            assert [len(r.gen_requests()) for r in s.replica] == [2, 2, 2]
            assert all(g.body == body for r in s.replica for g in r.gen_requests())
            status, doc = await s.get("/health")
            assert status == 200 and doc["replica_instances"] == 3

    run(scenario())


def test_models_come_from_a_backend() -> None:
    async def scenario() -> None:
        async with stack() as s:
            status, doc = await s.get("/v1/models")
            assert status == 200 and doc["data"][0]["id"] == "tiny"

    run(scenario())


def test_pd_refuses_batched_prompts_that_would_share_remote_blocks() -> None:
    async def scenario() -> None:
        async with stack() as s:
            status, out = await s.post("/v1/completions", {"prompt": ["a", "b"]})
            assert status == 400 and "one prompt per request" in json.loads(out)["error"]["message"]
            assert s.prefill[0].gen_requests() == []
            status, _ = await s.post("/v1/completions", {"prompt": [1, 2, 3]})  # token ids: one
            assert status == 200

    run(scenario())


def test_tokenize_goes_to_a_decoder_and_prefix_cache_reset_to_every_instance() -> None:
    async def scenario() -> None:
        async with stack(prefill=2, decode=1) as s:
            status, out = await s.post("/tokenize", {"model": "m", "prompt": "abc"})
            doc = json.loads(out)
            assert status == 200 and doc["tokens"] == [97, 98, 99] and doc["by"] == "d0"
            status, out = await s.post("/reset_prefix_cache", {})
            assert status == 200 and json.loads(out) == {"instances": 3}
            assert [e.resets for e in s.prefill + s.decode] == [1, 1, 1]
            s.prefill[1].fault, s.prefill[1].fault_status = "status", 500
            status, out = await s.post("/reset_prefix_cache", {})
            assert status == 502 and "prefill-1" in json.loads(out)["error"]["message"]

    run(scenario())
