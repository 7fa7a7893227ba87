"""API key, body size limit, and what error bodies reveal."""

from __future__ import annotations

import json

from .harness import run, stack


def test_api_key_is_required_checked_and_forwarded() -> None:
    async def scenario() -> None:
        async with stack(api_key="s3cret") as s:
            status, out = await s.post("/v1/completions", {"prompt": "x"})
            assert status == 401 and json.loads(out)["error"]["code"] == "unauthorized"
            for wrong in ("Bearer wrong", "Bearer s3cre", "Bearer s3cret2", "s3cret"):
                status, _ = await s.post("/v1/completions", {"prompt": "x"},
                                         headers={"Authorization": wrong})  # fmt: skip
                assert status == 401, wrong
            assert s.prefill[0].gen() == []
            good = {"Authorization": "Bearer s3cret"}
            status, _ = await s.post("/v1/completions", {"prompt": "x"}, headers=good)
            assert status == 200
            for node in (s.prefill[0], s.decode[0]):
                assert node.gen()[0].headers["Authorization"] == "Bearer s3cret"
            for path in ("/health", "/healthcheck", "/metrics", "/metrics/engines"):
                async with s.client.get(s.url + path) as resp:  # open for probes and scrapes
                    assert resp.status == 200, path
            async with s.client.get(s.url + "/v1/models") as resp:
                assert resp.status == 401

    run(scenario())


def test_body_size_limit_gives_413_json() -> None:
    async def scenario() -> None:
        async with stack(max_body_bytes=1000) as s:
            status, out = await s.post("/v1/completions", {"prompt": "x" * 2000})
            assert status == 413 and json.loads(out)["error"]["code"] == "payload_too_large"
            assert s.prefill[0].gen() == []
            status, _ = await s.post("/v1/completions", {"prompt": "x" * 100})
            assert status == 200

    run(scenario())


def test_error_bodies_do_not_leak_backend_addresses() -> None:
    async def scenario() -> None:
        async with stack(max_attempts=1, health_interval_s=30) as s:
            urls = [s.prefill[0].url, s.decode[0].url]
            s.decode[0].fault(reset_rate=1.0, reset_after_tokens=0)
            status, out = await s.post("/v1/completions", {"prompt": "x", "stream": True})
            assert status == 502
            text = out.decode()
            assert not any(u in text or u.split("//")[1] in text for u in urls)
            assert "decode-0" in text  # named, not addressed

    run(scenario())
