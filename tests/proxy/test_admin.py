"""Admin endpoints: add, drain, undrain, remove (draining), legacy paths."""

from __future__ import annotations

import asyncio
from typing import Any

from .backends import FakeEngine
from .harness import Stack, run, stack, wait_until

STREAM = {"prompt": "x", "stream": True}


async def admin(s: Stack, path: str, doc: Any) -> tuple[int, Any]:
    async with s.client.post(s.url + path, json=doc) as resp:
        return resp.status, await resp.json()


def test_add_then_remove_instances_at_run_time() -> None:
    async def scenario() -> None:
        async with stack() as s:
            extra = await FakeEngine("d9").start()
            status, doc = await admin(
                s, "/admin/instances/add", {"role": "decode", "urls": [extra.url]}
            )
            assert status == 200 and doc["action"] == "add"
            pool = s.proxy.router.pools["decode"]
            await wait_until(lambda: pool.healthy_count() == 2, "added decoder admitted")
            status, _ = await admin(s, "/admin/instances/remove", {"urls": [s.decode[0].url]})
            assert status == 200
            assert [i.url for i in pool.members] == [extra.url]
            for _ in range(3):
                status, _ = await s.post("/v1/completions", STREAM)
                assert status == 200
            assert len(extra.gen_requests()) == 3 and s.decode[0].gen_requests() == []
            await extra.stop()

    run(scenario())


def test_removal_drains_in_flight_work_before_dropping_the_instance() -> None:
    async def scenario() -> None:
        async with stack(decode=2, decode_policy="round-robin") as s:
            slow = s.decode[0]
            slow.fault, slow.tokens, slow.frame_delay = "slow_stream", 6, 0.05
            pending = asyncio.ensure_future(s.post("/v1/completions", STREAM))
            await wait_until(lambda: slow.in_handler == 1, "stream running on decode-0")
            status, doc = await admin(s, "/admin/instances/remove", {"urls": [slow.url]})
            assert status == 200
            listed = {i["name"]: i for i in doc["instances"]}
            assert listed["decode-0"]["state"] == "draining"
            status, out = await s.post("/v1/completions", STREAM)
            assert status == 200 and out == s.decode[1].stream_bytes()  # no new work on it
            status, out = await pending  # in-flight work completes
            assert status == 200 and out == slow.stream_bytes()
            pool = s.proxy.router.pools["decode"]
            assert [i.name for i in pool.members] == ["decode-1"]

    run(scenario())


def test_drain_and_undrain() -> None:
    async def scenario() -> None:
        async with stack(decode=2) as s:
            url = s.decode[0].url
            status, _ = await admin(s, "/admin/instances/drain", {"role": "decode", "urls": [url]})
            assert status == 200
            for _ in range(3):
                await s.post("/v1/completions", {"prompt": "x"})
            assert s.decode[0].gen_requests() == []
            status, _ = await admin(s, "/admin/instances/undrain", {"urls": [url]})
            pool = s.proxy.router.pools["decode"]
            await wait_until(lambda: pool.healthy_count() == 2, "undrained decoder back")

    run(scenario())


def test_legacy_instances_paths_of_the_example_proxy() -> None:
    async def scenario() -> None:
        async with stack() as s:
            extra = await FakeEngine("p9").start()
            hostport = extra.url.removeprefix("http://")
            status, _ = await admin(
                s, "/instances/add", {"type": "prefill", "instances": [hostport]}
            )
            assert status == 200
            pool = s.proxy.router.pools["prefill"]
            await wait_until(lambda: pool.healthy_count() == 2, "legacy add admitted")
            status, _ = await admin(
                s, "/instances/remove", {"type": "prefill", "instances": hostport}
            )
            assert status == 200 and len(pool.members) == 1
            await extra.stop()

    run(scenario())


def test_bad_admin_bodies_are_400_naming_the_field() -> None:
    async def scenario() -> None:
        async with stack() as s:
            cases = [
                ({"role": "decode"}, "urls"),
                ({"role": "decode", "urls": ["ftp://x"]}, "urls"),
                ({"role": "oracle", "urls": ["http://x:1"]}, "role"),
                ({"urls": ["http://127.0.0.1:1"]}, "role"),
                ({"urls": ["http://nowhere:1"], "extra": 1}, "extra"),
            ]
            for doc, field in cases:
                status, out = await admin(s, "/admin/instances/add", doc)
                assert status == 400 and field in out["error"]["message"], (doc, out)
            status, out = await admin(s, "/admin/instances/remove", {"urls": ["http://no:1"]})
            assert status == 400 and "not in the pools" in out["error"]["message"]

    run(scenario())
