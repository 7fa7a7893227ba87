"""The stream relay: a generating stage's stream to the client, written once for all.

The response head goes out once, when the decoder's first bytes are in (before
them, anything that fails can still be retried or answered with a proper
status). Then one pump copies each leg's chunks as they come:

- byte for byte where the stream cannot migrate (a replica, layerwise, a request
  the tape cannot follow): a stream that breaks, or ends without ``[DONE]``, is
  ended with an error event naming the stage; a stream on an instance found
  gone is closed at once (:meth:`Instance.cut`) rather than at
  ``--stream-idle-timeout``;
- event by event through the stream's tape where it may migrate: the client
  gets what the tape lets out (an event larger than ``--parse-inline-bytes`` is
  read in a parse worker, so the loop only splits it), the leg's lease says how
  to cut it (a drain past its grace, a lost node), and a leg that breaks is
  followed by what its :class:`Carrier` says: the next leg, the end of a whole
  answer, or an error event.

The relay knows the migration only as a :class:`Carrier` (the flow hands it
:class:`servekit.proxy.migration.Migration`): it imports nothing from the
migration, the flow or a protocol, so it calls down to the exchanges alone.

Each leg's lease grows by its events (a decoder's load) and is released when the
leg ends, however it ends; a client that goes away closes the leg, so the engine
aborts the request.
"""

from __future__ import annotations

import contextlib
import enum
import time
from functools import partial
from typing import Protocol

import aiohttp
from aiohttp import web

from servekit.proxy.bodies import parse_off_loop
from servekit.proxy.failures import ProxyError, stream_interrupted
from servekit.proxy.sse import read_event
from servekit.proxy.stages import Opened, Stages
from servekit.proxy.tape import Tape

BROKEN = (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, TimeoutError)
TAIL_BYTES = 32  # what is kept of a byte-for-byte stream to see its [DONE]


class End(enum.Enum):
    """How one leg's stream ended."""

    DONE = "done"  # with [DONE]: the answer went out whole
    ENDED = "ended"  # the decoder closed it without [DONE] (or the tape stopped it)
    BROKEN = "broken"  # a connection error or a read timeout


class Carrier(Protocol):
    """What carries a stream on when a leg breaks (the migration): the tape its legs
    are read through, and what follows a leg that ended without ``[DONE]``."""

    @property
    def tape(self) -> Tape: ...

    async def after(self, leg: Opened) -> Opened | bytes | ProxyError:
        """The next leg, the bytes that end a whole answer, or the error that ends it."""
        ...


class _Stream(web.StreamResponse):
    """A streamed answer whose head goes out with its first bytes, and whose last bytes
    go out with its end: one write (one send) for a stream that came in one chunk,
    where aiohttp's default sends the head, each chunk and the end on their own. The
    relay prepares it only when it holds the first bytes, so nothing waits for it."""

    _send_headers_immediately = False  # as aiohttp's own web.Response


class _ClientGone(Exception):
    """The client closed its connection while we streamed to it."""


def cut_stream(resp: aiohttp.ClientResponse) -> None:
    """End a relayed stream from the proxy's side: its reader sees a broken stream."""
    resp.content.set_exception(aiohttp.ClientConnectionError("the decoder is leaving"))
    resp.close()


class Relay:
    """One client's stream: its head, then each leg pumped into it."""

    def __init__(
        self, request: web.Request, stages: Stages, stage: str, migration: Carrier | None
    ) -> None:
        self.request = request
        self.stages = stages
        self.stage = stage
        self.migration = migration
        self.router = stages.router
        self._last = b""  # the bytes that carry [DONE], written with the stream's end

    async def stream(self, opened: Opened) -> web.StreamResponse:
        """Relay ``opened`` (and the legs that carry it on) to the client."""
        out = _Stream(
            headers={
                "Content-Type": opened.resp.headers.get("Content-Type", "text/event-stream"),
                "X-Request-Id": self.stages.rid,
            }
        )
        self.stages.progress.stage = "stream"
        leg: Opened | None = opened  # not handed to the pump yet: closed here on failure
        try:
            await out.prepare(self.request)
            self.stages.progress.first_byte_at = time.perf_counter()
            while leg is not None:
                current, leg = leg, None  # the pump releases it, whatever happens
                end = await self._pump(out, current)
                if end is End.DONE:
                    break
                after = await self._after(current, end)
                if isinstance(after, Opened):
                    leg = after
                elif isinstance(after, ProxyError):
                    self.router.metrics.errors.labels(after.stage, after.kind).inc()
                    await _write(out, after.sse_event())
                else:
                    await _write(out, after)
        except _ClientGone:
            self.router.metrics.disconnects.labels("stream").inc()
            return out
        except BaseException:
            if leg is not None:
                leg.resp.close()
                self.router.release(leg.lease)
            raise
        with contextlib.suppress(ConnectionResetError):
            await out.write_eof(self._last)
        return out

    async def _after(self, leg: Opened, end: End) -> Opened | bytes | ProxyError:
        """What follows a leg that did not end with ``[DONE]``."""
        if self.migration is not None:
            return await self.migration.after(leg)
        how = "ended without [DONE]" if end is End.ENDED else "interrupted"
        return stream_interrupted(self.stage, how)

    async def _pump(self, out: web.StreamResponse, leg: Opened) -> End:
        """Copy one leg's chunks to the client until it ends (through the tape where the
        stream may migrate); its lease is released and its response closed here."""
        resp, lease, chunk = leg.resp, leg.lease, leg.first
        tape = self.migration.tape if self.migration is not None else None
        end, broken = End.BROKEN, False
        try:
            with self._cuttable(leg):
                tail = b""
                while chunk:
                    data = chunk if tape is None else await self._through(tape, chunk)
                    if tape is None:
                        tail = (tail + chunk)[-TAIL_BYTES:]
                    if tape.done if tape is not None else b"[DONE]" in tail:
                        self._last += data  # the answer's end: written with the stream's
                    elif data:
                        try:
                            await out.write(data)
                        except ConnectionResetError as exc:
                            raise _ClientGone from exc
                    lease.grow(chunk.count(b"data:"))
                    if tape is not None and tape.stopped:
                        break
                    chunk = await resp.content.readany()
            done = tape.done if tape is not None else b"[DONE]" in tail
            end = End.DONE if done else End.ENDED
        except BROKEN:
            broken = True
            if self._last:  # broken after its [DONE]: the client's answer is whole
                end = End.DONE
        finally:
            # a stream read to its end gives its connection back; any other is closed
            whole = not broken and (end is End.DONE or (tape is None and end is End.ENDED))
            if whole:
                resp.release()
            else:
                resp.close()
            self.router.release(lease)
        return end

    def _cuttable(self, leg: Opened) -> contextlib.AbstractContextManager[None]:
        """How the leg is cut from the proxy's side: a stream that may migrate by its
        lease (a leaving or lost decoder: it carries on elsewhere), another by closing
        it when its instance is found gone."""
        if self.migration is not None:
            leg.lease.cuttable(partial(cut_stream, leg.resp))
            return contextlib.nullcontext()
        if leg.inst is None:
            return contextlib.nullcontext()
        return leg.inst.cuttable(leg.resp.close)

    async def _through(self, tape: Tape, chunk: bytes) -> bytes:
        """The events ``chunk`` completes, as the client gets them; an event larger than
        ``--parse-inline-bytes`` is read in a parse worker, so the loop only splits it."""
        inline = self.router.config.parse_inline_bytes
        out: list[bytes] = []
        for raw in tape.split(chunk):
            if tape.stopped:
                break
            if len(raw) <= inline:
                event = read_event(raw, tape.strips)
            else:
                event = await parse_off_loop(
                    read_event, raw, tape.strips, inline_if_worker_dies=True
                )
            out.append(tape.take(raw, event))
        tape.chunk_done()
        return b"".join(out)


async def _write(out: web.StreamResponse, data: bytes) -> None:
    with contextlib.suppress(ConnectionResetError):
        await out.write(data)
