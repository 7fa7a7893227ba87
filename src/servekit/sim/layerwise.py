"""The layerwise KV handoff (vllm-ascend's MooncakeLayerwiseConnector), simulated.

The decoder is asked first: given ``kv_transfer_params`` with
``do_remote_prefill`` it allocates blocks, POSTs them to the ``metaserver`` URL
of the request (in the background, three tries, the answer unread, as the
connector's scheduler does) and waits until a prefill has pushed every layer
into them and said so; only then does it decode. A prefill given the
decoder's call as ``kv_transfer_params`` (``do_remote_decode``, the decoder's
``remote_engine_id``/``remote_host``/``remote_port``/``remote_block_ids`` and
``request_id``) pushes :data:`LAYERS` layers as it computes and signals the
decoder when the last one is in. Facts and sources:
``tests/proxy/fixtures/layerwise_protocol.json``.

Faults answer what vllm-ascend does: a decoder that never calls the
metaserver (``no_metaserver_call``), or whose prefill dies in the middle of
the push (``die_mid_push`` on the prefill: half the layers, then the engine
dies), waits with no bound of its own, holding its request, until the caller
gives up and closes the connection (the engine then aborts the request).
A prefill whose params name no decoder waiting for that request answers 400
(the real one could not reach the decoder's side channel). All endpoints of
one simulator share one :class:`PushBoard`, the transfer engine between them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from servekit.guard import MetaserverKey, trusted_metaservers
from servekit.sim.engine import Seq
from servekit.sim.faults import FaultSpec
from servekit.sim.kvcache import KvCache
from servekit.sim.metrics import EngineStats
from servekit.sim.openai import ApiError, GenRequest
from servekit.sim.spec import EndpointSpec

LAYERS = 8  # layers of the simulated model; only their count and order matter
CALL_TRIES = 3  # the connector's _access_metaserver
CALL_TIMEOUT_S = 30.0  # the connector has none; a bound here keeps a test run finite

# vLLM's id of a request whose X-Request-Id is {rid}, per route (the connector's external id).
EXTERNAL_IDS = {"completion": "cmpl-{rid}-0", "chat": "chatcmpl-{rid}", "responses": "resp_{rid}"}


class HasPushes(Protocol):
    """The transfer layer as this module sees it: the shared push board."""

    @property
    def pushes(self) -> PushBoard: ...


class LayerwiseEndpoint(Protocol):
    """What of an endpoint the layerwise handoff reads and does (``sim.endpoint``'s
    LayerwiseEndpoint is one); a protocol, so this module does not import the endpoint
    that imports it."""

    spec: EndpointSpec
    faults: FaultSpec
    kv: KvCache
    stats: EngineStats
    log: logging.Logger

    @property
    def kvreg(self) -> HasPushes: ...

    def kill(self, reason: str) -> None: ...


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

    def call_in_background(
        self, url: object, message: dict[str, Any], ep: LayerwiseEndpoint
    ) -> None:
        task = asyncio.get_running_loop().create_task(_call(url, message, ep, self))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)


async def _call(
    url: object, message: dict[str, Any], ep: LayerwiseEndpoint, board: PushBoard
) -> None:
    """POST the allocation to the metaserver: three tries on errors, the answer unread."""
    timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT_S)
    for attempt in range(1, CALL_TRIES + 1):
        try:
            if not isinstance(url, str):
                raise ValueError(f"metaserver is {url!r}, not a URL")
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(url, data=json.dumps(message).encode()) as resp,
            ):
                await resp.read()
            board.metaserver_calls += 1
            return
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            ep.log.error(
                "Failed to connect to metaserver: %s, retry %d time. (%s)", url, attempt, exc
            )
    ep.log.error("Access metaserver fail: %s", url)


def guard_keys(ep: LayerwiseEndpoint) -> frozenset[MetaserverKey] | None:
    """What the decode guard trusts here (SERVEKIT_GUARD_METASERVER): None unless layerwise."""
    if ep.spec.kv_mode != "layerwise":
        return None
    return trusted_metaservers(" ".join(ep.spec.metaservers))


async def receive(ep: LayerwiseEndpoint, req: GenRequest, rid: str, prompt_len: int) -> float:
    """Decode side: call the metaserver, wait for every layer; the transfer time left (none)."""
    params = req.kv_transfer_params or {}
    board = ep.kvreg.pushes
    external = EXTERNAL_IDS[req.kind].format(rid=rid)
    push = board.open(ep.spec.engine, external, ep.spec.host, ep.spec.side_port,
                      ep.kv.blocks_for(prompt_len))  # fmt: skip
    ep.log.info("Send request: %s to proxy metaserver: %s", external, params.get("metaserver"))
    message = {
        "token_ids": [], "request_id": external, "do_remote_prefill": False,
        "do_remote_decode": True, "remote_block_ids": push.block_ids,
        "remote_engine_id": ep.spec.engine, "remote_host": ep.spec.host,
        "remote_port": ep.spec.side_port,
    }  # fmt: skip
    try:
        if not ep.faults.no_metaserver_call:
            board.call_in_background(params.get("metaserver"), message, ep)
        await push.done
    except asyncio.CancelledError:
        board.aborted += 1
        ep.log.info("Aborted request %s while waiting for its KV", external)
        raise
    finally:
        board.close(push)
    ep.stats.external_queries += prompt_len
    ep.stats.external_hits += prompt_len
    return 0.0  # the layers arrived while the prefill computed


def start_push(ep: LayerwiseEndpoint, req: GenRequest) -> Push | None:
    """Prefill side: the decoder these params name (checked); None when not a layerwise push."""
    params = req.kv_transfer_params or {}
    if ep.spec.role != "prefill" or not params.get("do_remote_decode"):
        return None
    push = ep.kvreg.pushes.target(params)
    if ep.faults.die_mid_push:
        push.layers = LAYERS // 2
        ep.kill(f"died after pushing {push.layers} of {LAYERS} layers of {push.request_id}")
        raise ApiError(500, "EngineCore died while pushing KV", "EngineDeadError")
    return push


def finish_push(push: Push) -> Callable[[Seq], bool]:
    """The prefill sequence's end: the last layers go in and the decoder is told."""

    def finish(seq: Seq) -> bool:
        push.layers = LAYERS
        if not push.done.done():
            push.done.set_result(None)
        return False  # request_finished returns (False, None): blocks freed now

    return finish
