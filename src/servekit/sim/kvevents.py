"""KV events from the simulator's block cache, in vLLM's wire format.

A simulated engine started with ``--kv-events-config`` (``sim serve``) or a
spec's ``kv_events`` publishes what enters and leaves its prefix cache
(:class:`~servekit.sim.kvcache.KvCache` tells a :class:`Publisher`) exactly as
vLLM's ``ZmqEventPublisher`` does: PUB frames ``(topic, seq, payload)`` with
an 8-byte big-endian sequence from 0 and a msgpack ``EventBatch``
``[ts, events, data_parallel_rank]`` whose events are maps tagged by
``type``; a ROUTER replay socket answers ``(b"", start_seq)`` with the
buffered batches from ``start_seq`` on and an end marker of -1. The events
made in one turn of the event loop go out as one batch, as vLLM sends one per
scheduler step. The block hashes are the simulator's own (vLLM's are
``sha256`` or ``xxhash`` digests); consumers key blocks by the token ids the
events carry, as they must with vLLM too.

A wildcard host in the endpoint (``tcp://*:5557``) binds the endpoint's own
listen address: the simulator serves on loopback unless told otherwise. Port 0
binds a free port; :attr:`Publisher.endpoint` says which.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import msgspec
import zmq
import zmq.asyncio

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """vLLM's EventBatch: an array ``[ts, events, data_parallel_rank]``."""

    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class _Event(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """vLLM's KVCacheEvent: a map tagged by ``type`` with the class name."""


class BlockStored(_Event):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None


class BlockRemoved(_Event):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(_Event):
    pass


def _bind(sock: zmq.Socket[Any], endpoint: str, host: str) -> str:
    """Bind ``endpoint`` (``*`` -> ``host``, port 0 -> a free one); the bound endpoint."""
    if endpoint.startswith("tcp://"):
        where, _, port = endpoint[len("tcp://") :].rpartition(":")
        where = host if where in ("*", "", "0.0.0.0") else where
        endpoint = f"tcp://{where}:{'*' if port == '0' else port}"
    sock.bind(endpoint)
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


class Publisher:
    """One engine's KV-event publisher (a :class:`~servekit.sim.kvcache.KvListener`)."""

    def __init__(
        self,
        endpoint: str,
        *,
        host: str,
        block_size: int,
        dp_rank: int = 0,
        replay_endpoint: str | None = None,
        topic: str = "",
        buffer_steps: int = 10_000,
    ) -> None:
        self.ctx = zmq.asyncio.Context()  # the replay socket's, read on the event loop
        self.sync_ctx = zmq.Context()  # the PUB socket's, sent without waiting
        self.pub = self.sync_ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.endpoint = _bind(self.pub, endpoint, host)
        self.replay: zmq.asyncio.Socket | None = None
        self.replay_endpoint: str | None = None
        if replay_endpoint is not None:
            self.replay = self.ctx.socket(zmq.ROUTER)
            self.replay.setsockopt(zmq.LINGER, 0)
            self.replay_endpoint = _bind(self.replay, replay_endpoint, host)
        self.block_size = block_size
        self.dp_rank = dp_rank
        self.topic = topic.encode()
        self.seq = 0
        self.buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._pending: list[_Event] = []
        self._flush: asyncio.Handle | None = None
        self._replay_task: asyncio.Task[None] | None = None
        self._encoder = msgspec.msgpack.Encoder()
        self.paused = False  # tests: stop sending (a dead publisher that keeps its socket)

    def start(self) -> None:
        if self.replay is not None:
            self._replay_task = asyncio.get_running_loop().create_task(self._serve_replay())

    async def close(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
        if self._replay_task is not None:
            self._replay_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._replay_task
        self.pub.close(linger=0)
        if self.replay is not None:
            self.replay.close(linger=0)
        self.ctx.term()
        self.sync_ctx.term()

    # -- KvListener ----------------------------------------------------------

    def stored(self, hashes: Sequence[int], parent: int | None, token_ids: Sequence[int]) -> None:
        self._add(
            BlockStored(list(hashes), parent, list(token_ids), self.block_size, None, "GPU", None)
        )

    def removed(self, hashes: Sequence[int]) -> None:
        self._add(BlockRemoved(list(hashes), "GPU"))

    def cleared(self) -> None:
        self._add(AllBlocksCleared())

    # -- sending -------------------------------------------------------------

    def _add(self, event: _Event) -> None:
        self._pending.append(event)
        if self._flush is None:
            with contextlib.suppress(RuntimeError):  # no loop: sent at the next event
                self._flush = asyncio.get_running_loop().call_soon(self.send_pending)

    def send_pending(self) -> None:
        """Publish the events gathered so far as one batch."""
        self._flush = None
        events, self._pending = self._pending, []
        if not events:
            return
        payload = self._encoder.encode(EventBatch(time.time(), events, self.dp_rank))
        seq = self.seq
        self.seq += 1
        self.buffer.append((seq, payload))
        if self.paused:
            return
        with contextlib.suppress(zmq.Again):  # PUB drops at its high-water mark, as vLLM's
            self.pub.send_multipart((self.topic, seq.to_bytes(8, "big"), payload), zmq.NOBLOCK)

    async def _serve_replay(self) -> None:
        assert self.replay is not None
        while True:
            frames = await self.replay.recv_multipart()
            if len(frames) != 3 or len(frames[2]) != 8:
                continue
            client, _, start = frames
            first = int.from_bytes(start, "big")
            for seq, payload in list(self.buffer):
                if seq >= first:
                    await self.replay.send_multipart(
                        (client, b"", self.topic, seq.to_bytes(8, "big"), payload)
                    )
            await self.replay.send_multipart((client, b"", b"", END_SEQ, b""))
