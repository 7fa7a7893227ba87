"""One ZMQ subscriber per engine, feeding its :class:`~servekit.proxy.kvindex.EngineIndex`.

The subscriber connects (ZMQ reconnects by itself), watches its socket's
monitor for the publisher's connection coming and going, and applies each
batch in sequence order. A missing sequence number is asked for on the
engine's replay socket when one is configured (vLLM's ROUTER: send the first
missing number as 8 bytes big-endian, receive the buffered batches, then an
end marker of -1); if the replay does not close the gap, the index is emptied
and the engine is scored approximately for ``resync_s`` while the index fills
again from the live stream (after the gap every block it learns is certain, so
the rebuilt index is a subset of the engine's cache, never a superset).

A frame that cannot be applied (garbled, or over :mod:`servekit.proxy.kvwire`'s
caps in bytes, events, blocks or token ids: counted apart, as ``oversized``) is
counted and dropped; its events are lost, so the engine is scored
approximately for ``resync_s`` from then on, as after a gap (replaying it would
only bring the same frame). Nothing a publisher sends can stop the subscriber
or hold the event loop for long: a frame costs at most about 0.1 s (the caps),
ZMQ itself drops a connection whose frame passes :data:`MAX_FRAME_BYTES`, the
loop has its turn between frames, and a replay is asked for at most
:data:`MAX_REPLAY` batches.

Nor can a burst fill the proxy: the subscriber's socket queues at most
:data:`RCV_HWM` messages and its kernel buffer holds :data:`RCV_BUF` bytes, so
what waits in the proxy per engine is bounded by ``RCV_HWM x MAX_FRAME_BYTES +
RCV_BUF`` (ZMQ's default was 1,000 messages: 150 valid 3.8 MB batches peaked
the proxy at +391-569 MB). The rest of a burst waits at the publisher (vLLM's
keeps 100,000 messages per subscriber) and comes when the loop reads again; what
the publisher drops is a gap, replayed or resynced. A replay applies each batch
as it arrives, in order, and gives up past :data:`REPLAY_BYTES` of payload.
Needs pyzmq (and msgspec, through :mod:`servekit.proxy.kvwire`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from servekit.kvschema import END_SEQ, seq_frame
from servekit.proxy.kvindex import EngineIndex, Feed
from servekit.proxy.kvwire import (
    MAX_PAYLOAD,
    TooBig,
    WireError,
    parse_frames,
    parse_payload,
    parse_seq,
)

log = logging.getLogger("servekit.proxy.kvevents")
REPLAY_TIMEOUT_S = 2.0
MAX_FRAME_BYTES = 2 * MAX_PAYLOAD  # larger: ZMQ drops the connection, nothing is buffered
MAX_REPLAY = 1024  # batches asked of a replay socket; a wider gap is lost
REPLAY_BYTES = 64 * 1024 * 1024  # payload bytes one replay may bring; more: resync instead
RCV_HWM = 4  # messages the proxy's socket queues per engine (ZMQ's default: 1000)
RCV_BUF = 1024 * 1024  # the kernel's receive buffer per connection


@dataclass(frozen=True)
class Source:
    """Where one engine publishes: its PUB endpoint, optional replay endpoint, topic."""

    endpoint: str
    replay: str | None = None
    topic: str = ""


class Subscriber:
    """Keeps one engine's index in step with its event stream."""

    def __init__(
        self, ctx: zmq.asyncio.Context, source: Source, index: EngineIndex, resync_s: float
    ) -> None:
        self.ctx = ctx
        self.source = source
        self.index = index
        self.resync_s = resync_s
        self.gap_until = 0.0
        index.feed = Feed.CONNECTING

    def live(self) -> bool:
        """True when the index may be trusted for scoring now."""
        if self.index.feed is Feed.GAP and time.monotonic() >= self.gap_until:
            self.index.feed = Feed.LIVE
        return self.index.feed is Feed.LIVE

    async def run(self) -> None:
        sub = self.ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
        sub.setsockopt(zmq.RCVHWM, RCV_HWM)
        sub.setsockopt(zmq.RCVBUF, RCV_BUF)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, self.source.topic.encode())
        monitor = sub.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        sub.connect(self.source.endpoint)
        watch = asyncio.get_running_loop().create_task(self._watch(monitor))
        try:
            while True:
                frames = await sub.recv_multipart()
                await self._on_frames(frames)
                await asyncio.sleep(0)  # a queued frame is read at once: others' turn first
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            sub.disable_monitor()
            monitor.close(linger=0)
            sub.close(linger=0)

    async def _watch(self, monitor: zmq.asyncio.Socket) -> None:
        while True:
            try:
                event = parse_monitor_message(await monitor.recv_multipart())
            except (zmq.ZMQError, ValueError, KeyError):
                continue
            if event["event"] == zmq.EVENT_CONNECTED and self.index.feed is not Feed.LIVE:
                # a (re)started publisher: its numbering starts again (the index was
                # emptied when the connection dropped)
                self.index.last_seq = None
                self.index.feed = Feed.LIVE
            elif event["event"] == zmq.EVENT_DISCONNECTED:
                self.index.feed = Feed.DOWN
                self.index.clear()

    async def _on_frames(self, frames: list[bytes]) -> None:
        try:
            batch = parse_frames(frames)
        except WireError as exc:
            self._drop(frames, exc)
            return
        if self.index.feed in (Feed.DOWN, Feed.CONNECTING):
            self.index.feed = Feed.LIVE  # a message is proof of a connection
        if not self.index.expects(batch.seq) and batch.seq > (self.index.last_seq or 0):
            self.index.gaps += 1
            if not await self._replay(batch.seq):
                self._lose_sync()
        self.index.apply(batch)

    def _drop(self, frames: list[bytes], exc: WireError) -> None:
        """A frame not applied: counted, and its batch's events lost (when it has a number)."""
        self.index.bad += 1
        if isinstance(exc, TooBig):
            self.index.oversized += 1
        log.debug("kv events from %s: dropped a frame: %s", self.source.endpoint, exc)
        try:
            seq = parse_seq(frames[1]) if len(frames) == 3 else None
        except WireError:
            seq = None
        if seq is not None:
            self._lose_sync()
            self.index.last_seq = seq  # what follows is in order again

    def _lose_sync(self) -> None:
        self.index.clear()
        self.gap_until = time.monotonic() + self.resync_s
        if self.index.feed is Feed.GAP:
            return  # said already
        self.index.feed = Feed.GAP
        log.warning(
            "kv events from %s: lost batches after %s; scoring it approximately for %.0fs",
            self.source.endpoint, self.index.last_seq, self.resync_s,
        )  # fmt: skip

    async def _replay(self, upto: int) -> bool:
        """Apply batches ``last_seq+1 .. upto-1`` from the replay socket as they come;
        True when all came, in order, within :data:`REPLAY_BYTES`."""
        if self.source.replay is None or self.index.last_seq is None:
            return False
        if upto - self.index.last_seq > MAX_REPLAY:
            return False
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
        sock.setsockopt(zmq.RCVHWM, RCV_HWM)
        sock.setsockopt(zmq.RCVBUF, RCV_BUF)
        try:
            sock.connect(self.source.replay)
            await sock.send_multipart([b"", seq_frame(self.index.last_seq + 1)])
            async with asyncio.timeout(REPLAY_TIMEOUT_S):
                return await self._apply_replayed(sock, upto)
        except (TimeoutError, WireError, zmq.ZMQError) as exc:
            self.index.bad += 1
            self.index.oversized += isinstance(exc, TooBig)
            return False
        finally:
            sock.close(linger=0)

    async def _apply_replayed(self, sock: zmq.asyncio.Socket, upto: int) -> bool:
        taken = 0
        while True:
            frames = await sock.recv_multipart()
            if len(frames) != 4:
                return False
            seq = parse_seq(frames[2])
            if seq == END_SEQ:
                return self.index.last_seq == upto - 1
            if seq >= upto or self.index.last_seq is None or seq <= self.index.last_seq:
                continue  # past the gap (the live batch follows), or seen already
            taken += len(frames[3])
            if seq != self.index.last_seq + 1 or taken > REPLAY_BYTES:
                return False  # a number missing from the publisher's buffer, or too much
            self.index.apply(parse_payload(seq, frames[3]))
            await asyncio.sleep(0)  # the timeout, and everyone else, get their turn
