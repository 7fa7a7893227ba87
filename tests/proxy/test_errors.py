"""Failure semantics: pass-through, retries, stream errors, timeouts, disconnects."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from .harness import run, stack, wait_until

STREAM = {"model": "m", "prompt": "hello", "max_tokens": 4, "stream": True}
PLAIN = {"model": "m", "prompt": "hello", "max_tokens": 4}


def error_of(raw: bytes) -> dict[str, str]:
    return json.loads(raw)["error"]  # type: ignore[no-any-return]


def test_backend_4xx_passes_through_with_its_body_and_is_not_retried() -> None:
    async def scenario() -> None:
        async with stack(prefill=2) as s:
            for e in s.prefill:
                e.fault, e.fault_status = "status", 422
            status, out = await s.post("/v1/completions", STREAM)
            assert status == 422 and error_of(out)["message"].endswith("says no")
            assert sum(len(e.gen_requests()) for e in s.prefill) == 1
            assert s.decode[0].gen_requests() == []
            s.prefill[0].fault = s.prefill[1].fault = ""
            s.decode[0].fault, s.decode[0].fault_status = "status", 400
            status, out = await s.post("/v1/completions", PLAIN)
            assert status == 400 and error_of(out)["message"] == "d0 says no"
            assert len(s.decode[0].gen_requests()) == 1
            assert s.loads_are_zero()

    run(scenario())


def test_backend_5xx_becomes_502_naming_the_stage() -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.decode[0].fault, s.decode[0].fault_status = "status", 500
            status, out = await s.post("/v1/completions", STREAM)
            err = error_of(out)
            assert status == 502 and err["stage"] == "decode" and err["code"] == "upstream_error"
            assert s.decode[0].url not in out.decode()  # no address without --debug

    run(scenario())


def test_debug_names_the_backend_address_in_errors() -> None:
    async def scenario() -> None:
        async with stack(debug=True) as s:
            s.prefill[0].fault, s.prefill[0].fault_status = "status", 503
            status, out = await s.post("/v1/completions", PLAIN)
            assert status == 502 and s.prefill[0].url in error_of(out)["message"]

    run(scenario())


def test_decoder_empty_200_never_reaches_the_client_as_200() -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.decode[0].fault = "empty"
            for body in (STREAM, PLAIN):
                status, out = await s.post("/v1/completions", body)
                assert status == 502 and error_of(out)["stage"] == "decode"

    run(scenario())


def test_connection_failure_before_first_byte_retries_on_another_instance() -> None:
    async def scenario() -> None:
        async with stack(prefill=2, decode=2, prefill_policy="round-robin",
                         decode_policy="round-robin", health_interval_s=30) as s:  # fmt: skip
            await s.prefill[0].stop()
            s.decode[0].fault = "reset_before"
            for _ in range(2):
                status, out = await s.post("/v1/completions", STREAM)
                assert status == 200 and out == s.decode[1].stream_bytes()
            by_name = {i.name: i for i in s.proxy.router.instances()}
            assert by_name["prefill-0"].state.value == "ejected"  # passive ejection
            assert by_name["decode-0"].state.value == "ejected"
            assert len(s.decode[1].gen_requests()) == 2
            assert s.loads_are_zero()

    run(scenario())


def test_all_instances_unreachable_gives_502_after_bounded_attempts() -> None:
    async def scenario() -> None:
        async with stack(decode=2, max_attempts=2, health_interval_s=30) as s:
            for e in s.decode:
                e.fault = "reset_before"
            status, out = await s.post("/v1/completions", STREAM)
            err = error_of(out)
            assert status == 502 and err["code"] == "connect_failed" and err["stage"] == "decode"
            assert sum(len(e.gen_requests()) for e in s.decode) == 2
            status, out = await s.post("/v1/completions", STREAM)
            assert status == 503 and error_of(out)["code"] == "no_healthy_instance"

    run(scenario())


def test_reset_after_first_byte_ends_stream_with_error_event_and_no_retry() -> None:
    async def scenario() -> None:
        async with stack(decode=2) as s:
            for e in s.decode:
                e.fault = "reset"
            status, out = await s.post("/v1/completions", STREAM)
            assert status == 200
            events = [e for e in out.split(b"\n\n") if e]
            assert (
                events[0] == s.decode[0].stream_bytes().split(b"\n\n")[0]
                or events[0] == (s.decode[1].stream_bytes().split(b"\n\n")[0])
            )
            err = json.loads(events[-2].removeprefix(b"data: "))["error"]
            assert err["code"] == "stream_interrupted" and err["stage"] == "decode"
            assert events[-1] == b"data: [DONE]"
            assert sum(len(e.gen_requests()) for e in s.decode) == 1
            assert s.loads_are_zero()

    run(scenario())


def test_hanging_stage_times_out_with_504() -> None:
    async def scenario() -> None:
        async with stack(prefill_timeout_s=0.3, decode_timeout_s=0.3) as s:
            s.prefill[0].fault = "hang"
            status, out = await s.post("/v1/completions", STREAM)
            assert status == 504 and error_of(out)["stage"] == "prefill"
            await wait_until(lambda: s.prefill[0].cancelled == 1, "prefill request aborted")
            s.prefill[0].fault, s.decode[0].fault = "", "hang"
            status, out = await s.post("/v1/completions", PLAIN)
            assert status == 504 and error_of(out)["stage"] == "decode"
            assert s.loads_are_zero()

    run(scenario())


def test_client_disconnect_mid_stream_aborts_decode_and_releases_load() -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.decode[0].fault, s.decode[0].tokens = "slow_stream", 200
            async with aiohttp.ClientSession() as c:
                resp = await c.post(s.url + "/v1/completions", json=STREAM)
                assert resp.status == 200
                await resp.content.readany()
                await wait_until(lambda: not s.loads_are_zero(), "load visible in flight")
                resp.close()
            await wait_until(lambda: s.decode[0].cancelled == 1, "decoder saw the disconnect")
            await wait_until(s.loads_are_zero, "accounting released")

    run(scenario())


def test_client_disconnect_during_prefill_aborts_prefill_and_skips_decode() -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.prefill[0].fault = "hang"
            async with aiohttp.ClientSession() as c:
                task = asyncio.ensure_future(c.post(s.url + "/v1/completions", json=STREAM))
                await wait_until(lambda: s.prefill[0].in_handler == 1, "prefill started")
                task.cancel()
            await wait_until(lambda: s.prefill[0].cancelled == 1, "prefill saw the disconnect")
            await wait_until(s.loads_are_zero, "accounting released")
            assert s.decode[0].gen_requests() == []

    run(scenario())


def test_bad_json_and_non_object_bodies_are_400() -> None:
    async def scenario() -> None:
        async with stack() as s:
            for data in (b"{not json", b"[1, 2]"):
                async with s.client.post(s.url + "/v1/completions", data=data) as resp:
                    assert resp.status == 400
                    assert (await resp.json())["error"]["code"] == "bad_request"
            assert s.prefill[0].gen_requests() == []

    run(scenario())


def test_decode_timeout_bounds_the_first_byte_not_the_whole_stream() -> None:
    async def scenario() -> None:
        async with stack(decode_timeout_s=0.3) as s:
            s.decode[0].fault = "hang"
            status, out = await s.post("/v1/completions", STREAM)
            assert status == 504 and error_of(out) == {
                "message": "decode decode-0 timed out",
                "type": "proxy_error",
                "code": "timeout",
                "stage": "decode",
            }
            # a stream longer than the timeout, with short gaps, runs to the end
            s.decode[0].fault, s.decode[0].tokens, s.decode[0].frame_delay = "slow_stream", 12, 0.05
            status, out = await s.post("/v1/completions", STREAM)
            assert status == 200 and out == s.decode[0].stream_bytes()
            assert s.loads_are_zero()

    run(scenario())
