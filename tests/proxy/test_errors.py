"""Failure semantics: pass-through, retries, stream errors, timeouts, disconnects."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from .harness import MODEL, SLOW_DECODE, run, stack, wait_until
from .test_metrics import value

STREAM = {"model": MODEL, "prompt": "hello", "max_tokens": 4, "stream": True}
PLAIN = {"model": MODEL, "prompt": "hello", "max_tokens": 4}


def error_of(raw: bytes) -> dict[str, str]:
    return json.loads(raw)["error"]  # type: ignore[no-any-return]


def test_backend_4xx_passes_through_with_its_body_and_is_not_retried() -> None:
    async def scenario() -> None:
        async with stack(prefill=2) as s:
            for n in s.prefill:
                n.fault(error_rate=1.0, error_status=422)
            status, out = await s.post("/v1/completions", STREAM)
            assert status == 422 and error_of(out)["message"] == "injected fault"
            assert sum(len(n.gen()) for n in s.prefill) == 1
            assert s.decode[0].gen() == []
            for n in s.prefill:
                n.fault(error_rate=0.0)
            s.decode[0].fault(error_rate=1.0, error_status=400)
            status, out = await s.post("/v1/completions", PLAIN)
            assert status == 400 and out == s.decode[0].gen()[0].answer
            assert len(s.decode[0].gen()) == 1
            assert s.loads_are_zero()

    run(scenario())


def test_backend_5xx_becomes_502_naming_the_stage_when_no_instance_serves() -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.decode[0].fault(error_rate=1.0, error_status=500)
            status, out = await s.post("/v1/completions", STREAM)
            err = error_of(out)
            assert status == 502 and err["stage"] == "decode" and err["code"] == "upstream_error"
            assert s.decode[0].url not in out.decode()  # no address without --debug

    run(scenario())


def test_debug_names_the_backend_address_in_errors() -> None:
    async def scenario() -> None:
        async with stack(debug=True) as s:
            s.prefill[0].fault(error_rate=1.0, error_status=503)
            status, out = await s.post("/v1/completions", PLAIN)
            assert status == 502 and s.prefill[0].url in error_of(out)["message"]

    run(scenario())


def test_decoder_empty_200_never_reaches_the_client_as_200() -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.decode[0].fault(empty_rate=1.0)
            for body in (STREAM, PLAIN):
                status, out = await s.post("/v1/completions", body)
                assert status == 502 and error_of(out)["stage"] == "decode"

    run(scenario())


def test_connection_failure_before_first_byte_retries_on_another_instance() -> None:
    async def scenario() -> None:
        async with stack(prefill=2, decode=2, prefill_policy="round-robin",
                         decode_policy="round-robin", health_interval_s=30,
                         outlier_after=1) as s:  # fmt: skip
            await s.prefill[0].spy.stop()  # nothing listens there any more
            s.decode[0].fault(reset_rate=1.0, reset_after_tokens=0)
            for _ in range(2):
                status, out = await s.post("/v1/completions", STREAM)
                assert status == 200 and out.endswith(b"data: [DONE]\n\n")
            assert s.state("prefill-0") == "ejected" and s.state("decode-0") == "ejected"
            assert out == s.decode[1].gen()[-1].answer
            assert len(s.decode[1].gen()) == 2
            assert s.loads_are_zero()

    run(scenario())


def test_all_instances_failing_gives_502_after_bounded_attempts() -> None:
    async def scenario() -> None:
        async with stack(decode=2, max_attempts=2, health_interval_s=30) as s:
            for n in s.decode:
                n.fault(reset_rate=1.0, reset_after_tokens=0)
            status, out = await s.post("/v1/completions", STREAM)
            err = error_of(out)
            assert status == 502 and err["code"] == "connect_failed" and err["stage"] == "decode"
            assert sum(len(n.gen()) for n in s.decode) == 2
            assert len(s.prefill[0].gen()) == 2  # each decode attempt had its own prefill

    run(scenario())


def test_reset_after_first_byte_ends_stream_with_error_event_and_no_retry() -> None:
    async def scenario() -> None:
        async with stack(decode=2) as s:
            for n in s.decode:
                n.fault(reset_rate=1.0, reset_after_tokens=2)
            status, out = await s.post("/v1/completions", {**STREAM, "max_tokens": 8})
            assert status == 200
            events = [e for e in out.split(b"\n\n") if e]
            (dec,) = [g for n in s.decode for g in n.gen()]  # one attempt only
            assert out.startswith(dec.answer) and dec.answer
            err = json.loads(events[-2].removeprefix(b"data: "))["error"]
            assert err["code"] == "stream_interrupted" and err["stage"] == "decode"
            assert events[-1] == b"data: [DONE]"
            assert s.loads_are_zero()

    run(scenario())


def test_hanging_stage_times_out_with_504_and_the_engine_drops_the_request() -> None:
    async def scenario() -> None:
        # only the hanging stage has a short timeout: a loaded machine never
        # makes the stage that answers look hung
        async with stack(prefill_timeout_s=0.3, decode_timeout_s=30.0) as s:
            s.prefill[0].fault(hang=True)
            status, out = await s.post("/v1/completions", STREAM)
            assert status == 504 and error_of(out)["stage"] == "prefill"
            await wait_until(lambda: not s.prefill[0].busy(), "prefill request aborted")
            assert s.loads_are_zero()
        async with stack(prefill_timeout_s=30.0, decode_timeout_s=0.3) as s:
            s.decode[0].fault(hang=True)
            status, out = await s.post("/v1/completions", PLAIN)
            assert status == 504 and error_of(out)["stage"] == "decode"
            await wait_until(lambda: not s.decode[0].busy(), "decode request aborted")
            assert s.loads_are_zero()

    run(scenario())


def test_client_disconnect_mid_stream_aborts_decode_releases_load_and_is_counted() -> None:
    async def scenario() -> None:
        async with stack(sim={"profile": SLOW_DECODE}) as s:
            async with aiohttp.ClientSession() as c:
                resp = await c.post(s.url + "/v1/completions", json={**STREAM, "max_tokens": 200})
                assert resp.status == 200
                await resp.content.readany()
                await wait_until(lambda: not s.loads_are_zero(), "load visible in flight")
                resp.close()
            await wait_until(lambda: not s.decode[0].busy(), "decoder dropped the sequence")
            await wait_until(s.loads_are_zero, "accounting released")
            _, raw = await s.get("/metrics")
            text = raw.decode()
            assert value(text, "servekit_proxy_client_disconnects_total", stage="stream") == 1

    run(scenario())


def test_client_disconnect_during_prefill_aborts_prefill_skips_decode_and_is_counted() -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.prefill[0].fault(hang=True)
            async with aiohttp.ClientSession() as c:
                task = asyncio.ensure_future(c.post(s.url + "/v1/completions", json=STREAM))
                await wait_until(s.prefill[0].busy, "prefill started")
                task.cancel()
            await wait_until(lambda: not s.prefill[0].busy(), "prefill saw the disconnect")
            await wait_until(s.loads_are_zero, "accounting released")
            assert s.decode[0].gen() == []
            _, raw = await s.get("/metrics")
            text = raw.decode()
            assert value(text, "servekit_proxy_client_disconnects_total", stage="prefill") == 1
            route = "/v1/completions"
            assert value(text, "servekit_proxy_requests_total", route=route, status="499") == 1

    run(scenario())


def test_bad_json_and_non_object_bodies_are_400() -> None:
    async def scenario() -> None:
        async with stack() as s:
            for data in (b"{not json", b"[1, 2]", b"[" * 100_000):
                async with s.client.post(s.url + "/v1/completions", data=data) as resp:
                    assert resp.status == 400
                    assert (await resp.json())["error"]["code"] == "bad_request"
            assert s.prefill[0].gen() == []

    run(scenario())


def test_decode_timeout_bounds_the_first_byte_not_the_whole_stream() -> None:
    async def scenario() -> None:
        async with stack(decode_timeout_s=0.3, sim={"profile": SLOW_DECODE}) as s:
            s.decode[0].fault(hang=True)
            status, out = await s.post("/v1/completions", STREAM)
            assert status == 504 and error_of(out) == {
                "message": "decode decode-0 timed out",
                "type": "proxy_error",
                "code": "timeout",
                "stage": "decode",
            }
            # a stream longer than the timeout, with short gaps, runs to the end
            s.decode[0].fault(hang=False)
            status, out = await s.post("/v1/completions", {**STREAM, "max_tokens": 12})
            assert status == 200 and out == s.decode[0].gen()[-1].answer
            assert out.endswith(b"data: [DONE]\n\n")
            assert s.loads_are_zero()

    run(scenario())


def test_one_prefill_budget_for_the_whole_request() -> None:
    """Every decode attempt runs a prefill; they draw on one budget of --max-attempts, and a
    prefill that failed the request is not chosen again (each decode attempt's prefill had
    a budget of its own: here 3 decode attempts would have run 6 failing prefills)."""

    async def scenario() -> None:
        async with stack(prefill=9, decode=3, max_attempts=3, health_interval_s=30,
                         outlier_after=10, prefill_policy="round-robin") as s:  # fmt: skip
            for n in s.decode:
                n.fault(reset_rate=1.0, reset_after_tokens=0)
            for i, n in enumerate(s.prefill):
                if i % 3 != 2:  # two of every three fail
                    n.fault(error_rate=1.0, error_status=500)
            status, out = await s.post("/v1/completions", STREAM)
            assert status == 502, out
            prefills = sum(len(n.gen()) for n in s.prefill)
            failed = sum(len(n.gen()) for i, n in enumerate(s.prefill) if i % 3 != 2)
            assert failed == 3 and prefills <= 5, (failed, prefills)
            assert all(len(n.gen()) <= 1 for n in s.prefill)  # none chosen twice
            assert s.loads_are_zero()

    run(scenario())
