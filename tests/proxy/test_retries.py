"""Retries that never reuse consumed KV, and outlier ejection (issue 13, items 7 and 8).

Item 7: a decoder that resets after reading the request has pulled the
prefilled blocks; resending the same ``remote_block_ids`` got 400 "already
consumed". Item 8: a decoder that fails at once looks least loaded and took
most of the traffic (165 of 200 requests failed beside a healthy decoder).
"""

from __future__ import annotations

import json

from .harness import MODEL, run, stack
from .test_metrics import value

STREAM = {"model": MODEL, "prompt": "tell me more", "max_tokens": 4, "stream": True}
PLAIN = {"model": MODEL, "prompt": "tell me more", "max_tokens": 4}


def block_ids(node: object) -> list[object]:
    return [g.body["kv_transfer_params"]["remote_block_ids"] for g in node.gen()]  # type: ignore[attr-defined]


def test_a_decode_retry_runs_a_new_prefill_and_never_resends_consumed_blocks() -> None:
    async def scenario() -> None:
        async with stack(decode=2, decode_policy="round-robin", health_interval_s=30) as s:
            s.decode[0].fault(reset_rate=1.0, reset_after_tokens=0)  # resets after taking the KV
            for body in (STREAM, PLAIN):
                status, out = await s.post("/v1/completions", body)
                assert status == 200, out
            sent = block_ids(s.decode[0]) + block_ids(s.decode[1])
            assert len(sent) == 4 and len({json.dumps(b) for b in sent}) == 4  # each used once
            assert len(s.prefill[0].gen()) == 4  # one prefill per decode attempt
            _, raw = await s.get("/metrics")
            assert value(raw.decode(), "servekit_proxy_retries_total", stage="decode") == 2

    run(scenario())


def test_when_every_decoder_fails_the_client_gets_502_not_a_consumed_kv_error() -> None:
    async def scenario() -> None:
        async with stack(decode=2, health_interval_s=30) as s:
            for n in s.decode:
                n.fault(reset_rate=1.0, reset_after_tokens=0)
            status, out = await s.post("/v1/completions", STREAM)
            assert status == 502 and json.loads(out)["error"]["stage"] == "decode"
            sent = block_ids(s.decode[0]) + block_ids(s.decode[1])
            assert len(sent) == 2 and sent[0] != sent[1]

    run(scenario())


def test_prompt_keyed_decode_retries_without_a_new_prefill() -> None:
    async def scenario() -> None:
        async with stack(decode=2, mode="prompt-keyed",
                         sim={"kv_mode": "prompt", "guard_mode": "prompt-keyed"},
                         decode_policy="round-robin", health_interval_s=30) as s:  # fmt: skip
            s.decode[0].fault(error_rate=1.0, error_status=500)
            status, _ = await s.post("/v1/completions", STREAM)
            assert status == 200
            assert len(s.prefill[0].gen()) == 1  # the KV is found by prompt: no second prefill

    run(scenario())


async def failures(s: object, n: int, body: dict[str, object]) -> int:
    """Send ``n`` requests (prompts differ, so ties do not all break the same way)."""
    failed = 0
    for i in range(n):
        one = {**body, "prompt": f"{body['prompt']} {i}"}
        status, _ = await s.post("/v1/completions", one)  # type: ignore[attr-defined]
        failed += status != 200
    return failed


def test_a_failing_decoder_cannot_funnel_traffic_it_is_ejected_and_retried_around() -> None:
    for fault in ({"error_rate": 1.0, "error_status": 500}, {"empty_rate": 1.0}):

        async def scenario(fault: dict[str, object] = fault) -> None:
            async with stack(decode=2, outlier_after=3, outlier_eject_s=600.0) as s:
                s.decode[0].fault(**fault)
                assert await failures(s, 200, STREAM) == 0
                assert s.state("decode-0") == "ejected"
                assert len(s.decode[0].gen()) == 3  # three strikes, then no more traffic
                _, raw = await s.get("/metrics")
                text = raw.decode()
                assert value(text, "servekit_proxy_outlier_ejections_total", role="decode") == 1

        run(scenario())


def test_a_dead_decoder_is_ejected_on_connection_errors_before_the_probes_notice() -> None:
    async def scenario() -> None:
        async with stack(decode=2, health_interval_s=30, outlier_after=3) as s:
            await s.decode[0].spy.stop()  # connection refused from now on
            assert await failures(s, 50, PLAIN) == 0
            assert s.state("decode-0") == "ejected"

    run(scenario())


def test_failing_prefill_is_retried_on_another_prefill() -> None:
    async def scenario() -> None:
        async with stack(prefill=2, prefill_policy="round-robin", outlier_eject_s=600.0) as s:
            s.prefill[0].fault(error_rate=1.0, error_status=503)
            assert await failures(s, 20, PLAIN) == 0
            assert s.state("prefill-0") == "ejected"

    run(scenario())


def test_the_last_healthy_instance_is_never_ejected_as_an_outlier() -> None:
    async def scenario() -> None:
        async with stack(outlier_after=2, health_interval_s=30) as s:
            s.decode[0].fault(error_rate=1.0, error_status=500)
            assert await failures(s, 5, PLAIN) == 5
            assert s.state("decode-0") == "healthy"  # 502s, not "no healthy instance"
            s.decode[0].fault(error_rate=0.0)
            assert await failures(s, 2, PLAIN) == 0

    run(scenario())
