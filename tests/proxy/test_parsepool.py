"""Big bodies are parsed in a worker process, so the event loop serves meanwhile (issue 36, 5).

``--parse-inline-bytes 0`` sends every body through the worker, so the flows
below compare what the engines and the client see with the loop's own parse:
the same requests on the wire (up to member order), the same refusals. A
killed worker is a 503 and is replaced. And while a 32 MiB body of small
values is parsed, ``/health`` answers; with the worker off (threshold huge) it
waits behind the parse (the positive control). Times are compared as ratios
within one run, never to a wall-clock bound.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings, strategies as st

from servekit.proxy import parsepool
from servekit.proxy.app import WORKERS
from servekit.proxy.budget import parse_cost
from servekit.proxy.kvindex import chain_keys
from servekit.proxy.parsepool import (
    KEPT,
    REST,
    Members,
    Raw,
    Workers,
    encode_body,
    rss_bytes,
    travelling,
)
from servekit.proxy.payloads import (
    bootstrap_decode_params,
    bootstrap_prefill_params,
    decode_payload,
    prefill_payload,
    prompt_keyed_decode_payload,
)
from servekit.proxy.protocols.layerwise import decode_payload as layerwise_decode_payload

from .harness import MODEL, Stack, run, stack, wait_until
from .test_layerwise_flow import layerwise_stack
from .test_pd_flow import PROMPT_KEYED_SIM

T = TypeVar("T")
ALL_IN_WORKER = {"parse_inline_bytes": 0}
NEVER_IN_WORKER = {"parse_inline_bytes": 1 << 40}


def pairs(raw: bytes) -> list[tuple[str, Any]]:
    """The members of a JSON object, sorted; a key written twice fails."""
    found: list[tuple[str, Any]] = json.loads(raw, object_pairs_hook=list)
    keys = [k for k, _ in found]
    assert len(keys) == len(set(keys)), f"a key written twice: {keys}"
    return sorted(found, key=lambda kv: kv[0])


def builders(route: str) -> list[Any]:
    """Every way the proxy turns a client's body into a stage payload."""
    params = bootstrap_decode_params("t", "e", "http://b")
    return [
        lambda b: prefill_payload(route, b, True),
        lambda b: prefill_payload(route, b, False),
        lambda b: prefill_payload(route, b, True, bootstrap_prefill_params("t")),
        lambda b: decode_payload(b, params),
        lambda b: decode_payload({**b, "return_token_ids": True}, params),
        prompt_keyed_decode_payload,
        lambda b: layerwise_decode_payload(b, "http://proxy/v1/metaserver"),
        lambda b: b,
    ]


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids, max_size=4)
    ),
    max_leaves=12,
)
KEYS = st.sampled_from(sorted(KEPT)) | st.text(max_size=8)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(KEYS, VALUES, max_size=8), st.sampled_from([0, 16 << 10]))
def test_payloads_spliced_from_the_workers_text_are_what_json_dumps_writes(
    body: dict[str, Any], raw_above: int
) -> None:
    """Every key once, every value as json.dumps writes it; only the order of the members
    the proxy never reads may differ (they travel together)."""
    old, parsepool.RAW_ABOVE = parsepool.RAW_ABOVE, raw_above
    try:
        shipped, size = travelling(body)
    finally:
        parsepool.RAW_ABOVE = old
    texts = [v for v in shipped.values() if isinstance(v, Raw)]
    assert size == sum(len(v.text) for v in texts)
    assert set(shipped) <= {*body, REST} and all(k not in shipped for k in body if k not in KEPT)
    for route in ("/v1/completions", "/v1/chat/completions", "/v1/responses"):
        for build in builders(route):
            spliced, plain = encode_body(build(shipped)), json.dumps(build(body)).encode()
            assert pairs(spliced) == pairs(plain)
            if all(k in KEPT for k in body):  # nothing moved: the very bytes
                assert spliced == plain


def test_only_the_text_of_a_big_value_crosses_and_the_loop_copies_it() -> None:
    many = [{"role": "user", "content": "x"}] * 20_000
    body = {"model": MODEL, "messages": many, "max_tokens": 2, "extra": [1] * 9000, "x": 1}
    raw = json.dumps(body).encode()
    got = parsepool.parse_request("/v1/chat/completions", raw, 512)
    assert isinstance(got, parsepool.Summary)
    assert isinstance(got.body["messages"], Raw)
    assert got.body["model"] == MODEL and got.body["max_tokens"] == 2
    assert isinstance(got.body[REST], Members)  # "extra" and "x", together
    assert got.prompt_tokens == 20_000 // 4 + 1 and got.prompts == 1 and not got.stream
    assert encode_body(got.body) == raw
    keyed = parsepool.parse_request("/v1/chat/completions", raw, 512, (1, 16))
    assert isinstance(keyed, parsepool.Summary) and encode_body(keyed.body) == raw  # as text
    assert keyed.keys is None  # a chat prompt: its ids come from the engine's /tokenize
    ids = list(range(1, 40_001))
    raw = json.dumps({"model": MODEL, "prompt": ids, "max_tokens": 2}).encode()
    keyed = parsepool.parse_request("/v1/completions", raw, 512, (1, 16))
    assert isinstance(keyed, parsepool.Summary) and isinstance(keyed.body["prompt"], Raw)
    assert keyed.keys == {size: chain_keys(ids[: size << 15], size) for size in (1, 16)}


def test_a_field_the_members_hold_is_written_once_when_a_payload_sets_it() -> None:
    """A stage payload that sets a field the proxy does not list in KEPT (a protocol
    change) falls back to the parsed body: the engine never sees a key twice."""
    shipped, _ = travelling({"model": MODEL, "prompt": "hi", "custom": 1, "other": [2]})
    raw = encode_body({**shipped, "custom": 5})
    assert pairs(raw) == [("custom", 5), ("model", MODEL), ("other", [2]), ("prompt", "hi")]


BAD = [
    (b"{", 400, "request body is not valid JSON"),
    (b"\xff\xfe", 400, "request body is not valid JSON"),
    (b"[1, 2]", 400, "request body must be a JSON object"),
    (b'{"prompt": "x", "max_tokens": -1}', 400, "max_tokens: must be at least 1, got -1"),
    (b'{"prompt": "x", "stream": "false"}', 400, "stream: expected true or false, got 'false'"),
    (b'{"prompt": ' + b"[" * 900 + b"]" * 900 + b"}", 400, None),
    (
        b'{"prompt": "x", "stream_options": {"include_usage": true}}',
        400,
        "stream_options: only allowed with stream",
    ),
]


async def raw_post(s: Stack, path: str, raw: bytes) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    async with s.client.post(s.url + path, data=raw, headers=headers) as resp:
        return resp.status, json.loads(await resp.read())


def test_the_worker_refuses_what_the_loop_refuses_with_the_same_words() -> None:
    async def answers(**config: Any) -> list[tuple[int, dict[str, Any]]]:
        async with stack(prefill=0, decode=0, replica=1, **config) as s:
            out = [await raw_post(s, "/v1/completions", raw) for raw, _, _ in BAD]
            many = {"prompt": "x", "stop": ["a"] * 40_000}  # 2 MiB once parsed
            out.append(await raw_post(s, "/v1/completions", json.dumps(many).encode()))
            assert s.replica[0].gen() == [] and s.proxy.router.budget.used == 0
            return out

    async def scenario() -> None:
        loop = await answers(**NEVER_IN_WORKER, max_parse_bytes=1 << 20)
        worker = await answers(**ALL_IN_WORKER, max_parse_bytes=1 << 20)
        assert worker == loop
        for (status, doc), (_, want_status, words) in zip(worker, BAD, strict=False):
            assert status == want_status and (words is None or words in doc["error"]["message"])
        assert worker[-1][0] == 413 and "--max-parse-bytes" in worker[-1][1]["error"]["message"]
        budget = await answers(**ALL_IN_WORKER, memory_budget=1 << 20)
        assert budget == await answers(**NEVER_IN_WORKER, memory_budget=1 << 20)
        assert budget[-1][0] == 503 and budget[-1][1]["error"]["code"] == "overloaded"

    run(scenario())


CHAT_BIG = {
    "model": MODEL,
    "messages": [{"role": "user", "content": f"part {i}"} for i in range(2000)],  # > 16 KiB
    "max_tokens": 3,
    "seed": 7,
    "custom_field": {"kept": ["as", "is"]},
}
REQUESTS = [
    ("/v1/completions", {"model": MODEL, "prompt": "hello", "max_tokens": 3}),
    (
        "/v1/completions",
        {"model": MODEL, "prompt": list(range(1, 60)), "max_tokens": 2, "stream": True},
    ),
    ("/v1/chat/completions", CHAT_BIG),
    ("/v1/chat/completions", {**CHAT_BIG, "stream": True}),
]
VOLATILE = ("transfer_id", "request_id", "remote_request_id", "remote_block_ids",
            "remote_engine_id", "metaserver")  # fmt: skip


def wire(s: Stack) -> list[tuple[str, str, str]]:
    """What each role's engines were sent (in any order, to any of them), with the ids of
    one transfer, of the chosen decoder and the proxy's port left out."""
    out = []
    for nodes in (s.prefill, s.decode, s.replica):
        for node in nodes:
            for seen in node.gen():
                body = dict(seen.body)
                params = body.get("kv_transfer_params")
                if isinstance(params, dict):
                    body["kv_transfer_params"] = {
                        k: v for k, v in params.items() if k not in VOLATILE
                    }
                out.append((node.name[0], seen.path, json.dumps(body, sort_keys=True)))
    return sorted(out)


@pytest.mark.parametrize("mode", ["replica", "pd", "bootstrap", "prompt-keyed", "layerwise"])
def test_engines_get_the_same_requests_whoever_parses_the_body(mode: str) -> None:
    async def flow(**config: Any) -> tuple[list[tuple[int, int]], list[Any]]:
        if mode == "layerwise":
            ctx = layerwise_stack(**config)
            reqs = REQUESTS
        elif mode == "replica":
            ctx = stack(prefill=0, decode=0, replica=1, **config)
            reqs = [*REQUESTS, ("/v1/completions", {"prompt": ["a", "b"], "max_tokens": 2})]
        else:
            sim = {"bootstrap": {"kv_mode": "bootstrap"}, "prompt-keyed": PROMPT_KEYED_SIM}.get(
                mode
            )
            ctx = stack(mode=mode, sim=sim, **config)
            reqs = [*REQUESTS, ("/v1/completions", {"prompt": ["a", "b"], "max_tokens": 2})]
        async with ctx as s:
            answers = []
            for path, body in reqs:
                status, raw = await s.post(path, body)
                answers.append((status, raw.count(b"data:")))
            budget = s.proxy.router.budget
            await wait_until(lambda: s.loads_are_zero() and budget.used == 0, "all given back")
            return answers, wire(s)

    async def scenario() -> None:
        loop = await flow(**NEVER_IN_WORKER)
        worker = await flow(**ALL_IN_WORKER)
        assert worker == loop
        assert all(status == 200 for status, _ in loop[0][: len(REQUESTS)]), loop[0]

    run(scenario())


def test_big_answers_are_checked_in_the_worker_and_a_bad_one_is_still_the_engines_fault() -> None:
    async def scenario() -> None:
        async with stack(prefill=0, decode=0, replica=1, max_attempts=1, **ALL_IN_WORKER) as s:
            body = {"prompt": "x", "max_tokens": 2}
            assert (await s.post("/v1/completions", body))[0] == 200
            s.replica[0].spy.rewrite["/v1/completions"] = lambda b: b[: len(b) // 2]
            status, out = await s.post("/v1/completions", body)
            assert status == 502 and "not UTF-8 JSON" in json.loads(out)["error"]["message"]
            assert next(s.proxy.router.instances()).request_fails == 1
            assert s.proxy.runner.app[WORKERS].pids()  # the worker did it

    run(scenario())


def test_a_killed_worker_is_a_503_and_the_next_body_gets_a_new_one() -> None:
    async def scenario() -> None:
        async with stack(prefill=0, decode=0, replica=1, **ALL_IN_WORKER) as s:
            workers = s.proxy.runner.app[WORKERS]
            first = asyncio.create_task(s.post("/v1/completions", {"prompt": "x", "max_tokens": 2}))
            await wait_until(lambda: bool(workers.pids()), "a worker started")
            killed = workers.pids()
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
            status, out = await asyncio.wait_for(first, 30)
            assert status == 503, out
            doc = json.loads(out)["error"]
            assert doc["code"] == "worker_failed" and "parse worker process died" in doc["message"]
            assert s.replica[0].gen() == [] and workers.failures == 1
            status, out = await asyncio.wait_for(
                s.post("/v1/completions", {"prompt": "y", "max_tokens": 2}), 30
            )
            assert status == 200, out
            assert workers.pids() and not set(workers.pids()) & set(killed)
            assert s.proxy.router.budget.used == 0

    run(scenario())


def small_values(mib: int) -> bytes:
    """A chat body of ``mib`` MiB of small message objects that the checks refuse only
    after the whole parse (its last field is bad), so no engine parses it too."""
    n = (mib << 20) // len(json.dumps({"role": "user", "content": "x"}))
    many = [{"role": "user", "content": "x"}] * n
    return json.dumps({"model": MODEL, "messages": many, "max_tokens": 0}).encode()


async def probe_while(s: Stack, work: Awaitable[T]) -> tuple[float, float, int, T]:
    """Await ``work`` while two clients probe /health back to back, so one is always in
    flight: (its seconds, the slowest probe's seconds, probes answered before it ended,
    its result)."""
    task = asyncio.ensure_future(work)
    t0 = time.perf_counter()
    slowest, answered = 0.0, 0

    async def probe() -> None:
        nonlocal slowest, answered
        while not task.done():
            h0 = time.perf_counter()
            async with s.client.get(s.url + "/health") as resp:
                assert resp.status == 200
            slowest = max(slowest, time.perf_counter() - h0)
            answered += 0 if task.done() else 1

    await asyncio.gather(probe(), probe())
    return time.perf_counter() - t0, slowest, answered, await task


async def health_while(s: Stack, raw: bytes) -> tuple[float, float, int]:
    """Post ``raw`` while /health is probed (:func:`probe_while`)."""
    took, slowest, answered, (status, doc) = await probe_while(
        s, raw_post(s, "/v1/chat/completions", raw)
    )
    assert status == 400 and doc["error"]["message"].startswith("max_tokens: must be at least 1")
    return took, slowest, answered


@pytest.mark.slow
def test_health_answers_while_a_big_body_is_parsed_and_waits_without_the_worker() -> None:
    raw = small_values(32)
    config = {"prefill": 0, "decode": 0, "replica": 1, "max_parse_bytes": 1 << 30}

    async def scenario() -> None:
        async with stack(**config, **NEVER_IN_WORKER) as s:
            took, slowest, _ = await health_while(s, raw)
            # the positive control: one probe waited out most of the request (the parse)
            assert slowest > 0.4 * took, (slowest, took)
        async with stack(**config) as s:  # the default threshold: 1 MiB
            took, slowest, answered = await health_while(s, raw)
            assert slowest < 0.25 * took and answered >= 5, (slowest, took, answered)

    run(scenario())


CHAT = "/v1/chat/completions"


def long_strings(mib: int) -> bytes:
    """A chat body of ``mib`` MiB of 700-character messages: each string is malloc'd, and
    glibc keeps the heap they grew (freeing the 16 MiB text raised its trim threshold)."""
    one = {"role": "user", "content": "y" * 700}
    n = (mib << 20) // len(json.dumps(one))
    return json.dumps({"model": MODEL, "messages": [one] * n, "max_tokens": 3}).encode()


async def _after_a_big_parse(raw: bytes, over_fresh: int | None) -> tuple[int, int, int, Workers]:
    """A worker started, then ``raw`` checked in it: (its pid, its fresh RSS, the RSS of the
    pool's worker once it settled); ``over_fresh`` sets --parse-worker-rss above fresh."""
    workers = Workers(1, 0)
    await workers.call(parsepool.answer_fields, b"{}", ())
    [pid] = workers.pids()
    fresh = rss_bytes(pid)
    assert fresh is not None
    if over_fresh is not None:
        workers.max_rss = fresh + over_fresh
    got = await workers.call(parsepool.parse_request, CHAT, raw, 512, cost=parse_cost(raw))
    assert isinstance(got, parsepool.Summary)
    if over_fresh is not None:
        await wait_until(lambda: workers.pids() not in ([], [pid]), "a fresh worker started")
        await wait_until(lambda: rss_bytes(pid) is None, "the old worker left")
    await asyncio.sleep(0.2)  # what it sent is dropped
    [now] = workers.pids()
    after = rss_bytes(now)
    assert after is not None
    return pid, fresh, after, workers


@pytest.mark.slow
def test_a_worker_grown_by_a_big_parse_is_replaced_and_nothing_in_flight_fails() -> None:
    """The control first: without --parse-worker-rss the worker keeps the heap its parse of
    16 MiB of long strings grew (+34 MB here); with it, it is replaced by a fresh one once
    idle, so the pool's RSS comes back down, and a parse that was queued is not lost."""
    raw = long_strings(16)
    bound = 16 << 20

    async def scenario() -> None:
        pid, fresh, after, workers = await _after_a_big_parse(raw, None)
        assert workers.pids() == [pid] and after > fresh + bound, (fresh, after)
        await workers.close()
        pid, fresh, after, workers = await _after_a_big_parse(raw, bound)
        assert workers.pids() != [pid] and after < fresh + bound, (fresh, after)
        assert workers.recycled == 1 and workers.failures == 0
        # two parses queued on one worker: it is not replaced under the second one
        both = [
            workers.call(parsepool.parse_request, CHAT, raw, 512, cost=parse_cost(raw))
            for _ in range(2)
        ]
        assert all(isinstance(g, parsepool.Summary) for g in await asyncio.gather(*both))
        await wait_until(lambda: workers.recycled == 2, "replaced once idle")
        assert workers.failures == 0
        await workers.close()

    run(scenario())


# -- engines' answers (issue 36, item 5) ---------------------------------------------

COMPLETION = {"model": MODEL, "prompt": "hello", "max_tokens": 2}


def prompt_logprobs(mib: int) -> bytes:
    """About ``mib`` MiB of ``prompt_logprobs`` as vLLM writes them: one small object per
    prompt token (a prefill answers them when the request asks for them)."""
    one = {"9906": {"logprob": -1.25, "rank": 1, "decoded_token": "Hello"}}
    n = (mib << 20) // (len(json.dumps(one)) + 2)
    return json.dumps([None, *[one] * n]).encode()


def with_logprobs(big: bytes) -> Callable[[bytes], list[bytes]]:
    """The prefill's answer with ``big`` as its ``prompt_logprobs``, in parts the spy sends
    as they are (spliced, not parsed nor joined: the spy shares the loop being measured)."""
    return lambda answer: [answer.rstrip()[:-1], b', "prompt_logprobs": ', big, b"}"]


def test_only_the_members_the_proxy_reads_come_back_from_an_answer() -> None:
    params = {"do_remote_prefill": True, "remote_block_ids": [1, 2]}
    answer = json.dumps({"id": "x", "kv_transfer_params": params, "choices": [{}]}).encode()
    answer = b"".join(with_logprobs(prompt_logprobs(1))(answer))
    assert parsepool.answer_fields(answer, ("kv_transfer_params",)) == {
        "kv_transfer_params": params
    }
    assert parsepool.answer_fields(b"[1]", ("kv_transfer_params",)) == {}
    for bad in (answer[:-1], answer.decode().encode("utf-16"), b""):
        assert parsepool.answer_fields(bad, ()) is None


def test_an_answer_is_read_for_its_members_without_building_the_rest() -> None:
    """An answer of many small values cost about 36x its size to parse whole (a 48 MB one
    raised the parse worker by 1.7 GB). With msgspec, only the members the proxy reads
    are built: the parse of a 4 MiB answer peaks under 1.5x its size (tracemalloc; a
    whole parse is 10x and more), and what is refused or accepted is the standard
    library's (NaN, lone surrogates, bad UTF-8 where nothing is built)."""
    import tracemalloc

    params = {"do_remote_prefill": True, "remote_block_ids": [1, 2]}
    answer = json.dumps({"id": "x", "kv_transfer_params": params, "choices": [{}]}).encode()
    answer = b"".join(with_logprobs(prompt_logprobs(4))(answer))
    tracemalloc.start()
    got = parsepool.answer_fields(answer, ("kv_transfer_params",))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert got == {"kv_transfer_params": params}
    assert peak < 1.5 * len(answer), (peak, len(answer))
    for raw, keys, want in [
        (b'{"tokens": [1, 2], "x": NaN}', ("tokens",), {"tokens": [1, 2]}),
        (b'{"a": "\\ud800", "tokens": []}', ("tokens",), {"tokens": []}),
        (b'{"a": 1, "a": 2}', ("a",), {"a": 2}),
        (b'{"a": null}', ("a", "b"), {"a": None}),
        (b'{"x": "\xff", "a": 1}', ("a",), None),  # not UTF-8, in a member never built
        (b'{"a": 1', ("a",), None),
        (b'"text"', ("a",), {}),
    ]:
        assert parsepool.answer_fields(raw, keys) == want, raw
        assert parsepool.answer_fields(raw, keys) == json_answer_fields(raw, keys), raw


def json_answer_fields(raw: bytes, keys: tuple[str, ...]) -> dict[str, Any] | None:
    """What the standard library alone makes of an answer (the zipapp's way)."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except ValueError:
        return None
    return {k: doc[k] for k in keys if k in doc} if isinstance(doc, dict) else {}


def test_without_msgspec_an_answer_is_parsed_whole_and_held_to_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The zipapp carries aiohttp only: there the answer is parsed whole by the standard
    library, its parse still charged to --memory-budget (parse_cost: at least what
    json.loads takes) and capped by --max-answer-bytes; same members, same refusals."""
    from servekit.proxy import jsoncodec

    monkeypatch.setattr(jsoncodec, "msgspec", None)
    params = {"do_remote_prefill": True}
    answer = b"".join(
        with_logprobs(prompt_logprobs(1))(json.dumps({"kv_transfer_params": params}).encode())
    )
    assert parsepool.answer_fields(answer, ("kv_transfer_params",)) == {
        "kv_transfer_params": params
    }
    for bad in (answer[:-1], answer.decode().encode("utf-16"), b""):
        assert parsepool.answer_fields(bad, ()) is None


def test_a_big_prefill_answer_is_parsed_in_a_worker_and_its_params_reach_the_decoder() -> None:
    async def scenario() -> None:
        async with stack(parse_inline_bytes=64 << 10) as s:  # the request stays on the loop
            s.prefill[0].spy.rewrite["/v1/completions"] = with_logprobs(prompt_logprobs(1))
            status, out = await s.post("/v1/completions", COMPLETION)
            assert status == 200, out
            prefilled = json.loads(s.prefill[0].gen()[0].answer)
            assert len(prefilled["prompt_logprobs"]) > 10_000
            sent = s.decode[0].gen()[0].body["kv_transfer_params"]
            assert sent == prefilled["kv_transfer_params"] and sent["do_remote_prefill"]
            assert s.proxy.runner.app[WORKERS].pids()  # the worker parsed it
            await wait_until(lambda: s.proxy.router.budget.used == 0, "all given back")

    run(scenario())


def test_a_big_answer_is_held_to_the_budget_and_the_answer_cap() -> None:
    big = with_logprobs(prompt_logprobs(2))

    async def refused(**config: Any) -> dict[str, Any]:
        async with stack(**ALL_IN_WORKER, max_attempts=1, **config) as s:
            s.prefill[0].spy.rewrite["/v1/completions"] = big
            status, out = await s.post("/v1/completions", COMPLETION)
            assert s.decode[0].gen() == [] and s.proxy.router.budget.used == 0
            error: dict[str, Any] = json.loads(out)["error"]
            return {"status": status, **error}

    async def scenario() -> None:
        # its parse (about 30 MB) passes a 16 MiB budget: 503 before it is parsed
        over = await refused(memory_budget=16 << 20)
        assert over["status"] == 503 and over["code"] == "overloaded", over
        capped = await refused(max_answer_bytes=1 << 20)
        assert capped["status"] == 502 and capped["code"] == "answer_too_large", capped

    run(scenario())


def test_a_worker_killed_parsing_an_answer_is_a_503_and_the_decoder_gets_nothing() -> None:
    async def scenario() -> None:
        async with stack(parse_inline_bytes=64 << 10) as s:
            s.prefill[0].spy.rewrite["/v1/completions"] = with_logprobs(prompt_logprobs(1))
            workers = s.proxy.runner.app[WORKERS]
            first = asyncio.create_task(s.post("/v1/completions", COMPLETION))
            await wait_until(lambda: bool(workers.pids()), "a worker started for the answer")
            for pid in workers.pids():
                os.kill(pid, signal.SIGKILL)
            status, out = await asyncio.wait_for(first, 30)
            assert status == 503 and json.loads(out)["error"]["code"] == "worker_failed", out
            assert s.decode[0].gen() == [] and workers.failures == 1
            assert next(s.proxy.router.instances()).request_fails == 0  # not the engine's fault
            status, out = await asyncio.wait_for(s.post("/v1/completions", COMPLETION), 30)
            assert status == 200, out
            assert s.proxy.router.budget.used == 0

    run(scenario())


@pytest.mark.slow
def test_health_answers_while_a_big_prefill_answer_is_parsed_in_the_worker() -> None:
    """A 48 MiB prefill answer of small values (prompt_logprobs), read in the parse worker:
    probes keep answering and none waits a sixth of the request.

    Not a latency control against the loop: since the answer is read for its members
    only (msgspec), reading 48 MiB on the loop costs about 40 ms here, what copying it
    to a worker costs (the worker is for memory: test_a_worker_grown_by_a_big_parse...).
    The positive control is that the worker did the parse, and the loop did not.
    """
    big = with_logprobs(prompt_logprobs(48))

    async def scenario() -> dict[bool, tuple[float, float, int, bool]]:
        seen = {}
        for inline in (True, False):
            config = NEVER_IN_WORKER if inline else {}
            async with stack(**config) as s:
                s.prefill[0].spy.rewrite["/v1/completions"] = big
                took, slowest, answered, (status, _) = await probe_while(
                    s, s.post("/v1/completions", COMPLETION)
                )
                assert status == 200
                seen[inline] = (took, slowest, answered, bool(s.proxy.runner.app[WORKERS].pids()))
        return seen

    seen = run(scenario())
    assert not seen[True][3] and seen[False][3], seen  # where the parse ran
    took, slowest, answered, _ = seen[False]
    assert slowest < took / 6 and answered >= 5, seen


def test_a_metaserver_call_whose_parse_worker_died_is_read_on_the_loop() -> None:
    """The decoder's call names the request waiting for it only once parsed: a worker that
    died under it must not leave that request to its --metaserver-timeout."""
    from servekit.proxy.failures import ProxyError
    from servekit.proxy.protocols import layerwise

    class Dead(Workers):
        async def call(self, fn: Callable[..., T], *args: Any, cost: int = 0) -> T:
            self.failures += 1
            raise ProxyError("worker_failed", "proxy", "died")

    call = {"request_id": "cmpl-x-0", "do_remote_decode": True, "remote_block_ids": [1, 2],
            "remote_engine_id": "e", "remote_host": "h", "remote_port": 1}  # fmt: skip
    dead = Dead(1, 0)
    token = parsepool.CURRENT.set(dead)
    try:
        key, problem, text = run(layerwise._read_call(json.dumps(call).encode()))
    finally:
        parsepool.CURRENT.reset(token)
    assert dead.failures == 1 and key == "cmpl-x-0" and problem is None
    assert text is not None and json.loads(text.text) == call
