"""Request migration on the simulator: a decoder that fails mid-answer is replaced.

The uninterrupted answers are read first (no faults); then one decoder resets its
connection after a few streamed tokens and the same requests (same X-Request-Id,
so the same ``id``) must come back byte for byte, ``created`` aside.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from servekit.proxy.config import ProxyConfig
from servekit.proxy.server import RunningProxy, start_proxy
from servekit.proxy.tape import Tape
from servekit.sim.testing import RunningSim, running_sim

from .harness import FAST_HEALTH, wait_until
from .test_with_sim import frames

CREATED = re.compile(rb'"(created|cached_tokens)":\d+')  # a clock and the cache's state


def spec(prefills: int = 1, decoders: int = 2) -> dict[str, Any]:
    eps = [{"name": f"p{i}", "port": 0, "role": "prefill"} for i in range(prefills)]
    eps += [{"name": f"d{i}", "port": 0, "role": "decode"} for i in range(decoders)]
    return {"endpoints": eps}


@asynccontextmanager
async def proxy_for(sim: RunningSim, **cfg: Any) -> AsyncIterator[RunningProxy]:
    """A proxy over every prefill (p*) and decoder (d*) of ``sim``."""
    urls = sim.urls
    role = {"p": "prefill", "d": "decode"}
    pools = {r: tuple(u for n, u in urls.items() if role[n[0]] == r) for r in role.values()}
    # Health probes are patient here (5 s): on a loaded machine a probe of a busy but
    # healthy decoder took over FAST_HEALTH's 0.5 s, the decoder left the pool and a
    # stream had nowhere to migrate; a reset decoder is seen by its answers, not probes.
    health = {**FAST_HEALTH, "health_timeout_s": 5.0}
    proxy = await start_proxy(ProxyConfig(**pools, port=0, **{**health, **cfg}))
    try:
        await wait_until(lambda: all(i.routable for i in proxy.router.instances()), "admitted")
        yield proxy
    finally:
        await proxy.stop()


def completion(n: int, **extra: Any) -> tuple[str, dict[str, Any]]:
    body = {
        "model": "sim-model", "prompt": f"request {n}: tell me about proxies", "max_tokens": 24,
        "ignore_eos": True, "temperature": 0, "stream": True, **extra,
    }  # fmt: skip
    return "/v1/completions", body


def chat(n: int) -> tuple[str, dict[str, Any]]:
    body = {
        "model": "sim-model", "messages": [{"role": "user", "content": f"chat {n}: hello"}],
        "max_tokens": 20, "ignore_eos": True, "temperature": 0, "stream": True,
    }  # fmt: skip
    return "/v1/chat/completions", body


async def ask(
    c: aiohttp.ClientSession, url: str, req: tuple[str, dict[str, Any]], rid: str
) -> bytes:
    async with c.post(url + req[0], json=req[1], headers={"X-Request-Id": rid}) as r:
        assert r.status == 200
        return CREATED.sub(rb'"\1":0', await r.read())


def text_of(raw: bytes) -> str:
    out = []
    for f in frames(raw)[:-1]:
        for choice in json.loads(f).get("choices", []):
            out.append(choice.get("text") or choice.get("delta", {}).get("content") or "")
    return "".join(out)


async def metric(c: aiohttp.ClientSession, url: str, name: str) -> float:
    async with c.get(url + "/metrics") as r:
        text = await r.text()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def reset_decoder(sim: RunningSim, name: str, after: int) -> None:
    sim.set_faults(name, reset_rate=1.0, reset_after_tokens=after)


def test_a_decoder_reset_mid_answer_is_migrated_byte_for_byte() -> None:
    reqs = [completion(i) for i in range(4)] + [chat(i) for i in range(4)]
    reqs.append(completion(9, stream_options={"include_usage": True}))
    with running_sim(spec()) as sim:

        async def scenario() -> None:
            async with proxy_for(sim) as proxy, aiohttp.ClientSession() as c:
                before = [await ask(c, proxy.url, r, f"rid{i}") for i, r in enumerate(reqs)]
                reset_decoder(sim, "d0", 5)
                after = [await ask(c, proxy.url, r, f"rid{i}") for i, r in enumerate(reqs)]
                moved = await metric(c, proxy.url, 'servekit_proxy_migrations_total{outcome="ok"}')
                async with c.get(proxy.url + "/metrics") as r:
                    assert 'servekit_proxy_errors_total{kind="stream_interrupted"' not in (
                        await r.text()
                    )
            assert moved >= 1  # d0 served at least one before outlier ejection
            for b, a in zip(before, after, strict=True):
                assert a == b
                assert frames(a)[-1] == b"[DONE]"
                assert b"token_ids" not in a  # asked by the proxy, not by the client
            assert len(text_of(after[0])) > 0

        asyncio.run(scenario())


def test_token_ids_stay_when_the_client_asked_and_usage_counts_from_its_prompt() -> None:
    req = completion(1, return_token_ids=True, stream_options={"include_usage": True})
    with running_sim(spec(decoders=1)) as sim:

        async def scenario() -> None:
            async with proxy_for(sim) as proxy, aiohttp.ClientSession() as c:
                raw = await ask(c, proxy.url, req, "keep")
            docs = [json.loads(f) for f in frames(raw)[:-1]]
            ids = [t for d in docs for ch in d["choices"] for t in ch.get("token_ids", [])]
            assert len(ids) == 24
            assert docs[0]["choices"][0]["prompt_token_ids"]
            assert docs[-1]["usage"]["completion_tokens"] == 24

        asyncio.run(scenario())


def test_migration_off_or_exhausted_ends_the_stream_with_the_error_event() -> None:
    with running_sim(spec()) as sim:
        reset_decoder(sim, "d0", 5)
        reset_decoder(sim, "d1", 5)

        async def scenario() -> None:
            for limit in (0, 2):
                async with (
                    proxy_for(sim, migration_limit=limit) as proxy,
                    aiohttp.ClientSession() as c,
                ):
                    raw = await ask(c, proxy.url, completion(3), "x")
                    name = "servekit_proxy_migrations_total"
                    ok = await metric(c, proxy.url, name + '{outcome="ok"}')
                    failed = await metric(c, proxy.url, name + '{outcome="failed"}')
                got = frames(raw)
                assert got[-1] == b"[DONE]"
                assert json.loads(got[-2])["error"]["code"] == "stream_interrupted"
                assert text_of(raw)  # what was sent stays; never an empty 200
                # limit 2: carried once to the other decoder, which fails too; then none left
                assert (ok, failed) == ((1, 1) if limit else (0, 0))

        asyncio.run(scenario())


@pytest.mark.slow
def test_200_streams_survive_a_decoder_of_2p2d_resetting_mid_answer() -> None:
    reqs = [completion(i) if i % 2 else chat(i) for i in range(200)]
    with running_sim(spec(prefills=2, decoders=2)) as sim:

        async def scenario() -> None:
            async with (
                proxy_for(sim, max_connections=1024) as proxy,
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as c,
            ):
                before = await asyncio.gather(
                    *(ask(c, proxy.url, r, f"load{i}") for i, r in enumerate(reqs))
                )
                reset_decoder(sim, "d1", 6)
                after = await asyncio.gather(
                    *(ask(c, proxy.url, r, f"load{i}") for i, r in enumerate(reqs))
                )
                moved = await metric(c, proxy.url, 'servekit_proxy_migrations_total{outcome="ok"}')
            cut = sum(b"stream_interrupted" in a for a in after)
            differ = sum(a != b for a, b in zip(after, before, strict=True))
            assert (cut, differ) == (0, 0)
            assert moved >= 1

        asyncio.run(scenario())


def test_the_tape_reads_the_same_events_however_the_stream_is_cut() -> None:
    """Chunks end anywhere (inside a token id list too): what the client gets and the
    ids collected do not depend on where."""
    head = '{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":'
    events = [
        head + '[{"index":0,"text":" a","prompt_token_ids":[5,6,7],"token_ids":[11]}]}',
        head + '[{"index":0,"text":" b \\",\\"token_ids\\":[9]","token_ids":[12,13]}]}',
        "[DONE]",
    ]
    raw = "".join(f"data: {e}\n\n" for e in events).encode()
    whole = Tape("/v1/completions", {})
    expected = whole.feed(raw)
    assert b"token_ids" not in expected.replace(b'\\"token_ids\\"', b"")  # text kept as is
    assert (whole.prompt, whole.sent.ids, whole.done) == (b"5,6,7", [11, 12, 13], True)
    for cut in range(1, len(raw)):
        tape = Tape("/v1/completions", {})
        got = tape.feed(raw[:cut]) + tape.feed(raw[cut:])
        assert got == expected and tape.sent.ids == [11, 12, 13]


def test_an_event_that_never_ends_is_not_held_past_the_answer_cap() -> None:
    """An engine streaming one endless event: the tape keeps at most the cap, then gives
    the stream up (the events before it still reach the client) and never carries it on."""
    head = '{"id":"c","object":"text_completion","created":1,"model":"m","choices":'
    first = f'data: {head}[{{"index":0,"text":" a","prompt_token_ids":[5],"token_ids":[11]}}]}}\n\n'
    endless = b'data: {"choices":[{"text":"' + b"x" * 4096
    for cap, gives_up in ((1024, True), (1 << 20, False)):  # the control: under the cap
        tape = Tape("/v1/completions", {}, max_event_bytes=cap)
        out = tape.feed(first.encode() + endless)
        for _ in range(3):
            out += tape.feed(b"x" * 4096)
        assert out.startswith(b"data: ") and b" a" in out and b"xxxx" not in out
        assert (tape.failed, tape.oversized) == (gives_up, gives_up)
        assert tape.splitter.held <= (0 if gives_up else 5 * 4096 + len(endless))
        assert (tape.carry().how == "refused") == gives_up


@pytest.mark.slow
def test_a_decoder_killed_mid_answer_is_migrated() -> None:
    """EngineDeadError mid-stream (the engine dies: an error event, then the end)."""
    slow = {"name": "slow", "decode_step_s": [[1, 0.05]]}  # a token every 50 ms
    eps = spec()["endpoints"]
    for ep in eps:
        ep["profile"] = slow
    req = completion(7)
    with running_sim({"endpoints": eps}) as sim:

        async def scenario() -> None:
            async with proxy_for(sim) as proxy, aiohttp.ClientSession() as c:
                whole = await ask(c, proxy.url, req, "kill")
                async with c.post(
                    proxy.url + req[0], json=req[1], headers={"X-Request-Id": "kill"}
                ) as r:
                    first = await r.content.readuntil(b"\n\n")
                    busy = [n for n in ("d0", "d1") if sim.call(lambda e: e.engine.running, n)]
                    assert len(busy) == 1
                    sim.call(lambda e: e.kill("killed mid-answer"), busy[0])
                    raw = CREATED.sub(rb'"\1":0', first + await r.read())
                moved = await metric(c, proxy.url, 'servekit_proxy_migrations_total{outcome="ok"}')
            assert raw == whole and moved == 1

        asyncio.run(scenario())


def texts(raw: bytes) -> tuple[str, list[int]]:
    """The text and token ids a client reads from completion events (a usage-only
    event, with no choice, adds nothing)."""
    text, ids = "", []
    for event in raw.split(b"\n\n"):
        if event.startswith(b"data: {"):
            for choice in (json.loads(event[6:]).get("choices") or [])[:1]:
                text += choice.get("text", "")
                ids += choice.get("token_ids") or []
    return text, ids


def _leg(events: list[tuple[str, list[int]]], prompt: list[int], done: bool = False) -> bytes:
    """vLLM's completion events: the first carries the prompt's ids, each its tokens."""
    out = []
    for n, (text, ids) in enumerate(events):
        choice: dict[str, Any] = {"index": 0, "text": text, "token_ids": ids}
        if done and n == len(events) - 1:
            choice["finish_reason"] = "stop"
        if n == 0:
            choice["prompt_token_ids"] = prompt
        doc = {"id": "c", "object": "text_completion", "created": 1, "model": "m",
               "choices": [choice]}  # fmt: skip
        out.append(b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n")
    return b"".join(out) + (b"data: [DONE]\n\n" if done else b"")


def _carried(tape: Tape) -> tuple[list[int], int]:
    """The prefix continuation's token-id prompt and max_tokens."""
    carry = tape.carry()
    assert carry.how == "prefix", carry
    made = tape.continuation(carry)
    assert made is not None and made.prompt is not None
    return json.loads(made.prompt), made.body["max_tokens"]


@pytest.mark.parametrize("keep_ids", [False, True])
def test_a_cut_inside_a_character_carries_on_from_where_the_text_is_whole(keep_ids: bool) -> None:
    """vLLM 0.32 sends a token that ends inside a character with no text, and started a
    new leg whose token-id prompt ended there with the whole prompt's text (seen in CI:
    'odepath' + the prompt + the answer again). The new leg starts after the last
    whole character instead; what the client has is not sent twice."""
    body = {"max_tokens": 10, "return_token_ids": keep_ids}
    tape = Tape("/v1/completions", body)
    # one token "ode", then "path" and the first byte of "é" in one event, then the
    # second byte alone (no text yet): settled after "ode" only
    first = tape.feed(_leg([("ode", [30]), ("path", [31, 32]), ("", [33])], [1, 2, 3]))
    assert tape._cut() == (1, 3)
    assert _carried(tape) == ([1, 2, 3, 30], 9)
    # the new leg regenerates "path" and the character's bytes, then carries on
    second = tape.feed(
        _leg([("path", [31]), ("", [32]), ("é", [33]), (" hill", [34])], [1, 2, 3, 30], True)
    )
    text, ids = texts(first + second)
    assert text == "odepathé hill"
    assert tape.sent.ids == [30, 31, 32, 33, 34] and tape.done
    assert ids == ([30, 31, 32, 33, 34] if keep_ids else [])


def test_a_cut_where_the_text_is_whole_regenerates_nothing() -> None:
    """The control: every event one token with text, so the new leg starts at the cut."""
    tape = Tape("/v1/completions", {"max_tokens": 10})
    first = tape.feed(_leg([("ode", [30]), ("path", [31])], [1, 2, 3]))
    assert _carried(tape) == ([1, 2, 3, 30, 31], 8)
    second = tape.feed(_leg([("é", [33])], [1, 2, 3, 30, 31], True))
    assert texts(first + second)[0] == "odepathé"


def test_a_new_leg_that_parts_from_the_text_sent_ends_the_stream_unchanged() -> None:
    """A sampled leg regenerating "bc" said "bx": the client keeps "abc" and the stream
    ends (the proxy's error event), never "abc" + what followed "abx"."""
    tape = Tape("/v1/completions", {"max_tokens": 10, "temperature": 0.8})
    first = tape.feed(_leg([("a", [30]), ("bc", [31, 32])], [1]))
    assert _carried(tape) == ([1, 30], 9)
    second = tape.feed(_leg([("bx", [31]), ("y", [40])], [1, 30], True))
    assert texts(first + second)[0] == "abc" and tape.failed and not tape.done
    carry = tape.carry()
    assert carry.how == "refused" and "differ" in carry.reason
