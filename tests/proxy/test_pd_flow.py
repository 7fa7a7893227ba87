"""The PD flow: what each stage receives and what the client gets back."""

from __future__ import annotations

import json

from servekit.guard import body_passes
from servekit.proxy.payloads import PREFILL_KV_PARAMS, PROMPT_KEYED_MARK

from .harness import MODEL, run, stack

PROMPT_KEYED_SIM = {"kv_mode": "prompt", "guard_mode": "prompt-keyed"}


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
        async with stack(mode="prompt-keyed", sim=PROMPT_KEYED_SIM) as s:
            body = {"model": MODEL, "prompt": "same prompt", "max_tokens": 3, "stream": True}
            status, out = await s.post("/v1/completions", body)
            assert status == 200
            (pre,) = s.prefill[0].gen()
            assert "kv_transfer_params" not in pre.body and pre.body["max_tokens"] == 1
            (dec,) = s.decode[0].gen()
            assert out == dec.answer
            assert dec.body == {**body, "kv_transfer_params": PROMPT_KEYED_MARK}
            assert body_passes(json.dumps(dec.body).encode(), accept_prompt_keyed=True)
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


def test_a_strict_decoder_refuses_the_marker_a_prompt_keyed_one_takes() -> None:
    """Issue 23 item 1: the simulator's guard models strict and prompt-keyed apart."""

    async def scenario() -> None:
        for guard_mode, want in (("strict", 400), ("prompt-keyed", 200)):
            sim = {"kv_mode": "prompt", "guard_mode": guard_mode}
            async with stack(mode="prompt-keyed", sim=sim) as s:
                body = {"model": MODEL, "prompt": "keyed", "max_tokens": 3}
                status, out = await s.post("/v1/completions", body)
                assert status == want, (guard_mode, out)
                if want == 400:
                    code = json.loads(out)["error"]["code"]
                    assert code == "decode_role_requires_kv_transfer_params"

    run(scenario())


def test_bootstrap_mode_makes_the_transfer_id_and_the_decode_params() -> None:
    """vLLM's MooncakeConnector: the prefill answers no params; the proxy builds decode's."""

    async def scenario() -> None:
        async with stack(mode="bootstrap", sim={"kv_mode": "bootstrap"}) as s:
            body = {"model": MODEL, "prompt": "moon", "max_tokens": 3, "stream": True}
            status, out = await s.post("/v1/completions", body)
            assert status == 200, out
            (pre,) = s.prefill[0].gen()
            sent = pre.body["kv_transfer_params"]
            assert set(sent) == {"do_remote_decode", "transfer_id"} and sent["do_remote_decode"]
            assert json.loads(pre.answer)["kv_transfer_params"] is None  # as the real one answers
            (dec,) = s.decode[0].gen()
            kv = dec.body["kv_transfer_params"]
            assert kv["transfer_id"] == sent["transfer_id"] and kv["do_remote_prefill"] is True
            assert kv["remote_engine_id"] == s.prefill_engine_id(0)
            assert kv["remote_bootstrap_addr"] == s.prefill_bootstrap(0).split("=", 1)[1]
            assert body_passes(json.dumps(dec.body).encode())  # strict guard
            await s.post("/v1/completions", body)
            ids = {g.body["kv_transfer_params"]["transfer_id"] for g in s.prefill[0].gen()}
            assert len(ids) == 2  # one transfer id per prefill

    run(scenario())
