"""The ``kv-events`` policy: route to the engine that holds the prompt's prefix, against load.

Each candidate is scored in tokens of work::

    cost = active_tokens + weight * max(prompt_tokens - matched_blocks * block_size, 0)

and the cheapest wins (ties: the longer match, then fewer requests), among the
engines whose outstanding tokens are within twice the lightest one's plus
:data:`SLACK_TOKENS` (a hard stop for a very long hot prefix, which the cost
would otherwise let queue far behind on one engine).
``active_tokens`` is what the proxy itself has placed on the engine and not yet
seen finish (the prefill pool's is its active prefill, the decode pool's its
active decode), less the tokens those in-flight requests found cached there
(an engine busy with prompts it holds is not as busy as their length says);
``matched_blocks`` is the prompt's leading blocks the engine holds, from its KV
events (:mod:`servekit.proxy.kvindex`), plus blocks of prompts sent there in
the last :data:`PENDING_S` seconds, whose ``BlockStored`` may not be in yet (a
burst of one prefix would otherwise spread before its first request lands).

This is Dynamo's KV router cost, ``overlap_score_weight * (prompt - overlap) +
active``, with each pool one PD stage (an engine's outstanding tokens are all of
one kind). ``weight`` (``--kv-overlap-weight``, default 3) is why it is not
simply this request's time to first token (weight 1): a token computed again on
an engine that lacks the prefix delays this request *and* every request queued
behind it there, and warms a second copy of a prefix one engine already
serves, while a token of queue ahead of it delays this request alone. At
weight 1 a group's requests left its engine whenever that engine was busier
than the prefix is long: on the trace comparison (docs/proxy.md, 3 seeds) 16-25
requests a run left the engine holding their prefix, 3-5 points of hit rate;
at 2, 0-5 requests; at 3 and 4 none, with the hit rate of a perfect cache. 3 is
the smallest weight that never moved there; a larger one lets a hot prefix
queue longer on its engine (TTFT p99 at 4 was above 3's in all three seeds).
Against llm-d's scorers (a prefix score,
the fraction of blocks matched, added with configured weights to queue and
KV-utilisation scores): a fraction does not see that 4 matched blocks of a
40k-token prompt save little while the same fraction of a 400-token one is the
whole prompt; tokens do. The decode pool of a PD layout gets its KV from the
prefill, so its matches are usually 0 and it chooses by load, as least-loaded.

An engine whose events are not live (the publisher not reached or gone, a gap
that could not be replayed) is scored by the approximate view instead: the
blocks of the prompts the proxy itself sent there lately
(:class:`~servekit.proxy.kvindex.SentRecord`), as Dynamo does without events.
An engine with no ``--kv-events`` at all (``off``) is claimed to hold nothing
and is weighed by its load alone: on the simulator, whose decoders do not cache
the KV they pull, the approximate view piled each prefix's decodes onto one
decoder for no hit at all. ``/metrics`` shows each engine's feed state and how many
choices were precise or approximate.

Token ids: a prompt given as ids is used as is; a text or chat prompt is sent
to one engine's ``/tokenize`` (the engine's own tokenizer and chat template,
which is what produced the blocks' token ids; the proxy ships no tokenizer and
no model files). That is one extra local request per generation, before
routing; when it fails the request is routed by load alone.

The prompt's block keys are computed once per request (:meth:`KvRouting.keyed`),
for every block size the engines announced, at most
:data:`~servekit.proxy.kvindex.MAX_PROMPT_BLOCKS` blocks of each (the match of
a longer prompt is read on its leading blocks), and off the loop when the
prompt is long: a token-id prompt in a body big enough for the parse worker is
keyed there, with its parse, and its ids never reach the loop; ids from
``/tokenize`` over :data:`INLINE_TOKENS` are keyed in the worker too. A 5.7 MB
token-id prompt held the loop 2.2-4.9 s at block size 1, hashed on it once per
stage and every block recorded as sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import aiohttp
import zmq.asyncio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from servekit.proxy import parsepool
from servekit.proxy.bodies import parse_answer, read_answer
from servekit.proxy.config import ProxyConfig
from servekit.proxy.failures import ProxyError
from servekit.proxy.instances import Instance, rendezvous
from servekit.proxy.kvevents import Source, Subscriber
from servekit.proxy.kvindex import (
    MAX_PROMPT_BLOCKS,
    EngineIndex,
    Feed,
    SentRecord,
    chain_keys,
    prompt_keys,
)
from servekit.proxy.requests import Ticket
from servekit.vocabulary import check_url

DEFAULT_BLOCK_SIZE = 16  # vLLM's default, for the approximate view before any event
TOKENIZE_TIMEOUT_S = 5.0
PENDING_S = 10.0  # a prompt sent this recently counts as held until its events arrive
MAX_INFLIGHT = 4096
OVERLOAD, SLACK_TOKENS = 2.0, 32768  # an engine past 2x the lightest one's load + 32k is skipped
MAX_TOKENIZE_BYTES = 16 * 1024 * 1024
INLINE_TOKENS = 16384  # a longer prompt is keyed in a parse worker, off the event loop


class PrefixKey(bytes):
    """The request's prefix key (as every policy reads it) carrying its prompt's length in
    tokens, its block keys per block size and, when the loop has them, its token ids.

    It travels through the stages unchanged as ``Ticket.prefix_key``, so the
    policy gets them without any stage knowing about them.
    """

    tokens: int
    token_ids: Sequence[int]  # empty when keyed in the parse worker
    keys: dict[int, list[int]]

    def __new__(cls, key: bytes, token_ids: Sequence[int],
                keys: dict[int, list[int]] | None = None, tokens: int | None = None,
                ) -> PrefixKey:  # fmt: skip
        obj = super().__new__(cls, key)
        obj.token_ids = token_ids
        obj.keys = keys or {}  # none given: each block size keyed when first read
        obj.tokens = len(token_ids) if tokens is None else tokens
        return obj


def parse_sources(values: Sequence[str], topic: str) -> dict[str, Source]:
    """``URL=tcp://HOST:PORT[,tcp://HOST:REPLAY_PORT]`` values (checked by the config)."""
    out: dict[str, Source] = {}
    for value in values:
        url, _, rest = value.partition("=")
        pub, _, replay = rest.partition(",")
        out[check_url(url, "--kv-events")] = Source(pub, replay or None, topic)
    return out


@dataclasses.dataclass
class _Counts:
    precise: int = 0
    approximate: int = 0
    matched_tokens: int = 0
    passed_over: int = 0  # choices that left an engine holding more of the prompt


class KvRouting:
    """Indexes, subscribers and tokenizer client shared by the stages' ``kv-events`` policies."""

    def __init__(self, config: ProxyConfig, session: aiohttp.ClientSession) -> None:
        self.config = config
        self.session = session
        self.sources = parse_sources(config.kv_events, config.kv_events_topic)
        self.indexes: dict[str, EngineIndex] = {}
        self.sent: dict[str, SentRecord] = {}
        self.subscribers: dict[str, Subscriber] = {}
        self.counts: dict[str, _Counts] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._ctx: zmq.asyncio.Context | None = None
        self.headers: dict[str, str] = {}
        self._policies: list[KvAware] = []

    def policy(self, stage: str) -> KvAware:
        found = KvAware(self, stage)
        self._policies.append(found)
        return found

    def index(self, url: str) -> EngineIndex:
        found = self.indexes.get(url)
        if found is None:
            share = self.config.kv_index_bytes // max(len(self.sources), 1)
            found = self.indexes[url] = EngineIndex(max_bytes=share)
        return found

    async def start(self) -> None:
        """Subscribe to every engine's events (on the proxy's loop)."""
        self._ctx = zmq.asyncio.Context()
        for url, source in self.sources.items():
            self._follow(url, source)

    def _follow(self, url: str, source: Source) -> None:
        assert self._ctx is not None
        sub = Subscriber(self._ctx, source, self.index(url), self.config.kv_events_resync_s)
        self.subscribers[url] = sub
        self._tasks[url] = asyncio.get_running_loop().create_task(sub.run())

    def subscribe(self, url: str, endpoint: str, replay: str | None) -> None:
        """Follow the events of an engine that joined at run time (admin API, discovery)."""
        source = Source(endpoint, replay, self.config.kv_events_topic)
        if self.sources.get(url) == source:
            return
        self.unsubscribe(url)
        self.sources[url] = source
        self._reshare()
        if self._ctx is not None:
            self._follow(url, source)

    def _reshare(self) -> None:
        """``--kv-index-bytes`` split equally again over the engines followed now (an
        index past its new share is emptied at its next store and fills again)."""
        share = self.config.kv_index_bytes // max(len(self.sources), 1)
        for index in self.indexes.values():
            index.max_bytes = share

    def unsubscribe(self, url: str) -> None:
        """An engine left: its subscriber stops and what was known of it goes."""
        task = self._tasks.pop(url, None)
        if task is not None:
            task.cancel()  # its socket closes as it ends; stop() waits for the rest
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)
        for table in (self.sources, self.subscribers, self.indexes, self.sent):
            table.pop(url, None)
        for policy in self._policies:
            policy.inflight.pop(url, None)
        self._reshare()

    async def stop(self) -> None:
        tasks = [*self._tasks.values(), *self._stopping]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    def live(self, url: str) -> bool:
        sub = self.subscribers.get(url)
        return sub is not None and sub.live()

    async def keyed(
        self, ticket: Ticket, tokenizers: Sequence[Instance],
        keys: dict[int, list[int]] | None = None,
    ) -> Ticket:  # fmt: skip
        """``ticket`` with a :class:`PrefixKey` holding its token ids and block keys (when
        they can be had); ``keys``: the parse worker keyed its token-id prompt already."""
        if keys is not None:
            key = PrefixKey(ticket.prefix_key, (), keys, ticket.prompt_tokens)
            return dataclasses.replace(ticket, prefix_key=key)
        ids = _ids_of(ticket.body)
        keys = None if ids is None else await self._keys(ids)  # None: not token ids
        if keys is None and ticket.route != "/v1/responses":
            ids = await self._tokenize(ticket.body, tokenizers)
            keys = None if ids is None else await self._keys(ids)
        if ids is None or keys is None:
            return ticket
        key = PrefixKey(ticket.prefix_key, ids, keys)
        return dataclasses.replace(ticket, prefix_key=key, prompt_tokens=len(ids))

    def block_sizes(self) -> list[int]:
        """The block sizes a prompt is keyed for: each engine's, and the default."""
        found = {i.block_size for i in self.indexes.values() if i.block_size}
        return sorted(found | {DEFAULT_BLOCK_SIZE})

    async def _keys(self, ids: list[Any]) -> dict[int, list[int]] | None:
        """The prompt's block keys per block size (None: the ids are not all ints); in a
        parse worker when the prompt is long. A worker that died: routed by load."""
        sizes = self.block_sizes()
        workers = parsepool.CURRENT.get()
        if len(ids) > INLINE_TOKENS and workers is not None and workers.count:
            try:
                return await workers.call(prompt_keys, ids, sizes, MAX_PROMPT_BLOCKS)
            except ProxyError:
                return None
        return prompt_keys(ids, sizes, MAX_PROMPT_BLOCKS)

    async def _tokenize(self, body: dict[str, Any], insts: Sequence[Instance]) -> list[Any] | None:
        if not insts:
            return None
        inst = min(insts, key=lambda i: (i.requests, i.tokens))
        # a big body's values may be their JSON text (parsepool.Raw): spliced as they are
        doc = parsepool.encode_body({k: body[k] for k in parsepool.TOKENIZE_KEYS if k in body})
        timeout = aiohttp.ClientTimeout(total=TOKENIZE_TIMEOUT_S)
        who = f"{inst.role} {inst.describe(self.config.debug)}"
        headers = {**self.headers, "Content-Type": "application/json"}
        try:
            async with self.session.post(
                inst.url + "/tokenize", data=doc, headers=headers, timeout=timeout
            ) as resp:
                if resp.status != 200:
                    return None
                raw = await read_answer(resp, MAX_TOKENIZE_BYTES, who, "proxy")
            # big: parsed in a parse worker, only the tokens come back
            tokens = (await parse_answer(raw, who, "proxy", ("tokens",))).get("tokens")
        except (aiohttp.ClientError, TimeoutError):
            return None
        except ProxyError as err:
            if err.kind in ("answer_too_large", "upstream_error"):
                return None  # routed by load alone
            raise  # the memory budget, or a dead parse worker: the request's own error
        return tokens if isinstance(tokens, list) and tokens else None  # ints: _keys checks

    def collector(self) -> Collector:
        return _KvCollector(self)


def _ids_of(body: dict[str, Any]) -> list[Any] | None:
    """The prompt when it is a list (token ids if all are ints: :func:`prompt_keys` says)."""
    prompt = body.get("prompt")
    return prompt if isinstance(prompt, list) and prompt else None


class KvAware:
    """One stage's policy over the shared :class:`KvRouting`."""

    def __init__(self, routing: KvRouting, stage: str) -> None:
        self.routing = routing
        self.stage = stage
        routing.counts.setdefault(stage, _Counts())
        # per engine, the matched tokens of the requests sent there, newest last: the
        # engine's in-flight requests are the newest ``requests`` of them (prefill is
        # first in, first out), and their cached tokens are no work for it
        self.inflight: dict[str, deque[int]] = {}

    def _view(self, inst: Instance, keys_by_size: dict[int, list[int]],
              ids: Sequence[int], now: float) -> tuple[int, bool, list[int]]:  # fmt: skip
        """(matched tokens, scored from events, the keys used) for one candidate."""
        routing = self.routing
        url = inst.url
        precise = routing.live(url)
        index = routing.index(url)
        size = (index.block_size if precise else None) or DEFAULT_BLOCK_SIZE
        keys = keys_by_size.get(size)
        if keys is None:  # a block size announced since the request was keyed: on the loop,
            head = ids[: min(size * MAX_PROMPT_BLOCKS, INLINE_TOKENS)]  # so its head only
            keys = keys_by_size[size] = chain_keys(head, size)
        sent = routing.sent.get(url)
        if not precise:
            if index.feed is Feed.OFF:  # no events asked for: nothing claimed, load decides
                return 0, False, keys
            return (sent.matched(keys) * size if sent is not None else 0), False, keys
        since = now - PENDING_S
        n = 0
        for key in keys:
            if not (index.holds(key) or (sent is not None and sent.sent_since(key, since))):
                break
            n += 1
        return n * size, True, keys

    def _load(self, inst: Instance) -> int:
        """Outstanding tokens less the cached part of the requests in flight there."""
        done = self.inflight.get(inst.url)
        if not done or inst.requests <= 0:
            return inst.tokens
        while len(done) > inst.requests:
            done.popleft()
        return max(inst.tokens - sum(done), 0)

    def choose(self, candidates: Sequence[Instance], prefix_key: bytes) -> Instance:
        ids: Sequence[int] = ()
        tokens = 0
        keys_by_size: dict[int, list[int]] = {}
        if isinstance(prefix_key, PrefixKey):
            ids, keys_by_size = prefix_key.token_ids, dict(prefix_key.keys)
            tokens = prefix_key.tokens
        now = time.monotonic()
        best: tuple[float, int, int, bytes] | None = None
        chosen = candidates[0]
        chosen_view: tuple[int, bool, list[int]] = (0, False, [])
        most = 0  # the longest match among the candidates, bounded out or not
        # a very long cached prefix never buries one engine
        bound = OVERLOAD * min(i.tokens for i in candidates) + SLACK_TOKENS
        weight = self.routing.config.kv_overlap_weight
        for inst in candidates:
            view = self._view(inst, keys_by_size, ids, now)
            matched = min(view[0], tokens)
            most = max(most, matched)
            if inst.tokens > bound:
                continue
            cost = self._load(inst) + weight * max(tokens - matched, 0)
            rank = (cost, -matched, inst.requests, rendezvous(prefix_key, inst))
            if best is None or rank < best:
                best, chosen, chosen_view = rank, inst, (matched, view[1], view[2])
        matched, precise, keys = chosen_view
        counts = self.routing.counts[self.stage]
        if precise:
            counts.precise += 1
        else:
            counts.approximate += 1
        counts.matched_tokens += matched
        counts.passed_over += matched < most
        self.routing.sent.setdefault(chosen.url, SentRecord()).add(keys, now)
        self.inflight.setdefault(chosen.url, deque(maxlen=MAX_INFLIGHT)).append(
            min(matched, tokens)
        )
        return chosen


class _KvCollector(Collector):
    """The feeds' state and the choices made, read at scrape time."""

    def __init__(self, routing: KvRouting) -> None:
        self.routing = routing

    def collect(self) -> Iterator[Metric]:
        r = self.routing
        state = GaugeMetricFamily(
            "servekit_proxy_kv_events_state", "1 for the state of each engine's KV event feed "
            "(off, connecting, live, gap, down); only live is scored from its events",
            labels=["engine", "state"],
        )  # fmt: skip
        blocks = GaugeMetricFamily(
            "servekit_proxy_kv_index_blocks", "Prefix blocks the engine holds, per its events",
            labels=["engine"],
        )  # fmt: skip
        nbytes = GaugeMetricFamily(
            "servekit_proxy_kv_index_bytes", "Memory of the engine's block index (its share "
            "of --kv-index-bytes bounds it)", labels=["engine"],
        )  # fmt: skip
        overflows = CounterMetricFamily(
            "servekit_proxy_kv_index_overflows", "Times the engine's index would have passed "
            "its share of --kv-index-bytes and was emptied", labels=["engine"],
        )  # fmt: skip
        batches = CounterMetricFamily(
            "servekit_proxy_kv_events_batches", "Event batches applied", labels=["engine"]
        )
        gaps = CounterMetricFamily(
            "servekit_proxy_kv_events_gaps", "Sequence gaps seen", labels=["engine"]
        )
        bad = CounterMetricFamily(
            "servekit_proxy_kv_events_bad", "Frames dropped (malformed or oversized)",
            labels=["engine"],
        )  # fmt: skip
        oversized = CounterMetricFamily(
            "servekit_proxy_kv_events_oversized", "Frames dropped for their size (bytes, "
            "events, blocks or token ids over the caps)", labels=["engine"],
        )  # fmt: skip
        for url in sorted(set(r.indexes) | set(r.sources)):
            r.live(url)  # moves a gap past its resync window to live
            idx = r.index(url)
            for feed in Feed:
                state.add_metric([url, feed.value], 1.0 if idx.feed is feed else 0.0)
            blocks.add_metric([url], idx.blocks)
            nbytes.add_metric([url], idx.nbytes)
            overflows.add_metric([url], idx.overflows)
            batches.add_metric([url], idx.batches)
            gaps.add_metric([url], idx.gaps)
            bad.add_metric([url], idx.bad)
            oversized.add_metric([url], idx.oversized)
        choices = CounterMetricFamily(
            "servekit_proxy_kv_choices", "Choices of the kv-events policy by how the chosen "
            "engine was scored (precise: from its events; approximate: from what was sent)",
            labels=["stage", "score"],
        )  # fmt: skip
        matched = CounterMetricFamily(
            "servekit_proxy_kv_matched_tokens", "Prompt tokens the chosen engine held, summed",
            labels=["stage"],
        )  # fmt: skip
        passed = CounterMetricFamily(
            "servekit_proxy_kv_passed_over", "Choices where load outweighed the cache: an "
            "engine holding more of the prompt was a candidate and not chosen",
            labels=["stage"],
        )  # fmt: skip
        for stage, c in sorted(r.counts.items()):
            choices.add_metric([stage, "precise"], c.precise)
            choices.add_metric([stage, "approximate"], c.approximate)
            matched.add_metric([stage], c.matched_tokens)
            passed.add_metric([stage], c.passed_over)
        yield from (state, blocks, nbytes, overflows, batches, gaps, bad, oversized)
        yield from (choices, matched, passed)
