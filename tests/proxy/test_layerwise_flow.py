"""The layerwise flow end to end: proxy + 1 prefill + 2 guarded decoders of the simulator.

The decoders run vllm-ascend's layerwise handoff as servekit.sim.protocols.layerwise
models it: they call the proxy's /v1/metaserver and wait for the prefill's
layer pushes. Each test reads what crossed the wire (spies) and the
simulator's push board, never a clock.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from servekit.sim.protocols.layerwise import LAYERS

from .harness import MODEL, Stack, run, stack, wait_until

BODY = {"model": MODEL, "prompt": "tell me about layerwise transfers", "max_tokens": 5}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4}


@asynccontextmanager
async def layerwise_stack(**config: Any) -> AsyncIterator[Stack]:
    """1 prefill, 2 decoders whose guards trust exactly this proxy's metaserver."""
    async with stack(
        1, 2, sim={"kv_mode": "layerwise", "kv_port": 36010}, mode="layerwise", **config
    ) as s:
        url = f"{s.url}/v1/metaserver"
        for node in s.decode:
            node.ep.spec = node.ep.spec.model_copy(update={"metaservers": (url,)})
        yield s


def board(s: Stack) -> Any:
    return s.sim.kv_registry.pushes


def frames(raw: bytes) -> list[bytes]:
    return [f.removeprefix(b"data: ") for f in raw.split(b"\n\n") if f]


def test_decoder_first_then_metaserver_then_prefill_whole_and_streamed() -> None:
    async def scenario() -> None:
        async with layerwise_stack() as s:
            for path, body in (("/v1/completions", BODY), ("/v1/chat/completions", CHAT)):
                for stream in (False, True):
                    status, raw = await s.post(path, {**body, "stream": stream})
                    assert status == 200, raw
                    if stream:
                        assert frames(raw)[-1] == b"[DONE]"
                        assert all(json.loads(f)["choices"] for f in frames(raw)[:-1])
                    else:
                        assert json.loads(raw)["usage"]["completion_tokens"] == body["max_tokens"]
            assert board(s).metaserver_calls == 4
            assert board(s).waiting() == 0 and s.loads_are_zero()
            decode_seen = [seen for node in s.decode for seen in node.gen()]
            assert len(decode_seen) == 4  # both decoders took part (least-loaded)
            for seen in decode_seen:
                kv = seen.body["kv_transfer_params"]
                assert kv == {
                    "do_remote_decode": False, "do_remote_prefill": True,
                    "metaserver": f"{s.url}/v1/metaserver",
                }  # fmt: skip
            prefill_seen = s.prefill[0].gen()
            assert len(prefill_seen) == 4
            for seen in prefill_seen:
                kv = seen.body["kv_transfer_params"]
                assert kv["do_remote_decode"] is True and kv["remote_block_ids"]
                assert seen.body["max_tokens"] == 1 and seen.body["stream"] is False
            rids = {seen.headers["X-Request-Id"] for seen in decode_seen}
            assert rids == {seen.headers["X-Request-Id"] for seen in prefill_seen}

    run(scenario())


def test_a_decoder_that_never_calls_the_metaserver_gets_504_and_its_request_aborted() -> None:
    async def scenario() -> None:
        async with layerwise_stack(metaserver_timeout_s=0.5) as s:
            for node in s.decode:
                node.fault(no_metaserver_call=True)
            for stream in (False, True):
                status, raw = await s.post("/v1/completions", {**BODY, "stream": stream})
                assert status == 504, raw
                err = json.loads(raw)["error"]
                assert err["code"] == "timeout" and "/v1/metaserver" in err["message"]
            await wait_until(lambda: board(s).waiting() == 0, "decoders released the requests")
            assert board(s).aborted == 2
            assert s.prefill[0].gen() == []  # no prefill ran for nobody
            await wait_until(s.loads_are_zero, "leases released")

    run(scenario())


def test_a_prefill_that_dies_mid_push_aborts_the_decode_and_answers_502() -> None:
    async def scenario() -> None:
        async with layerwise_stack() as s:
            s.prefill[0].fault(die_mid_push=True)
            for stream in (False, True):
                status, raw = await s.post("/v1/completions", {**BODY, "stream": stream})
                assert status == 502, raw  # never a hung stream or an empty 200
                err = json.loads(raw)["error"]
                assert err["stage"] == "prefill", err
                s.prefill[0].ep.restart()
                s.prefill[0].fault(die_mid_push=True)
            await wait_until(lambda: board(s).waiting() == 0, "decoders released the requests")
            assert board(s).aborted == 2 and board(s).metaserver_calls == 2
            assert LAYERS > 1

    run(scenario())


def test_the_guard_refuses_plain_and_foreign_metaserver_requests_sent_to_a_decoder() -> None:
    async def scenario() -> None:
        async with layerwise_stack() as s:
            direct = s.decode[0].ep.url + "/v1/completions"
            foreign = {"do_remote_decode": False, "do_remote_prefill": True,
                       "metaserver": "http://127.0.0.1:9/v1/metaserver"}  # fmt: skip
            pull = {"do_remote_prefill": True, "remote_block_ids": [1], "remote_engine_id": "p0",
                    "remote_request_id": "r", "remote_host": "127.0.0.1", "remote_port": 1}  # fmt: skip
            for kv in (None, foreign, pull, {"servekit_prompt_keyed": True}):
                body = BODY if kv is None else {**BODY, "kv_transfer_params": kv}
                async with s.client.post(direct, json=body) as resp:
                    assert resp.status == 400, kv
                    doc = await resp.json()
                    assert doc["error"]["code"] == "decode_role_requires_kv_transfer_params"
            assert board(s).metaserver_calls == 0 and not s.decode[0].ep.dead
            status, _ = await s.post("/v1/completions", BODY)  # through the proxy: passes
            assert status == 200 and board(s).metaserver_calls == 1

    run(scenario())


def test_an_unguarded_layerwise_decoder_dies_on_a_plain_request() -> None:
    """The incident the guard prevents, on the layerwise connector too (negative control)."""

    async def scenario() -> None:
        sim = {"kv_mode": "layerwise", "guard": False, "unguarded_incident": False}
        async with stack(1, 1, sim=sim, mode="layerwise") as s:
            node = s.decode[0]
            node.ep.spec = node.ep.spec.model_copy(update={"unguarded_incident": True})
            async with s.client.post(node.ep.url + "/v1/completions", json=BODY) as resp:
                assert resp.status == 500
            assert node.ep.dead

    run(scenario())


def test_metaserver_calls_for_unknown_or_malformed_requests_are_refused() -> None:
    async def scenario() -> None:
        async with layerwise_stack() as s:
            status, raw = await s.post("/v1/metaserver", {"request_id": "cmpl-nobody-0"})
            assert status == 404 and json.loads(raw)["error"]["code"] == "unknown_request"
            async with s.client.post(s.url + "/v1/metaserver", data=b"[1, 2") as resp:
                assert resp.status == 404
            async with s.client.post(s.url + "/v1/metaserver", data=b"x" * (5 << 20)) as resp:
                assert resp.status == 413
            status, raw = await s.post("/v1/responses", {"model": MODEL, "input": "hi"})
            assert status == 400 and b"layerwise mode serves" in raw
            status, raw = await s.post("/v1/completions", {**BODY, "prompt": ["a", "b"]})
            assert status == 400 and b"one prompt per request" in raw

    run(scenario())
