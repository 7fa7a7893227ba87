"""Admin endpoints: off unless enabled, loopback-only without a key, and what they do."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from unittest import mock

from aiohttp.test_utils import make_mocked_request
from hypothesis import given, settings, strategies as st

from servekit.errors import UsageError
from servekit.proxy.admin import Change, admin_refusal, bearer_matches

from .backends import Spy
from .harness import SLOW_DECODE, Stack, run, stack, wait_until

STREAM = {"prompt": "x", "stream": True}


async def admin(s: Stack, path: str, doc: Any, **kw: Any) -> tuple[int, Any]:
    async with s.client.post(s.url + path, json=doc, **kw) as resp:
        raw = await resp.read()
        return resp.status, json.loads(raw) if resp.content_type == "application/json" else raw


def test_admin_endpoints_are_off_unless_enabled() -> None:
    async def scenario() -> None:
        async with stack() as s:
            body = {"role": "decode", "urls": ["http://10.9.9.9:1"]}
            for path in ("/admin/instances/add", "/instances/add"):
                status, _ = await admin(s, path, body)
                assert status == 404
            status, _ = await s.get("/admin/instances")
            assert status == 404
            assert [i.url for i in s.proxy.router.pools["decode"].members] == [s.decode[0].url]

    run(scenario())


def test_admin_key_is_required_when_set_and_the_client_key_does_not_open_admin() -> None:
    async def scenario() -> None:
        async with stack(admin=True, admin_key="adm1n", api_key="client") as s:
            client = {"Authorization": "Bearer client"}
            status, out = await admin(s, "/admin/instances/drain", {"urls": [s.decode[0].url]},
                                      headers=client)  # fmt: skip
            assert status == 401 and out["error"]["code"] == "unauthorized"
            status, _ = await s.get("/admin/instances", headers={"Authorization": "Bearer adm1n"})
            assert status == 200
            status, _ = await s.post("/v1/completions", {"prompt": "x"}, headers=client)
            assert status == 200

    run(scenario())


def remote_request(peer: str, headers: dict[str, str] | None = None) -> Any:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda k, d=None: (peer, 40000) if k == "peername" else d
    return make_mocked_request("POST", "/admin/instances/add", headers=headers, transport=transport)


def test_without_a_key_admin_answers_loopback_peers_only() -> None:
    for peer in ("127.0.0.1", "127.0.0.2", "::1"):
        assert admin_refusal(remote_request(peer), None) is None
    for peer in ("10.0.0.7", "192.168.1.2", "::ffff:10.0.0.7", "fe80::1"):
        refusal = admin_refusal(remote_request(peer), None)
        assert refusal is not None and refusal.status == 403
    keyed = remote_request("10.0.0.7", {"Authorization": "Bearer k3y"})
    assert admin_refusal(keyed, "k3y") is None
    loop_no_key = remote_request("127.0.0.1")
    refusal = admin_refusal(loop_no_key, "k3y")
    assert refusal is not None and refusal.status == 401  # a key, once set, is always needed


def test_bearer_comparison() -> None:
    # RFC 9110 11.1: the scheme is case-insensitive; one or more spaces before the token
    for header in ("Bearer abc", "bearer abc", "BEARER abc", "bEaReR abc", "Bearer  abc"):
        assert bearer_matches(header, "abc"), header
    for header in (None, "", "Bearer ab", "Bearer abcd", "Bearer abc ", "Bearer é", "Basic abc",
                   "Bearerabc", "Bearer\tabc", "abc", "Bearer", "Bearer ", "xBearer abc"):  # fmt: skip
        assert not bearer_matches(header, "abc"), header


def test_add_then_remove_instances_at_run_time() -> None:
    async def scenario() -> None:
        async with stack(decode=2, admin=True) as s:
            extra = s.decode[1].url
            pool = s.proxy.router.pools["decode"]
            await admin(s, "/admin/instances/remove", {"urls": [extra]})
            assert [i.url for i in pool.members] == [s.decode[0].url]
            status, doc = await admin(
                s, "/admin/instances/add", {"role": "decode", "urls": [extra]}
            )
            assert status == 200 and doc["action"] == "add"
            await wait_until(lambda: pool.healthy_count() == 2, "added decoder admitted")
            status, _ = await admin(s, "/admin/instances/remove", {"urls": [s.decode[0].url]})
            assert status == 200
            assert [i.url for i in pool.members] == [extra]
            before = len(s.decode[0].gen())
            for _ in range(3):
                status, _ = await s.post("/v1/completions", STREAM)
                assert status == 200
            assert len(s.decode[1].gen()) == 3 and len(s.decode[0].gen()) == before

    run(scenario())


def test_removal_drains_in_flight_work_before_dropping_the_instance() -> None:
    async def scenario() -> None:
        async with stack(decode=2, decode_policy="round-robin", admin=True,
                         sim={"profile": SLOW_DECODE}) as s:  # fmt: skip
            slow = s.decode[0]
            body = {**STREAM, "max_tokens": 12}
            pending = asyncio.ensure_future(s.post("/v1/completions", body))
            await wait_until(slow.busy, "stream running on decode-0")
            status, doc = await admin(s, "/admin/instances/remove", {"urls": [slow.url]})
            assert status == 200
            listed = {i["name"]: i for i in doc["instances"]}
            assert listed["decode-0"]["state"] == "draining"
            status, out = await s.post("/v1/completions", {**STREAM, "max_tokens": 2})
            assert status == 200 and out == s.decode[1].gen()[-1].answer  # no new work on it
            status, out = await pending  # in-flight work completes
            assert status == 200 and out == slow.gen()[-1].answer
            pool = s.proxy.router.pools["decode"]
            assert [i.name for i in pool.members] == ["decode-1"]

    run(scenario())


def test_drain_and_undrain() -> None:
    async def scenario() -> None:
        async with stack(decode=2, admin=True) as s:
            url = s.decode[0].url
            status, _ = await admin(s, "/admin/instances/drain", {"role": "decode", "urls": [url]})
            assert status == 200
            for _ in range(3):
                await s.post("/v1/completions", {"prompt": "x"})
            assert s.decode[0].gen() == []
            status, _ = await admin(s, "/admin/instances/undrain", {"urls": [url]})
            pool = s.proxy.router.pools["decode"]
            await wait_until(lambda: pool.healthy_count() == 2, "undrained decoder back")

    run(scenario())


def test_legacy_instances_paths_of_the_example_proxy() -> None:
    async def scenario() -> None:
        async with stack(admin=True) as s:
            extra = await Spy(s.prefill[0].ep.url).start()
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
        async with stack(admin=True) as s:
            cases = [
                ({"role": "decode"}, "urls"),
                ({"role": "decode", "urls": ["ftp://x"]}, "urls"),
                ({"role": "decode", "urls": "http://x:1"}, "urls"),
                ({"role": "oracle", "urls": ["http://x:1"]}, "role"),
                ({"urls": ["http://127.0.0.1:1"]}, "role"),
                ({"urls": ["http://nowhere:1"], "extra": 1}, "extra"),
                ([1, 2], "body"),
            ]
            for doc, field in cases:
                status, out = await admin(s, "/admin/instances/add", doc)
                assert status == 400 and field in out["error"]["message"], (doc, out)
            status, out = await admin(s, "/admin/instances/remove", {"urls": ["http://no:1"]})
            assert status == 400 and "not in the pools" in out["error"]["message"]

    run(scenario())


def test_kv_event_subscriptions_follow_admin_adds_and_removals() -> None:
    async def scenario() -> None:
        sim = {"kv_events": {"endpoint": "tcp://*:0"}}
        async with stack(prefill=2, admin=True, prefill_policy="kv-events", sim=sim) as s:
            kv = s.proxy.router.kv
            assert kv is not None
            url, publisher = s.prefill[1].url, s.prefill[1].ep.kv_events.endpoint  # type: ignore[union-attr]
            assert url not in kv.sources  # started without --kv-events for it
            await admin(s, "/admin/instances/remove", {"urls": [url]})
            status, _ = await admin(s, "/admin/instances/add", {
                "role": "prefill", "urls": [url], "kv_events": {url: publisher}})  # fmt: skip
            assert status == 200 and kv.sources[url].endpoint == publisher
            await wait_until(lambda: kv.live(url), "the added engine's feed is live")
            budget = s.proxy.router.config.kv_index_bytes
            assert kv.indexes[url].max_bytes == budget // len(kv.sources)  # shared again
            status, out = await admin(s, "/admin/instances/add", {
                "role": "prefill", "urls": [url], "kv_events": {"http://x:1": publisher}})  # fmt: skip
            assert status == 400 and "not one of urls" in out["error"]["message"]
            await admin(s, "/admin/instances/remove", {"urls": [url]})
            assert url not in kv.sources and url not in kv.subscribers and url not in kv.indexes

    run(scenario())


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5000) | st.floats() | st.text(max_size=12),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=10), kids,
                                                              max_size=4),
    max_leaves=16,
)  # fmt: skip
KEYS = st.sampled_from(["role", "urls", "pod", "kv_events", "bootstrap", "wait_s", "other"])


URLS = st.lists(st.sampled_from(["http://a:1", "http://b:2", "x\ny", "http://c:3\n"]),
                min_size=1, max_size=3)  # fmt: skip


@st.composite
def listed_maps(draw: st.DrawFn) -> dict[str, Any]:
    """Bodies whose kv_events and bootstrap name listed URLs (so their values are read)."""
    urls = draw(URLS)
    values = st.text(max_size=30) | st.sampled_from(["tcp://h:1", "e=http://h:1", "tcp://h:1,x"])
    body: dict[str, Any] = {"role": "prefill", "urls": urls}
    for key in ("kv_events", "bootstrap"):
        body[key] = draw(st.dictionaries(st.sampled_from(urls), values, max_size=2))
    return body


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(KEYS, JSONISH, max_size=6) | JSONISH | listed_maps())
def test_any_admin_body_is_read_or_refused_in_one_line_naming_the_field(doc: Any) -> None:
    try:
        change = Change.parse(doc)
    except UsageError as exc:
        assert "\n" not in exc.message and ":" in exc.message
        return
    assert 0 <= change.wait_s <= 3600 and (change.urls or change.pod)
