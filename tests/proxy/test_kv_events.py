"""The kv-events policy (issue 33, item 1): vLLM's wire format, the index, feeds, routing.

Publishers are the simulator's own (:mod:`servekit.sim.kvevents`); it and the
proxy's decoder are built from one schema (:mod:`servekit.kvschema`), which
``tests/test_kvschema.py`` holds to vLLM 0.32's own structs and bytes.
Everything runs in one event loop on loopback ZMQ sockets.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from servekit.errors import UsageError
from servekit.proxy.app import WORKERS
from servekit.proxy.config import ProxyConfig
from servekit.proxy.instances import Instance, State
from servekit.proxy.kvaware import KvAware, KvRouting, PrefixKey
from servekit.proxy.kvevents import Source, Subscriber
from servekit.proxy.kvindex import EngineIndex, Feed, chain_keys
from servekit.proxy.kvwire import (
    Batch,
    Cleared,
    Removed,
    Stored,
    TooBig,
    WireError,
    parse_frames,
    parse_payload,
)
from servekit.proxy.server import RunningProxy, start_proxy
from servekit.sim.kvcache import KvCache
from servekit.sim.kvevents import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    Publisher,
)
from servekit.sim.server import SimServer, serve
from servekit.sim.spec import spec_from_mapping

from .harness import FAST_HEALTH, run, wait_until

BS = 4


def _payload(*events: Any, rank: int | None = 0) -> bytes:
    return msgspec.msgpack.encode(EventBatch(1.0, list(events), rank))


def _stored(hashes: list[int], parent: int | None, tokens: list[int]) -> BlockStored:
    return BlockStored(hashes, parent, tokens, BS, None, "GPU", None)


# -- wire format --------------------------------------------------------------------


def test_vllm_032_batches_decode() -> None:
    raw = _payload(_stored([11, 12], None, list(range(8))), BlockRemoved([11], "GPU"),
                   AllBlocksCleared())  # fmt: skip
    batch = parse_frames([b"", (7).to_bytes(8, "big"), raw])
    assert batch.seq == 7 and batch.dp_rank == 0
    assert batch.events == (
        Stored((11, 12), None, tuple(range(8)), BS),
        Removed((11,)),
        Cleared(),
    )


def test_older_array_form_and_byte_hashes_decode() -> None:
    """vLLM before 0.11 sent each event as an array tagged by its first element."""
    doc = [2.5, [["BlockStored", [b"\x01" * 32], b"\x00" * 32, [1, 2, 3, 4], 4, None, "GPU"],
                 ["BlockRemoved", [b"\x01" * 32], "GPU"], ["AllBlocksCleared"]]]  # fmt: skip
    batch = parse_payload(0, msgspec.msgpack.encode(doc))
    assert batch.events[0] == Stored((b"\x01" * 32,), b"\x00" * 32, (1, 2, 3, 4), 4)
    assert batch.events[1:] == (Removed((b"\x01" * 32,)), Cleared())


def test_lora_blocks_never_match_plain_prompts() -> None:
    ev = BlockStored([5], None, [1, 2, 3, 4], BS, 3, "GPU", "adapter")
    idx = EngineIndex()
    idx.apply(parse_payload(0, _payload(ev)))
    assert idx.blocks == 1 and idx.matched(chain_keys([1, 2, 3, 4], BS)) == 0


@pytest.mark.parametrize(
    "frames",
    [
        [b"", b"\x00" * 8],  # two frames
        [b"", b"\x00" * 7, b"\x90"],  # short sequence number
        [b"", b"\x00" * 8, b"\xc1"],  # not msgpack
        [b"", b"\x00" * 8, msgspec.msgpack.encode({"ts": 1})],  # not an array
        [b"", b"\x00" * 8, msgspec.msgpack.encode([1.0, [{"type": "Nope"}]])],
        [b"", b"\x00" * 8, msgspec.msgpack.encode([0, [True]])],  # hypothesis: a bare event
        [b"", b"\x00" * 8, msgspec.msgpack.encode([0, [7]])],
        [
            b"",
            b"\x00" * 8,
            msgspec.msgpack.encode(
                [
                    1.0,
                    [
                        {
                            "type": "BlockStored",
                            "block_hashes": [1],
                            "parent_block_hash": None,
                            "token_ids": [1],
                            "block_size": 4,
                        }
                    ],
                ]
            ),
        ],
    ],
)
def test_malformed_frames_are_wire_errors(frames: list[bytes]) -> None:
    with pytest.raises(WireError):
        parse_frames(frames)


_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.binary(max_size=40)
    | st.sampled_from(["BlockStored", "BlockRemoved", "AllBlocksCleared", "type", "GPU"])
)
_docs = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "block_hashes",
                    "parent_block_hash",
                    "token_ids",
                    "block_size",
                    "extra_keys",
                    "lora_name",
                ]
            ),
            inner,
            max_size=6,
        )
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    frames=st.lists(st.binary(max_size=64), max_size=4)
    | st.builds(lambda d: [b"", b"\x00" * 8, msgspec.msgpack.encode(d)], _docs)
)
def test_hostile_frames_never_crash_the_index(frames: list[bytes]) -> None:
    """Whatever arrives: a Batch the index applies, or a WireError; nothing else."""
    idx = EngineIndex()
    try:
        batch = parse_frames(frames)
    except WireError:
        return
    idx.apply(batch)
    idx.matched(chain_keys(list(range(16)), BS))


# -- bounded in bytes (issue 45) ---------------------------------------------------


def test_a_block_hash_longer_than_any_digest_is_refused_and_counted() -> None:
    """120 BlockStored events of one 4 MB bytes hash each grew the proxy by 488-660 MB,
    none counted bad: such a frame is now over a cap (TooBig), dropped and counted, and
    the engine is scored approximately; vLLM's 32-byte digests still index."""
    digest = _stored([], None, [])
    digest.block_hashes, digest.token_ids = [b"\x01" * 32], [1, 2, 3, 4]
    assert parse_payload(0, _payload(digest)).events[0] == Stored((b"\x01" * 32,), None,
                                                                   (1, 2, 3, 4), BS)  # fmt: skip
    huge = _stored([], None, [1, 2, 3, 4])
    huge.block_hashes = [b"\x01" * 4_000_000]
    frames = [b"", (0).to_bytes(8, "big"), _payload(huge)]
    with pytest.raises(TooBig, match="length <= 64"):
        parse_frames(frames)
    idx = EngineIndex()
    sub = Subscriber(None, Source("tcp://127.0.0.1:1"), idx, 10.0)  # type: ignore[arg-type]
    asyncio.run(sub._on_frames(frames))
    assert (idx.bad, idx.oversized, idx.blocks, idx.feed) == (1, 1, 0, Feed.GAP)


def _blocks(first: int, count: int, hash_bytes: int) -> Stored:
    """``count`` blocks from the root, each hashed by ``hash_bytes`` bytes (0: an int)."""
    hashes = tuple(
        (first + n).to_bytes(hash_bytes, "big") if hash_bytes else first + n for n in range(count)
    )
    return Stored(hashes, None, tuple(range(first, first + count * BS)), BS)


def test_the_index_is_bounded_in_bytes_and_says_so() -> None:
    """The index was capped at 2^21 blocks per engine whatever they weighed. Now each
    engine's index has its share of --kv-index-bytes: past it the index is emptied (what it
    learns next is certain, so it never claims a block the engine lacks), counted as an
    overflow; its accounted bytes are what the blocks take (tracemalloc, within 25%)."""
    import tracemalloc

    cap = 512 << 10
    idx = EngineIndex(max_bytes=cap)
    events = [_blocks(n * 500, 500, 64) for n in range(40)]  # 20k blocks: 8 times the cap
    tracemalloc.start()
    for seq, event in enumerate(events):
        idx.apply(_batch(seq, event))
        assert idx.nbytes <= cap
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert idx.overflows >= 5 and 0 < idx.blocks < 20_000
    assert held <= cap * 1.25, (held, cap)
    assert idx.nbytes >= held * 0.75, (idx.nbytes, held)  # the account is honest, not low
    idx.clear()
    assert (idx.nbytes, idx.blocks) == (0, 0)


def test_each_engine_gets_its_share_of_the_index_bytes() -> None:
    kv = [
        "http://127.0.0.1:8101=tcp://127.0.0.1:5557",
        "http://127.0.0.1:8102=tcp://127.0.0.1:5558",
    ]
    config = ProxyConfig(prefill=("http://127.0.0.1:8101", "http://127.0.0.1:8102"),
                         decode=("http://127.0.0.1:8103",), prefill_policy="kv-events",
                         kv_events=tuple(kv), kv_index_bytes=64 << 20)  # fmt: skip
    routing = KvRouting(config, None)  # type: ignore[arg-type]
    assert [routing.index(u).max_bytes for u in config.prefill] == [32 << 20, 32 << 20]


_hash = st.integers(0, 2**64 - 1) | st.binary(min_size=1, max_size=64)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["stored", "removed", "cleared"]),
            st.lists(_hash, min_size=1, max_size=40),
            st.booleans(),
        ),
        max_size=30,
    ),
    st.integers(0, 20_000),
)
def test_the_byte_account_matches_the_blocks_held(
    ops: list[tuple[str, list[int | bytes], bool]], cap: int
) -> None:
    """Whatever order blocks come and go in (parents found or not): the account never passes
    the cap and is always the sum of the blocks held."""
    from servekit.proxy.kvindex import block_bytes

    idx = EngineIndex(max_bytes=cap)
    stored: list[int | bytes] = []
    for seq, (kind, hashes, chained) in enumerate(ops):
        if kind == "stored":
            parent = stored[-1] if chained and stored else None
            event: Stored | Removed | Cleared = Stored(
                tuple(hashes), parent, tuple(range(len(hashes) * BS)), BS
            )
            stored += hashes
        else:
            event = Removed(tuple(hashes)) if kind == "removed" else Cleared()
        idx.apply(_batch(seq, event))
        assert 0 <= idx.nbytes <= cap
        assert idx.nbytes == sum(block_bytes(h) for h in idx._key_of)


# -- the index ---------------------------------------------------------------------


def _batch(seq: int, *events: Stored | Removed | Cleared) -> Batch:
    return Batch(seq, 0.0, events, 0)


def test_index_follows_stores_removals_and_clears() -> None:
    tokens = list(range(12))
    keys = chain_keys(tokens, BS)
    idx = EngineIndex()
    idx.apply(_batch(0, Stored((101, 102), None, tuple(tokens[:8]), BS)))
    assert idx.matched(keys) == 2
    idx.apply(_batch(1, Stored((103,), 102, tuple(tokens[8:]), BS)))  # chained on its parent
    assert idx.matched(keys) == 3
    idx.apply(_batch(2, Removed((102,))))
    assert idx.matched(keys) == 1  # a prefix hit stops at the first missing block
    idx.apply(_batch(3, Stored((999,), 4242, (0, 0, 0, 0), BS)))  # parent never seen
    assert idx.unanchored == 1 and idx.blocks == 2
    idx.apply(_batch(4, Cleared()))
    assert idx.matched(keys) == 0 and idx.blocks == 0
    idx.apply(_batch(5, Stored((101,), None, tuple(tokens[:4]), BS)))
    idx.apply(_batch(0, Stored((7,), None, (9, 9, 9, 9), BS)))  # numbering restarted
    assert idx.matched(keys) == 0 and idx.blocks == 1


def test_sim_cache_tells_its_listener_what_vllm_would() -> None:
    seen: list[tuple[str, Any]] = []

    class Listener:
        def stored(self, hashes: Any, parent: Any, token_ids: Any) -> None:
            seen.append(("stored", (list(hashes), parent, list(token_ids))))

        def removed(self, hashes: Any) -> None:
            seen.append(("removed", list(hashes)))

        def cleared(self) -> None:
            seen.append(("cleared", None))

    from servekit.sim.kvcache import block_hashes

    kv = KvCache(num_blocks=4, block_size=BS)
    kv.listener = Listener()
    ids = list(range(9))
    hashes = block_hashes(ids, BS)
    alloc = kv.allocate(hashes, len(ids), len(ids) + 1, ids)
    assert alloc is not None
    assert seen == [("stored", (hashes, None, ids[:8]))]
    kv.free(alloc)
    other = list(range(100, 113))
    assert kv.allocate(block_hashes(other, BS), 13, 16, other) is not None  # evicts both
    assert seen[1] == ("removed", hashes)
    kv.reset()
    assert seen[-1] == ("cleared", None)


# -- feeds: the sim's publisher, the proxy's subscriber ------------------------------


@asynccontextmanager
async def feed(replay: bool = True) -> AsyncIterator[tuple[Publisher, Subscriber]]:
    pub = Publisher("tcp://127.0.0.1:0", host="127.0.0.1", block_size=BS,
                    replay_endpoint="tcp://127.0.0.1:0" if replay else None)  # fmt: skip
    pub.start()
    import zmq.asyncio

    ctx = zmq.asyncio.Context()
    sub = Subscriber(ctx, Source(pub.endpoint, pub.replay_endpoint), EngineIndex(), 3600.0)
    task = asyncio.get_running_loop().create_task(sub.run())
    try:
        await wait_until(lambda: sub.index.feed is Feed.LIVE, "the subscriber connected")
        # PUB/SUB: a subscription takes a moment to reach the publisher; send until one lands
        keys = chain_keys([0] * BS, BS)
        while not sub.index.matched(keys):
            pub.stored([1], None, [0] * BS)
            pub.send_pending()
            await asyncio.sleep(0.02)
        yield pub, sub
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await pub.close()
        ctx.term()


def test_a_gap_is_replayed_and_the_index_stays_precise() -> None:
    async def scenario() -> None:
        async with feed() as (pub, sub):
            tokens = list(range(8))
            pub.paused = True
            pub.stored([21], None, tokens[:4])
            pub.send_pending()  # lost on the wire
            pub.paused = False
            pub.stored([22], 21, tokens[4:])
            pub.send_pending()
            await wait_until(lambda: sub.index.matched(chain_keys(tokens, BS)) == 2, "replayed")
            assert sub.index.gaps == 1 and sub.live()

    run(scenario())


def test_a_gap_without_replay_falls_back_then_the_dead_publisher_is_seen() -> None:
    async def scenario() -> None:
        async with feed(replay=False) as (pub, sub):
            pub.paused = True
            pub.stored([31], None, [5] * BS)
            pub.send_pending()
            pub.paused = False
            pub.stored([32], None, [6] * BS)
            pub.send_pending()
            await wait_until(lambda: sub.index.feed is Feed.GAP, "the gap was seen")
            assert not sub.live() and sub.index.gaps == 1
            assert sub.index.matched(chain_keys([5] * BS, BS)) == 0  # emptied, not guessed
            sub.gap_until = 0.0  # the resync window is over
            assert sub.live()
            pub.pub.close(linger=0)  # the publisher goes away
            await wait_until(lambda: sub.index.feed is Feed.DOWN, "the disconnect was seen")
            assert not sub.live() and sub.index.blocks == 0

    run(scenario())


def test_a_burst_waits_at_the_publisher_not_in_the_proxy() -> None:
    """A burst of 150 valid 3.8 MB batches peaked the proxy at +391-569 MB: its SUB socket
    queued up to ZMQ's default 1000 messages. Held subscriber, a publisher that keeps 4
    (its high-water mark) and drops the rest, 48 frames of 1 MB: what reaches the proxy
    is bounded by its own high-water mark and receive buffer, not by the burst (before:
    all 48 were queued in the proxy)."""
    import zmq
    import zmq.asyncio

    from servekit.proxy import kvevents

    async def scenario() -> None:
        sync = zmq.Context()
        pub = sync.socket(zmq.PUB)
        pub.setsockopt(zmq.SNDHWM, 4)
        pub.setsockopt(zmq.SNDBUF, 64 << 10)
        port = pub.bind_to_random_port("tcp://127.0.0.1")
        ctx = zmq.asyncio.Context()
        sub = Subscriber(ctx, Source(f"tcp://127.0.0.1:{port}"), EngineIndex(), 3600.0)
        gate, seen = asyncio.Event(), []

        async def held(frames: list[bytes]) -> None:
            seen.append(len(frames[2]))
            if len(frames[2]) > 100:
                await gate.wait()

        sub._on_frames = held  # type: ignore[method-assign]
        task = asyncio.get_running_loop().create_task(sub.run())
        try:
            while not seen:  # the subscription takes a moment to reach the publisher
                pub.send_multipart((b"", (0).to_bytes(8, "big"), b"x"))
                await asyncio.sleep(0.02)
            big = b"\0" * (1 << 20)
            for seq in range(48):
                pub.send_multipart((b"", (seq + 1).to_bytes(8, "big"), big), zmq.NOBLOCK)
                await asyncio.sleep(0.005)  # the I/O threads move what they can meanwhile
            await asyncio.sleep(0.5)
            gate.set()
            await asyncio.sleep(0.5)
            received = sum(1 for n in seen if n > 100)
            bound = kvevents.RCV_HWM + 4 + 1 + (kvevents.RCV_BUF + (64 << 10)) // (1 << 20) + 2
            assert 2 <= received <= bound, (received, bound)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            pub.close(linger=0)
            ctx.term()
            sync.term()

    run(scenario())


def test_a_replay_is_bounded_in_bytes() -> None:
    """A replay used to gather up to 1,024 batches (4 MiB each, decoded) before applying
    any; now each is applied as it comes, in order, and one that skips a number, or
    passes the replay's byte bound, fails the replay (the engine resyncs)."""
    from servekit.proxy import kvevents

    async def scenario() -> None:
        async with feed() as (pub, sub):
            tokens = list(range(12))
            pub.paused = True
            for n in range(3):
                pub.stored([41 + n], 40 + n if n else None, tokens[n * BS : (n + 1) * BS])
                pub.send_pending()
            pub.paused = False
            sizes = [len(p) for s, p in pub.buffer if s >= pub.seq - 3]
            bound = sum(sizes[:2])
            kvevents.REPLAY_BYTES, before = bound, kvevents.REPLAY_BYTES
            try:
                pub.stored([44], 43, [99] * BS)
                pub.send_pending()
                await wait_until(lambda: sub.index.feed is Feed.GAP, "the replay refused")
            finally:
                kvevents.REPLAY_BYTES = before
            assert sub.index.gaps == 1 and sub.index.matched(chain_keys(tokens, BS)) == 0

    run(scenario())


# -- routing -------------------------------------------------------------------------


def _inst(url: str, tokens: int = 0) -> Instance:
    return Instance(name=url, role="prefill", url=url, state=State.HEALTHY, tokens=tokens)


def test_cost_weighs_the_matched_prefix_against_load() -> None:
    config = ProxyConfig(prefill=("http://a:1",), decode=("http://d:1",),
                         prefill_policy="kv-events")  # fmt: skip
    routing = KvRouting(config, None)  # type: ignore[arg-type]
    a, b = _inst("http://a:1"), _inst("http://b:1")
    policy = KvAware(routing, "prefill")
    ids = list(range(64))
    for url in (a.url, b.url):
        routing.indexes[url] = EngineIndex(Feed.LIVE)
        routing.subscribers[url] = Subscriber(None, Source(""), routing.indexes[url], 1.0)  # type: ignore[arg-type]
        routing.indexes[url].feed = Feed.LIVE
    routing.indexes[b.url].apply(_batch(0, Stored((1, 2, 3, 4), None, tuple(ids[:16]), BS)))
    key = PrefixKey(b"k", ids)
    assert policy.choose([a, b], key) is b  # 16 of 64 tokens cached there
    # all 64 are now held there (just sent): a weighs 3 x 64 uncached tokens against b's load
    b.tokens = 180
    assert policy.choose([a, b], key) is b
    b.tokens = 200  # busier than three times the prompt
    assert policy.choose([a, b], key) is a
    assert routing.counts["prefill"].precise == 3
    assert routing.counts["prefill"].passed_over == 1  # the last: b held all of it


def test_a_long_token_prompt_is_keyed_off_the_loop_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 5.7 MB token-id prompt held the loop 2.2-4.9 s once the events announced block
    size 1: every block of it was hashed on the loop, for each stage, and recorded. Now a
    prompt over INLINE_TOKENS is keyed in the parse worker, at most MAX_PROMPT_BLOCKS
    blocks per block size; the engine holding its prefix still gets it, scored precisely.
    Before: chain_keys hashed all 60,000 ids on the loop."""
    from servekit.proxy import kvaware
    from servekit.proxy.parsepool import CURRENT, Workers
    from servekit.proxy.requests import make_ticket

    on_loop: list[int] = []
    real = kvaware.chain_keys

    def spy(ids: Any, size: int, *rest: Any) -> list[int]:
        on_loop.append(len(ids))
        return real(ids, size, *rest)

    monkeypatch.setattr(kvaware, "chain_keys", spy)
    config = ProxyConfig(prefill=("http://a:1", "http://b:1"), decode=("http://d:1",),
                         prefill_policy="kv-events")  # fmt: skip
    routing = KvRouting(config, None)  # type: ignore[arg-type]
    ids = list(range(1, 60_001))
    for url in config.prefill:
        routing.subscribers[url] = Subscriber(None, Source(""), routing.index(url), 1.0)  # type: ignore[arg-type]
        routing.index(url).feed = Feed.LIVE
    held = Stored(tuple(range(1, 201)), None, tuple(ids[:200]), 1)  # block size 1
    routing.index("http://a:1").apply(_batch(0, held))
    routing.index("http://b:1").apply(_batch(0, Stored((7,), None, (9,), 1)))
    policy = KvAware(routing, "prefill")

    async def scenario() -> Instance:
        workers = Workers(1, 1 << 20)
        token = CURRENT.set(workers)
        try:
            ticket = await routing.keyed(make_ticket("/v1/completions", {"prompt": ids}, 512), [])
            return policy.choose([_inst("http://b:1"), _inst("http://a:1")], ticket.prefix_key)
        finally:
            CURRENT.reset(token)
            await workers.close()

    assert run(scenario()).url == "http://a:1"
    assert routing.counts["prefill"].precise == 1
    assert routing.counts["prefill"].matched_tokens == 200
    assert all(n <= kvaware.INLINE_TOKENS for n in on_loop), on_loop
    assert len(routing.sent["http://a:1"]._keys) <= kvaware.MAX_PROMPT_BLOCKS


def test_the_overlap_weight_sets_how_much_load_a_cached_prefix_is_worth() -> None:
    """Weight 1 weighs this request's own wait alone: a cached prompt leaves an engine
    busier than the prompt is long; the default 3 keeps it there (the control)."""
    chosen = {}
    for weight in (1.0, 3.0):
        config = ProxyConfig(prefill=("http://a:1",), decode=("http://d:1",),
                             prefill_policy="kv-events", kv_overlap_weight=weight)  # fmt: skip
        routing = KvRouting(config, None)  # type: ignore[arg-type]
        a, b = _inst("http://a:1"), _inst("http://b:1", tokens=100)
        for url in (a.url, b.url):
            routing.indexes[url] = EngineIndex(Feed.LIVE)
            routing.subscribers[url] = Subscriber(None, Source(""), routing.indexes[url], 1.0)  # type: ignore[arg-type]
            routing.indexes[url].feed = Feed.LIVE
        ids = list(range(64))
        routing.indexes[b.url].apply(_batch(0, Stored(tuple(range(1, 17)), None, tuple(ids), BS)))
        chosen[weight] = KvAware(routing, "prefill").choose([a, b], PrefixKey(b"k", ids)).url
    assert chosen == {1.0: "http://a:1", 3.0: "http://b:1"}
    with pytest.raises(UsageError, match="--kv-overlap-weight"):
        ProxyConfig(prefill=("http://a:1",), decode=("http://d:1",), kv_overlap_weight=0)


def test_an_engine_whose_feed_is_down_is_scored_by_what_was_sent_there() -> None:
    config = ProxyConfig(prefill=("http://a:1",), decode=("http://d:1",),
                         prefill_policy="kv-events")  # fmt: skip
    routing = KvRouting(config, None)  # type: ignore[arg-type]
    a, b = _inst("http://a:1"), _inst("http://b:1")
    for url in (a.url, b.url):
        routing.indexes[url] = EngineIndex(Feed.DOWN)
    policy = KvAware(routing, "prefill")
    key = PrefixKey(b"k", list(range(64)))
    first = policy.choose([a, b], key)
    other = b if first is a else a
    first.tokens = 40  # busier, but it was sent this prompt: 64 tokens it need not redo
    assert all(policy.choose([a, b], key) is first for _ in range(3))
    assert routing.counts["prefill"].approximate == 4
    for url in (a.url, b.url):  # positive control: no --kv-events at all claims nothing
        routing.indexes[url].feed = Feed.OFF
    assert policy.choose([a, b], key) is other


def test_kv_events_flags_are_checked() -> None:
    with pytest.raises(UsageError, match="--kv-events"):
        ProxyConfig(prefill=("http://a:1",), decode=("http://d:1",), kv_events=("x",),
                    prefill_policy="kv-events")  # fmt: skip
    with pytest.raises(UsageError, match="applies to"):
        ProxyConfig(prefill=("http://a:1",), decode=("http://d:1",),
                    kv_events=("http://a:1=tcp://127.0.0.1:5557",))  # fmt: skip


def _pd_spec() -> dict[str, Any]:
    eps: list[dict[str, Any]] = [
        {"name": f"p{i}", "port": 0, "role": "prefill", "profile": "cpu-tiny",
         "kv_events": {"endpoint": "tcp://127.0.0.1:0"}}
        for i in range(2)
    ]  # fmt: skip
    eps += [{"name": f"d{i}", "port": 0, "role": "decode", "guard": True} for i in range(2)]
    return {"endpoints": eps}


@asynccontextmanager
async def kv_stack(**cfg: Any) -> AsyncIterator[tuple[SimServer, RunningProxy]]:
    sim = await serve(spec_from_mapping(_pd_spec()))
    urls = sim.urls
    events = tuple(f"{urls[n]}={sim.endpoints[n].kv_events.endpoint}"  # type: ignore[union-attr]
                   for n in ("p0", "p1"))  # fmt: skip
    config = ProxyConfig(prefill=(urls["p0"], urls["p1"]), decode=(urls["d0"], urls["d1"]),
                         port=0, prefill_policy="kv-events", decode_policy="kv-events",
                         kv_events=events, **FAST_HEALTH, **cfg)  # fmt: skip
    proxy = await start_proxy(config)
    try:
        await wait_until(lambda: all(i.routable for i in proxy.router.instances()), "admitted")
        yield sim, proxy
    finally:
        await proxy.stop()
        await sim.stop()


@pytest.mark.parametrize("parse", [{}, {"parse_inline_bytes": 0}], ids=["loop", "worker"])
def test_the_engine_holding_the_prefix_gets_the_request(parse: dict[str, int]) -> None:
    """A long shared system prompt: every follow-up lands where its blocks are cached,
    whether the bodies and the engine's /tokenize answers are parsed on the loop or in a
    parse worker."""

    async def scenario() -> None:
        async with kv_stack(**parse) as (sim, proxy), aiohttp.ClientSession() as c:
            kv = proxy.router.kv
            assert kv is not None
            await wait_until(lambda: all(kv.live(u) for u in kv.sources), "feeds live")
            system = "You are a careful assistant. " * 40

            async def ask(tail: str) -> None:
                body = {"model": "sim-model", "prompt": system + tail, "max_tokens": 2}
                async with c.post(proxy.url + "/v1/completions", json=body) as r:
                    assert r.status == 200, await r.text()

            await ask("first question")
            held = {n: sim.endpoints[n].kv.used_blocks + len(sim.endpoints[n].kv._evictable)
                    for n in ("p0", "p1")}  # fmt: skip
            warm = max(held, key=lambda n: held[n])
            url = sim.urls[warm]
            await wait_until(lambda: kv.indexes[url].blocks > 0, "the stored blocks arrived")
            served = {n: sim.endpoints[n].engine.steps for n in ("p0", "p1")}
            for i in range(4):
                await ask(f"question {i}")
            cold = "p1" if warm == "p0" else "p0"
            assert sim.endpoints[cold].engine.steps == served[cold]  # nothing went there
            async with c.get(proxy.url + "/metrics") as r:
                text = await r.text()
            assert f'servekit_proxy_kv_events_state{{engine="{url}",state="live"}} 1.0' in text
            assert 'servekit_proxy_kv_choices_total{score="precise",stage="prefill"}' in text
            assert bool(proxy.runner.app[WORKERS].pids()) == bool(parse)

    run(scenario())


def test_a_token_id_prompt_is_keyed_with_its_parse_and_lands_on_its_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every body to the parse worker (``--parse-inline-bytes 0``): a token-id prompt's
    block keys come back with its parse, for the engines' announced block size, and
    neither its ids nor their hashing reach the loop; follow-ups sharing its prefix land
    on the engine holding it."""
    from servekit.proxy import kvaware

    on_loop: list[int] = []
    real = kvaware.prompt_keys

    def spy(ids: Any, *rest: Any) -> Any:
        on_loop.append(len(ids))
        return real(ids, *rest)

    monkeypatch.setattr(kvaware, "prompt_keys", spy)

    async def scenario() -> None:
        async with kv_stack(parse_inline_bytes=0) as (sim, proxy), aiohttp.ClientSession() as c:
            kv = proxy.router.kv
            assert kv is not None
            await wait_until(lambda: all(kv.live(u) for u in kv.sources), "feeds live")
            system = list(range(1000, 1000 + 40 * BS))

            async def ask(tail: list[int]) -> None:
                body = {"model": "sim-model", "prompt": system + tail, "max_tokens": 2}
                async with c.post(proxy.url + "/v1/completions", json=body) as r:
                    assert r.status == 200, await r.text()

            await ask([1, 2, 3])
            held = {n: sim.endpoints[n].kv.used_blocks + len(sim.endpoints[n].kv._evictable)
                    for n in ("p0", "p1")}  # fmt: skip
            warm = max(held, key=lambda n: held[n])
            url = sim.urls[warm]
            await wait_until(lambda: kv.indexes[url].blocks > 0, "the stored blocks arrived")
            assert kv.block_sizes() == sorted({kv.indexes[url].block_size or 16, 16})
            served = {n: sim.endpoints[n].engine.steps for n in ("p0", "p1")}
            for i in range(4):
                await ask([7, i])
            cold = "p1" if warm == "p0" else "p0"
            assert sim.endpoints[cold].engine.steps == served[cold]  # nothing went there
            assert kv.counts["prefill"].matched_tokens >= 4 * 40 * BS - 4 * BS
            assert on_loop == []  # keyed in the worker, every time

    run(scenario())


def test_sim_serve_reads_kv_events_config() -> None:
    from servekit.sim.vllmargs import parse_launch

    cfg = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:5557"}
    launch = parse_launch(["m", "--kv-events-config", json.dumps(cfg), "-dpn", "2", "-dp", "4"])
    assert launch.kv_events == {"endpoint": "tcp://*:5559"}  # port + DP rank, as vLLM
    off = parse_launch(["m", "--kv-events-config", '{"enable_kv_cache_events": false}'])
    assert off.kv_events is None


# -- hostile publishers (issue 36, item 5) -------------------------------------------


def _wide_batch(events: int, tokens: int = 120_000) -> bytes:
    """A batch of ``events`` BlockStored events of ``tokens`` token ids each (one byte
    each on the wire): well formed, and only its size is hostile."""
    evs = [
        _stored(list(range(e * tokens // BS, (e + 1) * tokens // BS)), None, [e % 100 + 1] * tokens)
        for e in range(events)
    ]
    return msgspec.msgpack.encode(EventBatch(1.0, evs, 0))


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (_wide_batch(24), "over 4194304"),  # 6.5 MB: refused unread
        (_wide_batch(3), "in one batch"),  # 3 x 120k token ids: one batch's cap
        (msgspec.msgpack.encode([1.0, [{"type": "AllBlocksCleared"}] * 20_000]), "length <="),
        (b"\x93\xcb" + b"\0" * 8 + b"\x91" * (1 << 20) + b"\xc0", "recursion"),  # 1M deep
        (msgspec.msgpack.encode([1.0, [[[]] * (1 << 21)]]), "Expected `str`"),  # 2 MiB of []
    ],
    ids=["bytes", "tokens", "events", "deep", "empty-arrays"],
)
def test_hostile_payloads_are_refused_before_their_work(payload: bytes, error: str) -> None:
    """Over a cap (bytes, events, blocks, token ids) is TooBig; a shape that is not the
    schema's stops the decode at its first wrong value (8 MiB of empty arrays used to take
    5.5 s and 600 MB to decode untyped; now a few ms)."""
    with pytest.raises(WireError, match=error) as info:
        parse_payload(0, payload)
    assert isinstance(info.value, TooBig) == (error not in ("recursion", "Expected `str`"))


async def _health_while_sent(
    proxy: RunningProxy, client: aiohttp.ClientSession, pub: Publisher, frame: bytes,
    done: Any,
) -> float:  # fmt: skip
    """Send ``frame`` as the publisher's next batch while /health is probed back to back;
    the slowest probe's seconds, once ``done()`` (the frame handled) and 0.3 s passed."""
    slowest = 0.0
    seq = pub.seq
    pub.seq += 1
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    pub.pub.send_multipart((pub.topic, seq.to_bytes(8, "big"), frame))
    while not done() or loop.time() - t0 < 0.3:
        h0 = loop.time()
        async with client.get(proxy.url + "/health") as r:
            assert r.status == 200
        slowest = max(slowest, loop.time() - h0)
        assert loop.time() - t0 < 30, "the frame was never handled"
    return slowest


@pytest.mark.slow
def test_a_huge_frame_is_refused_unread_and_its_engine_falls_back_visibly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The control first: the same 6.5 MB batch with the caps lifted is decoded and applied
    on the loop, and /health waits for it; with the caps it is dropped unread, /health
    does not wait, and the engine is scored approximately (gap), counted in /metrics."""
    from servekit.proxy import kvdecoder, kvwire

    frame = _wide_batch(24)

    async def scenario() -> None:
        async with kv_stack() as (sim, proxy), aiohttp.ClientSession() as c:
            kv = proxy.router.kv
            assert kv is not None
            await wait_until(lambda: all(kv.live(u) for u in kv.sources), "feeds live")
            url = sim.urls["p0"]
            pub = sim.endpoints["p0"].kv_events
            assert pub is not None
            idx = kv.indexes[url]
            with monkeypatch.context() as m:
                m.setattr(kvwire, "MAX_PAYLOAD", 1 << 40)
                m.setattr(kvdecoder, "MAX_TOKENS", 1 << 40)
                m.setattr(kvdecoder, "MAX_BLOCKS", 1 << 40)
                applied = idx.batches + 1
                waited = await _health_while_sent(
                    proxy, c, pub, frame, lambda: idx.batches >= applied
                )
            assert kv.live(url) and idx.blocks > 0 and idx.oversized == 0
            dropped = idx.bad + 1
            slowest = await _health_while_sent(proxy, c, pub, frame, lambda: idx.bad >= dropped)
            assert slowest < waited / 4, (slowest, waited)  # the control: /health waited
            assert not kv.live(url) and idx.blocks == 0 and idx.oversized == 1
            async with c.get(proxy.url + "/metrics") as r:
                text = await r.text()
            assert f'servekit_proxy_kv_events_state{{engine="{url}",state="gap"}} 1.0' in text
            assert f'servekit_proxy_kv_events_oversized_total{{engine="{url}"}} 1.0' in text

    run(scenario())
