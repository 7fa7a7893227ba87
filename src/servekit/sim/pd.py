"""The KV transfer layer between prefill and decode endpoints, as vLLM's connectors do it.

What each protocol's endpoints do with it is their handler's
(servekit.sim.protocols, one module per protocol); this is what they share.

All endpoints share one process, so one :class:`KvRegistry` stands for the
transfer engines of every instance. A prefill-role endpoint that finishes a
request with ``do_remote_decode`` keeps its blocks and offers them under
kv_transfer_params; a decode-role endpoint claims them once. Params that name
an unknown engine or address, blocks never produced, already consumed, expired
or prefilled for another prompt are refused, as a real connector would fail.
The prompt-keyed mode (vLLM's ExampleConnector) needs no params: decode finds
the prefilled KV by a digest of the prompt.

The params have the shapes the real connectors produce (recorded from real
engines in ``tests/fixtures/kv_params.json`` and compared field by field in
``tests/sim/test_kv_shapes.py``): NixlConnector's pull params (block ids one
list per KV cache group, side channel, sizes, expiry, ``transfer_mode``);
vllm-ascend's Mooncake pull params for its connectors; and for vLLM's
MooncakeConnector (bootstrap) no params at all from the prefill, which holds
the KV under the proxy's ``transfer_id`` until a decoder names that id, the
engine and the prefill's bootstrap server.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servekit.guard import asks_remote_prefill
from servekit.sim.openai import ApiError
from servekit.vocabulary import url_for

PROMPT_KEYED_MAX = 4096
TRANSFER_KEY = "transfer:"
MAX_TRANSFER_WAITS = 4096  # pulls a side channel holds open for KV not offered yet
NIXL_NAMES = frozenset({"NixlConnector", "NixlPullConnector"})


class KvTransferError(Exception):
    """kv_transfer_params the connector cannot honour."""


class KvSourceLost(KvTransferError):
    """The prefill the params name is dead or unreachable: its KV cannot be read."""


@dataclass(frozen=True, slots=True)
class Producer:
    """A prefill endpoint as the transfer layer sees it."""

    engine_id: str
    host: str
    port: int
    tp_size: int
    connector: str = "NixlConnector"
    bootstrap: bool = False

    @property
    def bootstrap_addr(self) -> str:
        """The URL of this producer's bootstrap server (vLLM's MooncakeConnector)."""
        return url_for(self.host, self.port)


@dataclass(slots=True)
class Offer:
    """Prefilled KV waiting for its decoder."""

    producer: Producer
    prompt_digest: int
    prompt_len: int
    block_ids: list[int]
    expires: float
    release: Callable[[], None]
    consumed: bool = False


def _flat_blocks(value: object) -> list[int] | None:
    """Block ids as one list, from a list of ids or one list per KV cache group."""
    if not isinstance(value, list):
        return None
    if all(isinstance(v, list) for v in value):
        return [b for group in value for b in group]
    return list(value)


def _names(params: dict[str, Any], producer: Producer) -> bool:
    """The params point at ``producer`` (its KV port, or its bootstrap server)."""
    address = (params.get("remote_host"), params.get("remote_port"))
    return address == (producer.host, producer.port) or (
        params.get("remote_bootstrap_addr") == producer.bootstrap_addr
    )


def pull_params(
    producer: Producer, request_id: str, ids: list[int], prompt_len: int, expires: float | None
) -> dict[str, Any]:
    """The kv_transfer_params a pull connector's prefill answers, in its real shape."""
    if producer.connector in NIXL_NAMES:
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": [ids],
            "remote_engine_id": producer.engine_id,
            "remote_request_id": request_id,
            "remote_host": producer.host,
            "remote_port": producer.port,
            "tp_size": producer.tp_size,
            "dcp_size": 1,
            "pp_size": 1,
            "remote_num_tokens": prompt_len,
            "remote_blocks_expiry_time": expires,
            "transfer_mode": "pull",
            "remote_prefill_cached_tokens": 0,
        }
    return {  # vllm-ascend's Mooncake connectors (request_finished)
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": [ids],
        "remote_num_prompt_tokens": prompt_len,
        "remote_engine_id": producer.engine_id,
        "remote_request_id": request_id,
        "remote_host": producer.host,
        "remote_port": producer.port,
        "last_token_id": 0,
    }


@dataclass
class Push:
    """One decoder's blocks waiting for a prefill to push the layers in."""

    engine_id: str
    request_id: str
    host: str
    port: int
    block_ids: list[int]
    layers: int = 0
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class PushBoard:
    """The pushes waiting in one simulator process, by (decoder engine id, request id)."""

    def __init__(self) -> None:
        self._waiting: dict[tuple[str, str], Push] = {}
        self._ids = itertools.count(1)
        self._calls: set[asyncio.Task[None]] = set()
        self.metaserver_calls = 0
        self.aborted = 0

    def open(self, engine_id: str, request_id: str, host: str, port: int, n_blocks: int) -> Push:
        blocks = [next(self._ids) for _ in range(max(1, n_blocks))]
        push = Push(engine_id, request_id, host, port, blocks)
        self._waiting[(engine_id, request_id)] = push
        return push

    def close(self, push: Push) -> None:
        if self._waiting.get((push.engine_id, push.request_id)) is push:
            del self._waiting[(push.engine_id, push.request_id)]

    def waiting(self) -> int:
        return len(self._waiting)

    def target(self, params: dict[str, Any]) -> Push:
        """The decoder a prefill's params name; ApiError 400 when none waits for them."""
        key = (str(params.get("remote_engine_id")), str(params.get("request_id")))
        push = self._waiting.get(key)
        if push is None or push.done.done():
            raise ApiError(400, "kv_transfer_params: no decoder waits for this request's KV",
                           "KVTransferError")  # fmt: skip
        if (params.get("remote_host"), params.get("remote_port")) != (push.host, push.port):
            raise ApiError(400, "kv_transfer_params: remote_host/remote_port is not that "
                           "decoder's side channel", "KVTransferError")  # fmt: skip
        if params.get("remote_block_ids") != push.block_ids:
            raise ApiError(400, "kv_transfer_params: remote_block_ids are not the blocks that "
                           "decoder allocated", "KVTransferError")  # fmt: skip
        return push

    def keep(self, task: asyncio.Task[None]) -> None:
        """Hold a decoder's background metaserver call until it ends."""
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)


class KvRegistry:
    """Every offered transfer of one simulator process."""

    def __init__(self) -> None:
        self._producers: dict[str, list[Producer]] = {}
        self._offers: dict[tuple[str, str], Offer] = {}
        self._block_ids = itertools.count(1)
        self._by_prompt: OrderedDict[int, int] = OrderedDict()
        self.pushes = PushBoard()  # the layerwise connector's pushes (sim.protocols.layerwise)
        self.down: set[Producer] = set()  # producers dead or unreachable: their KV is gone
        self.pulling: dict[tuple[str, str], Producer] = {}  # (decoder, request) -> source
        # bootstrap mode across processes: the engine ids bootstrap servers named, each with
        # its workers' addresses, kept for good (the connector's _remote_agents), the query
        # running per server, and the pulls a prefill's side channel waits to serve
        self.remote_engines: dict[str, tuple[str, ...]] = {}
        self.bootstrap_queries: dict[str, asyncio.Future[None]] = {}
        self._transfer_waits: dict[tuple[str, str], asyncio.Event] = {}

    def add_producer(self, producer: Producer) -> None:
        self._producers.setdefault(producer.engine_id, []).append(producer)

    def offer(
        self,
        producer: Producer,
        *,
        request_id: str,
        prompt: tuple[int, int],
        n_blocks: int,
        window: tuple[float, float],
        release: Callable[[], None],
        transfer_id: str | None = None,
    ) -> dict[str, Any] | None:
        """Hold prefilled blocks for a decoder; the params the prefill response carries.

        ``window`` is (now, timeout) in virtual seconds. A bootstrap producer
        holds them under ``transfer_id`` and answers no params (None).
        """
        digest, prompt_len = prompt
        now, timeout = window
        expires = now + timeout
        self.collect(now)
        ids = [next(self._block_ids) for _ in range(max(1, n_blocks))]
        name = TRANSFER_KEY + str(transfer_id) if producer.bootstrap else request_id
        key = (producer.engine_id, name)
        old = self._offers.pop(key, None)
        if old is not None and not old.consumed:
            old.release()
        self._offers[key] = Offer(producer, digest, prompt_len, ids, expires, release)
        if producer.bootstrap:
            waiting = self._transfer_waits.get(key)
            if waiting is not None:
                waiting.set()
            return None
        return pull_params(producer, request_id, ids, prompt_len, None)

    def claim(
        self, params: dict[str, Any], prompt_digest: int, now: float, *, trust_remote: bool = False
    ) -> Offer | None:
        """Take the offer the params name; KvTransferError when they do not match one.

        With ``trust_remote``, params naming an engine of another process are
        accepted when well-formed (None: nothing to take here).
        """
        engine = str(params.get("remote_engine_id"))
        producers = self._producers.get(engine)
        if not producers and trust_remote:
            if not asks_remote_prefill(params):  # the guard's rule: what a connector can act on
                raise KvTransferError(
                    "kv_transfer_params do not name a prefill's KV (pull: remote_block_ids, "
                    "remote_engine_id, remote_request_id, remote_host, remote_port; bootstrap: "
                    "transfer_id, remote_engine_id, remote_bootstrap_addr)"
                )
            return None
        if not producers:
            raise KvTransferError(f"remote_engine_id {engine!r} names no prefill engine")
        try:
            offer = self._find(params, engine, producers)
        except KvTransferError as exc:
            lost = [p for p in producers if p in self.down and _names(params, p)]
            if lost:  # its offers went with it: the pull fails, not the params
                raise KvSourceLost(f"engine {engine} is gone ({exc})") from exc
            raise
        if offer.consumed:
            raise KvTransferError("remote_block_ids were already consumed by another request")
        if offer.expires < now:
            raise KvTransferError("remote_block_ids expired before the decoder pulled them")
        if offer.prompt_digest != prompt_digest:
            raise KvTransferError("the prompt differs from the one prefilled for these blocks")
        offer.consumed = True
        offer.release()
        return offer

    def _find(self, params: dict[str, Any], engine: str, producers: list[Producer]) -> Offer:
        """The offer pull or bootstrap params name; KvTransferError when none matches."""
        if "transfer_id" in params and "remote_bootstrap_addr" in params:
            addr = params.get("remote_bootstrap_addr")
            if addr not in {p.bootstrap_addr for p in producers if p.bootstrap}:
                raise KvTransferError(
                    f"remote_bootstrap_addr {addr} is not the bootstrap server of engine {engine}"
                )
            found = self._offers.get((engine, TRANSFER_KEY + str(params.get("transfer_id"))))
            if found is None:
                raise KvTransferError("transfer_id names no KV held by that engine")
            return found
        address = (params.get("remote_host"), params.get("remote_port"))
        if address not in {(p.host, p.port) for p in producers}:
            raise KvTransferError(
                f"remote_host/remote_port {address[0]}:{address[1]} is not a KV port "
                f"of engine {engine}"
            )
        offer = self._offers.get((engine, str(params.get("remote_request_id"))))
        if offer is None or offer.block_ids != _flat_blocks(params.get("remote_block_ids")):
            raise KvTransferError("remote_block_ids were never produced by that engine")
        return offer

    async def send_transfer(self, producer: Producer, transfer_id: str, wait_s: float) -> bool:
        """A decoder's pull reached ``producer``'s side channel: the KV it holds under
        ``transfer_id`` is sent (consumed). Not held yet, it waits up to ``wait_s`` wall
        seconds for the prefill to offer it, as vLLM's sender waits for the request to be
        ready (VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT); False when it never was."""
        key = (producer.engine_id, TRANSFER_KEY + transfer_id)
        offer = self._offers.get(key)
        free = len(self._transfer_waits) < MAX_TRANSFER_WAITS
        if offer is None and key not in self._transfer_waits and wait_s > 0 and free:
            event = self._transfer_waits[key] = asyncio.Event()
            try:
                await asyncio.wait_for(event.wait(), wait_s)
            except TimeoutError:
                pass
            finally:
                self._transfer_waits.pop(key, None)
            offer = self._offers.get(key)
        if offer is None or offer.consumed:
            return False
        offer.consumed = True
        offer.release()
        return True

    def collect(self, now: float) -> None:
        """Forget expired offers, releasing the blocks nobody claimed (vLLM's abort timeout)."""
        self._drop([k for k, o in self._offers.items() if o.expires < now])

    def drop_producer(self, producer: Producer) -> None:
        """A producer died or restarted: the blocks it offered are gone (not its DP peers')."""
        self._drop([k for k, o in self._offers.items() if o.producer == producer])

    def _drop(self, keys: list[tuple[str, str]]) -> None:
        for key in keys:
            offer = self._offers.pop(key)
            if not offer.consumed:
                offer.release()

    def store_prompt(self, prompt_digest: int, prompt_len: int) -> None:
        """Prompt-keyed mode: a producer saved the KV of this prompt."""
        self._by_prompt[prompt_digest] = prompt_len
        self._by_prompt.move_to_end(prompt_digest)
        while len(self._by_prompt) > PROMPT_KEYED_MAX:
            self._by_prompt.popitem(last=False)

    def lookup_prompt(self, prompt_digest: int) -> bool:
        """Prompt-keyed mode: whether a producer saved this prompt's KV."""
        return prompt_digest in self._by_prompt
