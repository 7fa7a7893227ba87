"""The PD flow: what each stage receives and what the client gets back."""

from __future__ import annotations

import json

from servekit.guard import body_passes
from servekit.proxy.payloads import PREFILL_KV_PARAMS, PROMPT_KEYED_MARK

from .harness import MODEL, run, stack


def test_streamed_pd_request_prefills_one_token_then_streams_decode_byte_for_byte() -> None:
    async def scenario() -> None:
        async with stack() as s:
            body = {"model": MODEL, "prompt": "hello " * 40, "max_tokens": 9, "stream": True,
                    "stream_options": {"include_usage": True}}  # fmt: skip
            status, out = await s.post("/v1/completions", body)
            assert status == 200
            (pre,) = s.prefill[0].gen()
            assert pre.body["max_tokens"] == 1 and pre.body["min_tokens"] == 1
            assert pre.body["stream"] is False and "stream_options" not in pre.body
            assert pre.body["kv_transfer_params"] == PREFILL_KV_PARAMS
            assert pre.body["prompt"] == body["prompt"]
            (dec,) = s.decode[0].gen()
            assert out == dec.answer  # frames, usage, finish_reason, [DONE]: byte for byte
            assert out.endswith(b"data: [DONE]\n\n") and b'"usage"' in out
            offered = json.loads(pre.answer)["kv_transfer_params"]
            assert dec.body["kv_transfer_params"] == offered  # the prefill's, as they came
            assert offered["remote_engine_id"] == "p0" and offered["do_remote_prefill"] is True
            assert {k: v for k, v in dec.body.items() if k != "kv_transfer_params"} == body
            assert pre.headers["X-Request-Id"] == dec.headers["X-Request-Id"]
            assert s.loads_are_zero()

    run(scenario())


def test_unstreamed_chat_answer_is_the_decoders_json() -> None:
    async def scenario() -> None:
        async with stack() as s:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                    "max_completion_tokens": 5}  # fmt: skip
            status, out = await s.post("/v1/chat/completions", body)
            assert status == 200
            (dec,) = s.decode[0].gen()
            assert out == dec.answer
            assert json.loads(out)["usage"]["completion_tokens"] <= 5
            (pre,) = s.prefill[0].gen()
            assert pre.body["max_completion_tokens"] == 1 and pre.body["max_tokens"] == 1
            assert pre.path == "/v1/chat/completions"

    run(scenario())


def test_responses_route_limits_max_output_tokens_in_the_prefill_copy() -> None:
    async def scenario() -> None:
        async with stack() as s:
            status, _ = await s.post("/v1/responses", {"model": MODEL, "input": "hi"})
            assert status == 200
            (pre,) = s.prefill[0].gen()
            assert pre.path == "/v1/responses" and pre.body["max_output_tokens"] == 1
            assert "max_tokens" not in pre.body
            assert s.decode[0].gen()[0].body["kv_transfer_params"]["do_remote_prefill"] is True

    run(scenario())


def test_pd_never_sends_decode_params_that_do_not_ask_for_a_remote_prefill() -> None:
    async def scenario() -> None:
        # a prompt-keyed prefill answers without kv_transfer_params: decode must not be called
        async with stack(sim={"kv_mode": "prompt"}) as s:
            status, out = await s.post("/v1/completions", {"prompt": "x", "stream": True})
            assert status == 502
            err = json.loads(out)["error"]
            assert err["code"] == "missing_kv_transfer_params" and err["stage"] == "prefill"
            assert s.decode[0].gen() == []

    run(scenario())


def test_prompt_keyed_mode_marks_decode_requests_and_replaces_client_params() -> None:
    async def scenario() -> None:
        async with stack(mode="prompt-keyed", sim={"kv_mode": "prompt"}) as s:
            body = {"model": MODEL, "prompt": "same prompt", "max_tokens": 3, "stream": True}
            status, out = await s.post("/v1/completions", body)
            assert status == 200
            (pre,) = s.prefill[0].gen()
            assert "kv_transfer_params" not in pre.body and pre.body["max_tokens"] == 1
            (dec,) = s.decode[0].gen()
            assert out == dec.answer
            assert dec.body == {**body, "kv_transfer_params": PROMPT_KEYED_MARK}
            assert body_passes(json.dumps(dec.body).encode())
            own = {**body, "kv_transfer_params": {"do_remote_prefill": False}}
            status, _ = await s.post("/v1/completions", own)
            assert status == 200  # the guard would refuse the client's params; the proxy marks it
            assert s.decode[0].gen()[1].body["kv_transfer_params"] == PROMPT_KEYED_MARK

    run(scenario())


def test_replica_mode_spreads_requests_and_forwards_untouched() -> None:
    async def scenario() -> None:
        async with stack(prefill=0, decode=0, replica=3, decode_policy="round-robin") as s:
            body = {"model": MODEL, "prompt": "p", "stream": True}
            for _ in range(6):
                status, out = await s.post("/v1/completions", body)
                assert status == 200 and out.endswith(b"data: [DONE]\n\n")
            assert [len(r.gen()) for r in s.replica] == [2, 2, 2]
            assert all(g.body == body for r in s.replica for g in r.gen())
            status, doc = await s.get("/health")
            assert status == 200 and doc["replica_instances"] == 3

    run(scenario())


def test_models_come_from_a_backend() -> None:
    async def scenario() -> None:
        async with stack() as s:
            status, doc = await s.get("/v1/models")
            assert status == 200 and doc["data"][0]["id"] == MODEL

    run(scenario())


def test_pd_refuses_batched_prompts_that_would_share_remote_blocks() -> None:
    async def scenario() -> None:
        async with stack() as s:
            status, out = await s.post("/v1/completions", {"prompt": ["a", "b"]})
            assert status == 400 and "one prompt per request" in json.loads(out)["error"]["message"]
            assert s.prefill[0].gen() == []
            status, _ = await s.post("/v1/completions", {"prompt": [1, 2, 3]})  # token ids: one
            assert status == 200

    run(scenario())


def test_tokenize_goes_to_a_decoder_and_prefix_cache_reset_to_every_instance() -> None:
    async def scenario() -> None:
        async with stack(prefill=2, decode=1) as s:
            status, out = await s.post("/tokenize", {"model": MODEL, "prompt": "abc"})
            assert status == 200 and json.loads(out) == json.loads(s.decode[0].spy.seen[-1].answer)
            assert [n.spy.seen[-1].path for n in s.decode] == ["/tokenize"]
            for node in s.prefill + s.decode:  # the simulator has no such endpoint
                node.spy.stub["/reset_prefix_cache"] = 200
            status, out = await s.post("/reset_prefix_cache", {})
            assert status == 200 and json.loads(out) == {"instances": 3}
            resets = [sum(x.path == "/reset_prefix_cache" for x in n.spy.seen)
                      for n in s.prefill + s.decode]  # fmt: skip
            assert resets == [1, 1, 1]
            s.prefill[1].spy.stub["/reset_prefix_cache"] = 500
            status, out = await s.post("/reset_prefix_cache", {})
            assert status == 502 and "prefill-1" in json.loads(out)["error"]["message"]

    run(scenario())
