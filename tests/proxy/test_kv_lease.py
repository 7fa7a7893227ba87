"""The KV lease: decode params older than the prefill's lease never reach a decoder.

The decode leg is delayed where a loaded decoder delays it: the connection to it
takes longer than the lease (the proxy's connector is slowed for the decoder's
port). The proxy must not write the stale params; it prefills again, and the
decoder's spy sees only fresh ones.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from .harness import Stack, stack
from .test_errors import error_of

LEASE = {"kv_lease_s": 1.0, "migration_limit": 0}
BODY = {"model": "sim-model", "prompt": "lease me", "max_tokens": 4, "temperature": 0}


def slow_connections(s: Stack, delays: list[float]) -> None:
    """Each generation request to the decoder first waits the next of ``delays`` for its
    connection (then none)."""
    connector: Any = s.proxy.router.session.connector
    original = connector.connect
    port = s.decode[0].url.rsplit(":", 1)[1]

    async def connect(req: Any, *args: Any, **kwargs: Any) -> Any:
        if str(req.url.port) == port and req.method == "POST" and delays:  # not probes
            await asyncio.sleep(delays.pop(0))
        return await original(req, *args, **kwargs)

    connector.connect = connect


async def lease_metric(s: Stack) -> float:
    _, page = await s.get("/metrics")
    line = next(x for x in page.decode().splitlines() if x.startswith("servekit_proxy_kv_lease"))
    return float(line.split()[-1])


@pytest.mark.parametrize("stream", [False, True])
def test_a_decode_delayed_past_the_lease_gets_a_fresh_prefill(stream: bool) -> None:
    async def scenario() -> None:
        async with stack(**LEASE) as s:
            slow_connections(s, [1.3])
            status, out = await s.post("/v1/completions", {**BODY, "stream": stream})
            assert status == 200 and out
            prefills, decodes = s.prefill[0].spy.gen(), s.decode[0].spy.gen()
            assert len(prefills) == 2 and len(decodes) == 1  # the stale body was never sent
            fresh = json.loads(prefills[1].answer)["kv_transfer_params"]
            assert decodes[0].body["kv_transfer_params"] == fresh
            assert await lease_metric(s) == 1

    asyncio.run(scenario())


def test_without_a_lease_the_delayed_params_are_sent_positive_control() -> None:
    async def scenario() -> None:
        async with stack(migration_limit=0) as s:
            slow_connections(s, [1.3])
            status, _ = await s.post("/v1/completions", BODY)
            assert status == 200
            assert len(s.prefill[0].spy.gen()) == 1 and len(s.decode[0].spy.gen()) == 1

    asyncio.run(scenario())


@pytest.mark.slow
def test_a_lease_always_passed_is_a_clear_504_and_no_decoder_saw_params() -> None:
    async def scenario() -> None:
        async with stack(**LEASE, max_attempts=2) as s:
            slow_connections(s, [1.3, 1.3])
            status, out = await s.post("/v1/completions", BODY)
            assert status == 504 and error_of(out)["code"] == "kv_lease_expired"
            assert error_of(out)["stage"] == "decode"
            assert len(s.prefill[0].spy.gen()) == 2 and s.decode[0].spy.gen() == []

    asyncio.run(scenario())
