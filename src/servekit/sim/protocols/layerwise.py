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
import json
from typing import Any

import aiohttp

from servekit.guard import MetaserverKey, trusted_metaservers
from servekit.sim.engine import Seq
from servekit.sim.openai import ApiError, GenRequest
from servekit.sim.pd import Push, PushBoard
from servekit.sim.protocols.base import Admitted, Endpoint, Handler, OnFinish, plain

LAYERS = 8  # layers of the simulated model; only their count and order matter
CALL_TRIES = 3  # the connector's _access_metaserver
CALL_TIMEOUT_S = 30.0  # the connector has none; a bound here keeps a test run finite

# vLLM's id of a request whose X-Request-Id is {rid}, per route (the connector's external id).
EXTERNAL_IDS = {"completion": "cmpl-{rid}-0", "chat": "chatcmpl-{rid}", "responses": "resp_{rid}"}


async def _call(url: object, message: dict[str, Any], ep: Endpoint, board: PushBoard) -> None:
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


async def receive(ep: Endpoint, req: GenRequest, rid: str, prompt_len: int) -> float:
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
            call = _call(params.get("metaserver"), message, ep, board)
            board.keep(asyncio.get_running_loop().create_task(call))
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


def start_push(ep: Endpoint, req: GenRequest) -> Push | None:
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


def finish_push(push: Push) -> OnFinish:
    """The prefill sequence's end: the last layers go in and the decoder is told."""

    def finish(seq: Seq) -> bool:
        push.layers = LAYERS
        if not push.done.done():
            push.done.set_result(None)
        return False  # request_finished returns (False, None): blocks freed now

    return finish


class Layerwise(Handler):
    """Decoder first: a decoder calls the metaserver and waits; a prefill pushes the layers."""

    protocol = "layerwise"

    async def receive(
        self, ep: Endpoint, req: GenRequest, rid: str, digest: int, prompt_len: int
    ) -> float | None:
        if (req.kv_transfer_params or {}).get("do_remote_prefill"):
            return await receive(ep, req, rid, prompt_len)
        plain(ep, rid, prompt_len)
        return None

    def begin(self, ep: Endpoint, req: GenRequest) -> OnFinish | None:
        push = start_push(ep, req)
        return None if push is None else finish_push(push)

    def finish(self, ep: Endpoint, admitted: Admitted, digest: int) -> OnFinish | None:
        return None  # a prefill pushes only what begin found; the rest frees its blocks

    def guard_keys(self, ep: Endpoint) -> frozenset[MetaserverKey] | None:
        """What the decode guard trusts here (SERVEKIT_GUARD_METASERVER)."""
        return trusted_metaservers(" ".join(ep.spec.metaservers))
