"""The ``kv-events`` policy: route to the engine that holds the prompt's prefix, against load.

Each candidate is scored in tokens of work the engine would have once it took
the request::

    cost = outstanding_tokens + max(prompt_tokens - matched_blocks * block_size, 0)

and the cheapest wins (ties: the longer match, then fewer requests).
``outstanding_tokens`` is what the proxy itself has placed on the engine and
not yet seen finish (the prefill pool's is its active prefill, the decode
pool's its active decode); ``matched_blocks`` is the prompt's leading blocks the
engine holds, from its KV events (:mod:`servekit.proxy.kvindex`).

Against Dynamo's KV router, ``prefill_load_scale * max(active_prefill + prompt -
overlap, 0) + active_decode``: the same sum with the scale at 1, because here
each pool is one PD stage, so an engine's outstanding tokens are all of one
kind and a matched token saves exactly one token of the work it is weighed
against; there is no weight to tune. Against llm-d's scorers (a prefix score,
the fraction of blocks matched, added with configured weights to queue and
KV-utilisation scores): a fraction does not see that 4 matched blocks of a
40k-token prompt save little while the same fraction of a 400-token one is the
whole prompt; tokens do. The decode pool of a PD layout gets its KV from the
prefill, so its matches are usually 0 and it chooses by load, as least-loaded.

An engine whose events are not live (``--kv-events`` not given for it, the
publisher not reached or gone, a gap that could not be replayed) is scored by
the approximate view instead: the blocks of the prompts the proxy itself sent
there lately (:class:`~servekit.proxy.kvindex.SentRecord`), as Dynamo does
without events. ``/metrics`` shows each engine's feed state and how many
choices were precise or approximate.

Token ids: a prompt given as ids is used as is; a text or chat prompt is sent
to one engine's ``/tokenize`` (the engine's own tokenizer and chat template,
which is what produced the blocks' token ids; the proxy ships no tokenizer and
no model files). That is one extra local request per generation, before
routing; when it fails the request is routed by load alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

import aiohttp
import zmq.asyncio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from servekit.proxy.config import ProxyConfig
from servekit.proxy.instances import Instance
from servekit.proxy.kvevents import Source, Subscriber
from servekit.proxy.kvindex import EngineIndex, Feed, SentRecord, chain_keys
from servekit.proxy.requests import Ticket
from servekit.vocabulary import check_url

DEFAULT_BLOCK_SIZE = 16  # vLLM's default, for the approximate view before any event
TOKENIZE_TIMEOUT_S = 5.0
MAX_TOKENIZE_BYTES = 16 * 1024 * 1024
TOKENIZE_KEYS = ("model", "prompt", "messages", "add_special_tokens", "add_generation_prompt",
                 "continue_final_message", "chat_template", "chat_template_kwargs", "tools",
                 "mm_processor_kwargs")  # fmt: skip


class PrefixKey(bytes):
    """The request's prefix key (as every policy reads it) carrying its token ids.

    It travels through the stages unchanged as ``Ticket.prefix_key``, so the
    policy gets the ids without any stage knowing about them.
    """

    token_ids: tuple[int, ...]

    def __new__(cls, key: bytes, token_ids: Sequence[int]) -> PrefixKey:
        obj = super().__new__(cls, key)
        obj.token_ids = tuple(token_ids)
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
        self._tasks: list[asyncio.Task[None]] = []
        self._ctx: zmq.asyncio.Context | None = None
        self.headers: dict[str, str] = {}

    def policy(self, stage: str) -> KvAware:
        return KvAware(self, stage)

    def index(self, url: str) -> EngineIndex:
        found = self.indexes.get(url)
        if found is None:
            found = self.indexes[url] = EngineIndex()
        return found

    async def start(self) -> None:
        """Subscribe to every engine's events (on the proxy's loop)."""
        self._ctx = zmq.asyncio.Context()
        loop = asyncio.get_running_loop()
        for url, source in self.sources.items():
            sub = Subscriber(self._ctx, source, self.index(url), self.config.kv_events_resync_s)
            self.subscribers[url] = sub
            self._tasks.append(loop.create_task(sub.run()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    def live(self, url: str) -> bool:
        sub = self.subscribers.get(url)
        return sub is not None and sub.live()

    async def keyed(self, ticket: Ticket, tokenizers: Sequence[Instance]) -> Ticket:
        """``ticket`` with a :class:`PrefixKey` holding its token ids (when they can be had)."""
        ids = _ids_of(ticket.body)
        if ids is None and ticket.route != "/v1/responses":
            ids = await self._tokenize(ticket.body, tokenizers)
        if not ids:
            return ticket
        key = PrefixKey(ticket.prefix_key, ids)
        return dataclasses.replace(ticket, prefix_key=key, prompt_tokens=len(ids))

    async def _tokenize(self, body: dict[str, Any], insts: Sequence[Instance]) -> list[int] | None:
        if not insts:
            return None
        inst = min(insts, key=lambda i: (i.requests, i.tokens))
        doc = {k: body[k] for k in TOKENIZE_KEYS if k in body}
        timeout = aiohttp.ClientTimeout(total=TOKENIZE_TIMEOUT_S)
        try:
            async with self.session.post(
                inst.url + "/tokenize", json=doc, headers=self.headers, timeout=timeout
            ) as resp:
                if resp.status != 200:
                    return None
                raw = await resp.content.read(MAX_TOKENIZE_BYTES)
        except (aiohttp.ClientError, TimeoutError):
            return None
        try:
            tokens = json.loads(raw).get("tokens")
        except (ValueError, AttributeError, RecursionError):
            return None
        ok = isinstance(tokens, list) and all(type(t) is int for t in tokens)
        return tokens if ok else None

    def collector(self) -> Collector:
        return _KvCollector(self)


def _ids_of(body: dict[str, Any]) -> list[int] | None:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return prompt
    return None


def _tiebreak(key: bytes, inst: Instance) -> bytes:
    return hashlib.blake2b(key + inst.url.encode(), digest_size=8).digest()


class KvAware:
    """One stage's policy over the shared :class:`KvRouting`."""

    def __init__(self, routing: KvRouting, stage: str) -> None:
        self.routing = routing
        self.stage = stage
        routing.counts.setdefault(stage, _Counts())

    def choose(self, candidates: Sequence[Instance], prefix_key: bytes) -> Instance:
        ids = prefix_key.token_ids if isinstance(prefix_key, PrefixKey) else ()
        routing = self.routing
        keys_by_size: dict[int, list[int]] = {}
        best: tuple[int, int, int, bytes] | None = None
        chosen = candidates[0]
        matched_of_chosen = 0
        precise_of_chosen = False
        for inst in candidates:
            url = inst.url
            precise = routing.live(url)
            size = routing.index(url).block_size if precise else None
            size = size or DEFAULT_BLOCK_SIZE
            keys = keys_by_size.get(size)
            if keys is None:
                keys = keys_by_size[size] = chain_keys(ids, size)
            view = routing.index(url) if precise else routing.sent.get(url)
            matched = view.matched(keys) * size if view is not None else 0
            matched = min(matched, len(ids))
            cost = inst.tokens + max(len(ids) - matched, 0)
            rank = (cost, -matched, inst.requests, _tiebreak(prefix_key, inst))
            if best is None or rank < best:
                best, chosen = rank, inst
                matched_of_chosen, precise_of_chosen = matched, precise
        counts = routing.counts[self.stage]
        if precise_of_chosen:
            counts.precise += 1
        else:
            counts.approximate += 1
        counts.matched_tokens += matched_of_chosen
        url = chosen.url
        size = (routing.index(url).block_size if routing.live(url) else None) or DEFAULT_BLOCK_SIZE
        record = routing.sent.setdefault(url, SentRecord())
        record.add(keys_by_size.get(size) or chain_keys(ids, size))
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
        batches = CounterMetricFamily(
            "servekit_proxy_kv_events_batches", "Event batches applied", labels=["engine"]
        )
        gaps = CounterMetricFamily(
            "servekit_proxy_kv_events_gaps", "Sequence gaps seen", labels=["engine"]
        )
        bad = CounterMetricFamily(
            "servekit_proxy_kv_events_bad", "Frames dropped as malformed", labels=["engine"]
        )
        for url in sorted(set(r.indexes) | set(r.sources)):
            r.live(url)  # moves a gap past its resync window to live
            idx = r.index(url)
            for feed in Feed:
                state.add_metric([url, feed.value], 1.0 if idx.feed is feed else 0.0)
            blocks.add_metric([url], idx.blocks)
            batches.add_metric([url], idx.batches)
            gaps.add_metric([url], idx.gaps)
            bad.add_metric([url], idx.bad)
        choices = CounterMetricFamily(
            "servekit_proxy_kv_choices", "Choices of the kv-events policy by how the chosen "
            "engine was scored (precise: from its events; approximate: from what was sent)",
            labels=["stage", "score"],
        )  # fmt: skip
        matched = CounterMetricFamily(
            "servekit_proxy_kv_matched_tokens", "Prompt tokens the chosen engine held, summed",
            labels=["stage"],
        )  # fmt: skip
        for stage, c in sorted(r.counts.items()):
            choices.add_metric([stage, "precise"], c.precise)
            choices.add_metric([stage, "approximate"], c.approximate)
            matched.add_metric([stage], c.matched_tokens)
        yield from (state, blocks, batches, gaps, bad, choices, matched)
