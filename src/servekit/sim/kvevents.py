"""KV events from the simulator's block cache, in vLLM's wire format.

A simulated engine started with ``--kv-events-config`` (``sim serve``) or a
spec's ``kv_events`` publishes what enters and leaves its prefix cache
(:class:`~servekit.sim.kvcache.KvCache` tells a :class:`Publisher`) exactly as
vLLM's ``ZmqEventPublisher`` does, in the schema :mod:`servekit.kvschema` writes
once for the simulator and the proxy: PUB frames ``(topic, seq, payload)``
with an 8-byte big-endian sequence from 0 and a msgpack ``EventBatch`` whose
events are maps tagged by ``type``, byte for byte what vLLM's structs encode
(``tests/test_kvschema.py``); a ROUTER replay socket answers ``(b"",
start_seq)`` with the buffered batches from ``start_seq`` on and an end
marker. The events made in one turn of the event loop go out as one batch, as
vLLM sends one per scheduler step. The block hashes are the simulator's own (vLLM's are
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

from servekit.kvschema import (
    CLEARED,
    END_SEQ,
    MEDIUM_GPU,
    REMOVED,
    STORED,
    read_seq,
    seq_frame,
    struct_types,
)
from servekit.vocabulary import url_for

# vLLM's structs, from the one schema the proxy reads too (vLLM's fields, in its order,
# written always or only when set as vLLM writes them: the same bytes)
STRUCTS = struct_types("write")
EventBatch: Any = STRUCTS["EventBatch"]
BlockStored: Any = STRUCTS[STORED]
BlockRemoved: Any = STRUCTS[REMOVED]
AllBlocksCleared: Any = STRUCTS[CLEARED]


def _bind(sock: zmq.Socket[Any], endpoint: str, host: str) -> str:
    """Bind ``endpoint`` (``*`` -> ``host``, port 0 -> a free one); the bound endpoint."""
    if endpoint.startswith("tcp://"):
        where, _, port = endpoint[len("tcp://") :].rpartition(":")
        where = host if where in ("*", "", "0.0.0.0") else where
        endpoint = url_for(where, "*" if port == "0" else port, scheme="tcp")
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
        self._pending: list[Any] = []
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
            BlockStored(
                list(hashes), parent, list(token_ids), self.block_size, None, MEDIUM_GPU, None
            )
        )

    def removed(self, hashes: Sequence[int]) -> None:
        self._add(BlockRemoved(list(hashes), MEDIUM_GPU))

    def cleared(self) -> None:
        self._add(AllBlocksCleared())

    # -- sending -------------------------------------------------------------

    def _add(self, event: Any) -> None:
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
            self.pub.send_multipart((self.topic, seq_frame(seq), payload), zmq.NOBLOCK)

    async def _serve_replay(self) -> None:
        assert self.replay is not None
        while True:
            frames = await self.replay.recv_multipart()
            first = read_seq(frames[2]) if len(frames) == 3 else None
            if first is None:
                continue
            client = frames[0]
            for seq, payload in list(self.buffer):
                if seq >= first:
                    await self.replay.send_multipart(
                        (client, b"", self.topic, seq_frame(seq), payload)
                    )
            await self.replay.send_multipart((client, b"", b"", seq_frame(END_SEQ), b""))
