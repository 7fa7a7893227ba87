"""One request's trip through the stages: prefill, then decode (or one replica).

What every handoff protocol shares is here; how each hands the KV over is its
handler's (servekit.proxy.protocols, one module per protocol). Rules kept here:
- a backend 4xx passes through with its status and body (:class:`Answer`);
- a backend 5xx, an empty 200 or a 200 that is not UTF-8 JSON is tried on
  another instance while nothing reached the client, and becomes a 502 naming
  the stage when none served; an unstreamed answer over ``--max-answer-bytes``
  is a 502 at once (the request asked for it, the engine is not at fault);
- prefilled KV is consumed once: where the protocol hands over params naming
  it (``fresh_kv``), each decode attempt runs a new prefill for new KV, and
  never resends block ids a decoder may have pulled already;
- ``--max-attempts`` bounds the failed prefills of the whole request: the
  prefills its decode retries and migrations run draw on one budget, and a
  prefill that failed the request is not chosen again (each decode attempt's
  prefill once had a budget of its own: 3 decode attempts could run 9
  prefills); the decode stage is tried up to ``--max-attempts`` times before
  its first byte, and carried on at most ``--migration-limit`` times after;
- the KV lease (``--kv-lease``, protocols whose prefill holds the KV): a decode
  body is refused at write time once the lease that started when its prefill
  answered has passed, and a new prefill runs (:meth:`Trip.hand_over`);
- a stream is only started towards the client once the decoder produced its
  first byte, so anything that fails before that can still be retried or
  reported with a proper status; after it, failures end the stream with an
  error event, or (``--migration-limit``) the stream carries on through a new
  handoff to another decoder, as :mod:`servekit.proxy.carry` says: never with a
  changed answer, never after a ``finish_reason`` (the proxy ends that stream);
- a decode that fails before its first byte may be its KV's fault (the prefill
  that made it is gone, mid-transfer): that prefill is suspect too, so the
  retry's new prefill runs elsewhere unless a probe finds it alive;
- work in flight on an instance the health checker finds gone is cut
  (:meth:`Instance.cut`): a prefill or a decode's first byte is retried
  elsewhere, a stream carried on, rather than waiting out the timeouts;
- every lease is released in a ``finally``, and a cancelled handler (client
  disconnect) closes the backend connection so the engine aborts the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple, Protocol

import aiohttp
from aiohttp import web

from servekit.proxy.bodies import parse_answer, parse_off_loop, read_answer
from servekit.proxy.budget import refund
from servekit.proxy.carry import ROUTES
from servekit.proxy.failures import Answer, ProxyError
from servekit.proxy.instances import Hold, Instance, Lease, acquire
from servekit.proxy.lease import LeasedBody, margin
from servekit.proxy.tape import Carry, Tape
from servekit.proxy.parsepool import Raw, encode_body
from servekit.proxy.payloads import kv_params_of, prefill_payload
from servekit.proxy.requests import Ticket
from servekit.proxy.router import RETRYABLE, Router
from servekit.proxy.sse import read_event


class _ClientGone(Exception):
    """The client closed its connection while we streamed to it."""


class Progress:
    """Where a request stands (what a client disconnect interrupted)."""

    def __init__(self) -> None:
        self.stage = "proxy"


Body = bytes | LeasedBody  # a body a decode request sends (leased: refused past the KV lease)


class Handoff(Protocol):
    """What a trip asks of its protocol's handler (one module each in servekit.proxy.protocols)."""

    @property
    def holds_lease(self) -> bool:
        """The prefill keeps the KV only until ``--kv-lease`` passes (servekit.kvprotocol)."""

    @property
    def fresh_kv(self) -> bool:
        """Each decode attempt needs KV of its own prefill (the KV is consumed once)."""

    @property
    def migrates(self) -> bool:
        """A stream whose decoder fails mid-answer may carry on elsewhere."""

    async def handoff(self, trip: Trip, body: dict[str, Any]) -> dict[str, Any]:
        """Run the prefill for ``body``; the decode request's body (the KV's params in it)."""


PREFILL_READS = ("kv_transfer_params",)  # all the proxy reads of a prefill's answer


class Whole(NamedTuple):
    """An unstreamed answer: its bytes, and the members of it that were asked for."""

    body: bytes
    fields: dict[str, Any]


@dataclass
class Opened:
    """A decode stream whose first bytes have arrived."""

    lease: Lease
    resp: aiohttp.ClientResponse
    first: bytes
    inst: Instance | None = None


def _check_status(who: str, stage: str, status: int, body: bytes, ctype: str) -> None:
    """4xx passes through; other non-200 answers and empty bodies become 502."""
    if 400 <= status < 500:
        raise Answer(status, body, ctype)
    if status != 200:
        raise ProxyError("upstream_error", stage, f"{who} answered HTTP {status}")
    if not body:
        raise ProxyError("upstream_error", stage, f"{who} answered 200 with an empty body")


def cut_stream(resp: aiohttp.ClientResponse) -> None:
    """End a relayed stream from the proxy's side: its reader sees a broken stream."""
    resp.content.set_exception(aiohttp.ClientConnectionError("the decoder is leaving"))
    resp.close()


def _raise_if_stale(data: bytes | LeasedBody, stage: str) -> None:
    """A request that failed because its body outlived the KV lease (nothing was sent)."""
    if isinstance(data, LeasedBody) and data.stale:
        msg = "the prefill's KV lease (--kv-lease) passed before the decode request was sent"
        raise ProxyError("kv_lease_expired", stage, msg) from None


class Trip:
    """The exchanges of one client request."""

    def __init__(
        self,
        router: Router,
        request: web.Request,
        ticket: Ticket,
        progress: Progress,
        handoff: Handoff | None = None,
    ) -> None:
        self.router = router
        self.request = request
        self.ticket = ticket
        self.progress = progress
        self.handoff = handoff  # None: replica mode
        self.started = time.perf_counter()
        self.first_byte_at: float | None = None
        self.prefilled_on: Instance | None = None
        self.tried: set[Instance] = set()  # decoders that failed this request
        self.prefills_tried: set[Instance] = set()  # prefills that failed it
        self.tape: Tape | None = None  # set when a failed stream may migrate
        self.pull: Hold | None = None  # the prefill kept until its KV is pulled (drain)
        self.original = ticket  # the client's request (a migration replaces self.ticket)
        self.model_len: int | None = None  # the first leg's decoder's max_model_len
        cfg = router.config
        if (
            handoff is not None
            and handoff.migrates
            and cfg.migration_limit
            and ticket.stream
            and ticket.route in ROUTES
            and ticket.body.get("n", 1) == 1
        ):
            self.tape = Tape(ticket.route, ticket.body, max_event_bytes=cfg.max_answer_bytes)
        self.rid = request.headers.get("X-Request-Id") or uuid.uuid4().hex
        self.headers = {
            "Content-Type": "application/json",
            "X-Request-Id": self.rid,
            **router.headers,
        }

    def _who(self, stage: str, inst: Instance) -> str:
        return f"{stage} {self.router.describe(inst)}"

    def _timeout(self, total: float | None) -> aiohttp.ClientTimeout:
        cfg = self.router.config
        return aiohttp.ClientTimeout(
            total=total, sock_connect=cfg.connect_timeout_s, sock_read=cfg.stream_idle_timeout_s
        )

    async def post_whole(
        self, stage: str, inst: Instance, data: Body, total: float, keys: tuple[str, ...] = ()
    ) -> Whole:
        """POST and read the whole answer (capped) and its members ``keys``; non-200 and
        non-JSON answers raise. A big answer is parsed in a parse worker."""
        lease = acquire(inst, self.ticket.prompt_tokens)
        who = self._who(stage, inst)
        gone = Gone(inst)
        try:
            async with asyncio.timeout(None) as scope:
                with gone.cutting(scope):
                    async with self.router.session.post(
                        inst.url + self.ticket.route, data=data, headers=self.headers,
                        timeout=self._timeout(total),
                    ) as resp:  # fmt: skip
                        body = await read_answer(
                            resp, self.router.config.max_answer_bytes, who, stage
                        )
                        ctype = resp.headers.get("Content-Type", "application/json")
                        _check_status(who, stage, resp.status, body, ctype)
            return Whole(body, await parse_answer(body, who, stage, keys))
        except aiohttp.ClientError:
            _raise_if_stale(data, stage)
            raise
        except TimeoutError:
            gone.reraise()
            raise
        finally:
            self.router.release(lease)

    async def prefill(
        self, with_kv_params: bool, kv_params: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """Run the prefill copy; returns its kv_transfer_params (None if absent).

        The instance that served it is kept in ``prefilled_on``.
        """
        payload = prefill_payload(self.ticket.route, self.ticket.body, with_kv_params, kv_params)
        self.progress.stage = "prefill"
        return kv_params_of(await self.prefill_on_any(encode_body(payload)))

    async def prefill_on_any(self, data: bytes) -> dict[str, Any]:
        """POST ``data`` to a prefill (retried on another); what the proxy reads of its
        answer (:data:`PREFILL_READS`), the instance kept. The answer itself is dropped
        (a big one never left the parse worker but as its bytes) and its bytes given
        back to the budget."""
        cfg = self.router.config
        t0 = time.perf_counter()

        async def exchange(inst: Instance) -> dict[str, Any]:
            whole = await self.post_whole(
                "prefill", inst, data, cfg.prefill_timeout_s, PREFILL_READS
            )
            self.prefilled_on = inst
            refund(len(whole.body))
            return whole.fields

        # one budget for the request: a call never starts with none left, since the
        # call that failed its last try raised and ended the request
        left = cfg.max_attempts - len(self.prefills_tried)
        fields = await self.router.attempt(
            "prefill", self.ticket.prefix_key, exchange, attempts=left,
            tried=self.prefills_tried,
        )  # fmt: skip
        self.router.metrics.stage.labels("prefill").observe(time.perf_counter() - t0)
        return fields

    def decode_body(self) -> dict[str, Any]:
        """The client's body, asking for token ids when the stream may migrate."""
        body = self.ticket.body
        if self.tape is None or body.get("return_token_ids") is True:
            return body
        return {**body, "return_token_ids": True}

    async def hand_over(self, body: dict[str, Any]) -> Body:
        """The protocol's prefill for ``body``, and the decode request's body it makes.

        Where the prefill keeps the KV only for ``--kv-lease``, the lease starts when
        the prefill answered and the body refuses to be written once it passed.
        """
        assert self.handoff is not None
        data = encode_body(await self.handoff.handoff(self, body))
        self.pulled()
        if self.handoff.holds_lease and self.prefilled_on is not None:
            self.pull = self.router.hold_pull(self.prefilled_on)
        lease_s = self.router.config.kv_lease_s
        if lease_s is None or not self.handoff.holds_lease:
            return data
        return LeasedBody(data, time.monotonic() + lease_s - margin(lease_s))

    def pulled(self) -> None:
        """The decode leg started, failed or ended: its prefill's KV is no longer awaited."""
        if self.pull is not None:
            self.pull.release()
            self.pull = None

    async def prefill_then_decode(self) -> web.StreamResponse:
        """The protocol's prefill, then decode: one prefill for every decode attempt, or
        (``fresh_kv``) a new one before each, since a decoder that failed may have pulled
        the KV already; block ids are never sent twice."""
        assert self.handoff is not None
        body = self.decode_body()
        if self.handoff.fresh_kv:
            return await self.generate("decode", partial(self.hand_over, body), tried=self.tried)
        return await self.generate("decode", await self.hand_over(body), tried=self.tried)

    async def generate(
        self, stage: str, data: Body | Callable[[], Awaitable[Body]], *,
        tried: set[Instance] | None = None,
    ) -> web.StreamResponse:  # fmt: skip
        """The generating stage (decode or replica): whole answer or a stream.

        ``data`` is the body, or what makes a new one before each attempt.
        """
        cfg = self.router.config
        self.progress.stage = stage
        sent = data if isinstance(data, bytes | LeasedBody) else None
        t0 = time.perf_counter()

        async def renew() -> None:
            nonlocal sent, t0
            assert callable(data)
            sent = await data()
            self.progress.stage = stage
            t0 = time.perf_counter()

        async def exchange(inst: Instance) -> Opened | bytes:
            assert sent is not None
            try:
                if self.ticket.stream:
                    return await self.open_stream(stage, inst, sent)
                try:
                    return (await self.post_whole(stage, inst, sent, cfg.decode_timeout_s)).body
                finally:
                    self.pulled()
            except (*RETRYABLE, ProxyError) as exc:
                if not isinstance(exc, ProxyError) or exc.retryable:
                    self._suspect_prefill("a decode of its KV failed before its first byte")
                raise

        out = await self.router.attempt(
            stage, self.ticket.prefix_key, exchange, tried=tried,
            prepare=None if sent is not None else renew,
        )  # fmt: skip
        if isinstance(out, Opened):
            self.router.metrics.stage.labels(stage).observe(time.perf_counter() - t0)
            return await self.relay(stage, out)
        return self.whole_answer(out)

    def whole_answer(self, body: bytes) -> web.Response:
        """An unstreamed answer to the client (its first byte is now)."""
        self.first_byte_at = time.perf_counter()
        return web.Response(
            body=body, headers={"Content-Type": "application/json", "X-Request-Id": self.rid}
        )

    async def open_stream(self, stage: str, inst: Instance, data: Body) -> Opened:
        """POST, check the status and wait for the first bytes of the stream.

        ``--decode-timeout`` bounds the wait for the first bytes; after them only
        ``--stream-idle-timeout`` applies, so long generations are not cut.
        """
        lease = acquire(inst, self.ticket.prompt_tokens)
        resp: aiohttp.ClientResponse | None = None
        gone = Gone(inst)
        try:
            async with asyncio.timeout(self.router.config.decode_timeout_s) as scope:
                with gone.cutting(scope):
                    resp = await self.router.session.post(
                        inst.url + self.ticket.route, data=data, headers=self.headers,
                        timeout=self._timeout(None),
                    )  # fmt: skip
                    if resp.status != 200:
                        body = await resp.read()
                        ctype = resp.headers.get("Content-Type", "application/json")
                        _check_status(self._who(stage, inst), stage, resp.status, body, ctype)
                    first = await resp.content.readany()
            _check_status(self._who(stage, inst), stage, 200, first, "")
            self.pulled()  # a decoder's first byte comes after it pulled the KV
            return Opened(lease, resp, first, inst)
        except BaseException as exc:
            self.pulled()
            if resp is not None:
                resp.close()
            self.router.release(lease)
            if isinstance(exc, aiohttp.ClientError):
                _raise_if_stale(data, stage)
            if isinstance(exc, TimeoutError):
                gone.reraise()
            raise

    async def relay(self, stage: str, opened: Opened) -> web.StreamResponse:
        """Forward the stream byte for byte; a failure ends it with an error event."""
        if self.tape is not None and stage == "decode":
            return await self._relay_migrating(stage, opened, self.tape)
        resp, lease = opened.resp, opened.lease
        out = web.StreamResponse(
            headers={
                "Content-Type": resp.headers.get("Content-Type", "text/event-stream"),
                "X-Request-Id": self.rid,
            }
        )
        complete = False
        self.progress.stage = "stream"
        try:
            await out.prepare(self.request)
            self.first_byte_at = time.perf_counter()
            with _cuttable(opened.inst, resp.close):
                tail = await self._pump(out, resp, lease, opened.first)
            complete = True
            if b"[DONE]" not in tail:
                await self._end_with_error(out, stage, f"{stage} stream ended without [DONE]")
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, TimeoutError):
            await self._end_with_error(out, stage, f"{stage} stream interrupted")
        except _ClientGone:
            self.router.metrics.disconnects.labels("stream").inc()
            return out
        finally:
            if complete:
                resp.release()
            else:
                resp.close()
            self.router.release(lease)
        with contextlib.suppress(ConnectionResetError):
            await out.write_eof()
        return out

    @staticmethod
    async def _pump(
        out: web.StreamResponse, resp: aiohttp.ClientResponse, lease: Lease, chunk: bytes
    ) -> bytes:
        """Copy chunks until the backend ends; returns the stream's last bytes."""
        tail = b""
        while chunk:
            try:
                await out.write(chunk)
            except ConnectionResetError as exc:
                raise _ClientGone from exc
            lease.grow(chunk.count(b"data:"))
            tail = (tail + chunk)[-32:]
            chunk = await resp.content.readany()
        return tail

    async def _end_with_error(self, out: web.StreamResponse, stage: str, message: str) -> None:
        err = ProxyError("stream_interrupted", stage, message)
        self.router.metrics.errors.labels(stage, err.kind).inc()
        with contextlib.suppress(ConnectionResetError):
            await out.write(err.sse_event())

    # -- migration ---------------------------------------------------------

    def _suspect_prefill(self, reason: str) -> None:
        """The prefill whose KV a failed decode was to read may be gone (mid-transfer)."""
        if self.prefilled_on is not None:
            self.router.health.suspect(self.prefilled_on, reason)

    async def _relay_migrating(self, stage: str, opened: Opened, tape: Tape) -> web.StreamResponse:
        """Relay event by event; a decoder that fails mid-answer is replaced by another
        prefill/decode pair that carries the answer on (``--migration-limit``), as
        :meth:`Tape.carry` says, or the stream is ended as the answer allows."""
        out = web.StreamResponse(
            headers={
                "Content-Type": opened.resp.headers.get("Content-Type", "text/event-stream"),
                "X-Request-Id": self.rid,
            }
        )
        self.progress.stage = "stream"
        limit = self.router.config.migration_limit
        outcomes = self.router.metrics.migrations
        current: Opened | None = opened
        try:
            await out.prepare(self.request)
            self.first_byte_at = time.perf_counter()
            moved = 0
            while current is not None:
                leg, current = current, None  # _pump_leg releases it, whatever happens
                if await self._pump_leg(out, leg, tape):
                    break
                carry = tape.carry(self.model_len)
                if carry.how == "finished":  # nothing after a finish: the answer is whole
                    outcomes.labels("finished").inc()
                    await _write(out, tape.completion())
                    break
                if carry.how == "refused":
                    outcomes.labels("diverged" if tape.diverged else "refused").inc()
                    msg = f"{stage} stream interrupted and not carried on: {carry.reason}"
                    await self._end_with_error(out, stage, msg)
                    break
                while current is None and moved < limit:
                    moved += 1
                    current = await self._migrate(tape, carry)
                if current is None:
                    await self._end_with_error(out, stage, f"{stage} stream interrupted")
        except _ClientGone:
            self.router.metrics.disconnects.labels("stream").inc()
            return out
        except BaseException:
            if current is not None:
                current.resp.close()
                self.router.release(current.lease)
            raise
        with contextlib.suppress(ConnectionResetError):
            await out.write_eof()
        return out

    async def _pump_leg(self, out: web.StreamResponse, opened: Opened, tape: Tape) -> bool:
        """Relay one decoder's events; True when its stream ended with ``[DONE]``."""
        resp, lease, chunk, inst = opened.resp, opened.lease, opened.first, opened.inst
        lease.cuttable(partial(cut_stream, resp))  # a leaving (or lost) decoder migrates it
        if inst is not None and inst.max_model_len is not None and self.model_len is None:
            self.model_len = inst.max_model_len
        try:
            while chunk:
                data = await self._feed(tape, chunk)
                if data:
                    try:
                        await out.write(data)
                    except ConnectionResetError as exc:
                        raise _ClientGone from exc
                lease.grow(chunk.count(b"data:"))
                if tape.stopped:
                    break
                chunk = await resp.content.readany()
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, TimeoutError):
            pass
        finally:
            if tape.done:
                resp.release()
            else:
                resp.close()
            self.router.release(lease)
        if not tape.done and not tape.diverged and inst is not None:
            self.tried.add(inst)
            if inst.drain is None:  # a leaving decoder's cut is its drain's, not a failure
                pool = self.router.pools[inst.role].members
                self.router.health.request_failed(inst, "stream_interrupted", pool)
            if tape.sent.empty:
                self._suspect_prefill("a decode of its KV failed before its first token")
        return tape.done

    async def _feed(self, tape: Tape, chunk: bytes) -> bytes:
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

    async def _migrate(self, tape: Tape, carry: Carry) -> Opened | None:
        """One try at carrying the stream on: a new prefill and another decoder for the
        continuation ``carry`` names; None when it could not start."""
        metrics = self.router.metrics.migrations
        made = tape.continuation(carry, self.model_len)
        if made is None:
            metrics.labels("failed").inc()
            return None
        body = made.body if made.prompt is None else {**made.body, "prompt": Raw(made.prompt)}
        tokens = made.prompt_tokens or self.original.prompt_tokens
        # each leg is a request of its own to the engines (vLLM takes X-Request-Id as its
        # request id: a replay on the same API server while the cut leg is still being
        # aborted there would collide); the client's stream keeps the first leg's id
        self.headers = {**self.headers, "X-Request-Id": f"{self.rid}-leg{tape.legs}"}
        self.ticket = dataclasses.replace(
            self.original, route=made.route, body=body, prompt_tokens=tokens
        )
        if not self.router.pools["decode"].routable(frozenset(self.tried)):
            metrics.labels("failed").inc()  # no decoder left: pin no prefill KV for nobody
            return None
        try:
            data = await self.hand_over(body)
            opened: Opened = await self.router.attempt(
                "decode", self.ticket.prefix_key,
                partial(self.open_stream, "decode", data=data),
                attempts=1, tried=self.tried,
            )  # fmt: skip
        except (ProxyError, Answer):
            metrics.labels("failed").inc()
            return None
        metrics.labels("ok").inc()
        self.progress.stage = "stream"
        return opened


class Gone:
    """Cuts an exchange whose instance the health checker found gone: its timeout scope
    fires at once, and the timeout becomes a connection failure (retried elsewhere)."""

    def __init__(self, inst: Instance) -> None:
        self.inst = inst
        self.cut = False

    @contextlib.contextmanager
    def cutting(self, scope: asyncio.Timeout) -> Iterator[None]:
        def fire() -> None:
            self.cut = True
            scope.reschedule(asyncio.get_running_loop().time())

        with self.inst.cuttable(fire):
            yield

    def reraise(self) -> None:
        """Called on a TimeoutError: a cut one is the instance's death, not a timeout."""
        if self.cut:
            msg = f"{self.inst.name} is gone (its probes fail)"
            raise aiohttp.ServerDisconnectedError(msg) from None


def _cuttable(
    inst: Instance | None, cut: Callable[[], None]
) -> contextlib.AbstractContextManager[None]:
    return inst.cuttable(cut) if inst is not None else contextlib.nullcontext()


async def _write(out: web.StreamResponse, data: bytes) -> None:
    with contextlib.suppress(ConnectionResetError):
        await out.write(data)
