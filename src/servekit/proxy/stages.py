"""One request's exchanges with its engines: a stage's POST on one instance, and what
the request's earlier exchanges left.

The flow (:mod:`servekit.proxy.flow`), the protocol handlers
(:mod:`servekit.proxy.protocols`) and the migration call down into
:class:`Stages`; it calls only the router. Rules kept here:
- a backend 4xx passes through with its status and body (:class:`Answer`);
- a backend 5xx, an empty 200 or a 200 that is not UTF-8 JSON raises an error
  the router's retry loop tries on another instance, and which becomes a 502
  naming the stage when none served; an unstreamed answer over
  ``--max-answer-bytes`` is a 502 at once (the request asked for it, the engine
  is not at fault);
- ``--max-attempts`` bounds the failed prefills of the whole request: the
  prefills its decode retries and migrations run draw on one budget, and a
  prefill that failed the request is not chosen again (:meth:`Stages.prefill_on_any`);
- a stream is opened only up to its first bytes (:meth:`Stages.open_stream`):
  ``--decode-timeout`` bounds the wait for them, after them only
  ``--stream-idle-timeout`` applies, so long generations are not cut;
- a decode body past its KV lease (``--kv-lease``) is refused at write time and
  fails as ``kv_lease_expired``, which the router retries with new KV;
- work in flight on an instance the health checker finds gone is cut
  (:meth:`Instance.cut`, :class:`Gone`): a prefill or a decode's first byte is
  retried elsewhere rather than waiting out the timeouts;
- a prefill's KV is held (:class:`~servekit.proxy.instances.Hold`) until its
  decode leg started, failed or ended (:meth:`Stages.pulled`);
- every lease is released in a ``finally``, and a cancelled handler (client
  disconnect) closes the backend connection so the engine aborts the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import aiohttp

from servekit.proxy.bodies import parse_answer, read_answer
from servekit.proxy.budget import refund
from servekit.proxy.failures import Answer, ProxyError
from servekit.proxy.instances import Hold, Instance, Lease, acquire
from servekit.proxy.lease import LeasedBody
from servekit.proxy.parsepool import encode_body
from servekit.proxy.payloads import kv_params_of, prefill_payload
from servekit.proxy.requests import Ticket
from servekit.proxy.router import Router

Body = bytes | LeasedBody  # a body a decode request sends (leased: refused past the KV lease)
PREFILL_READS = ("kv_transfer_params",)  # all the proxy reads of a prefill's answer


class Progress:
    """Where a request stands (what a client disconnect interrupted), and when its
    client got the first byte (its TTFT)."""

    def __init__(self) -> None:
        self.stage = "proxy"
        self.first_byte_at: float | None = None


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


def _raise_if_stale(data: Body, stage: str) -> None:
    """A request that failed because its body outlived the KV lease (nothing was sent)."""
    if isinstance(data, LeasedBody) and data.stale:
        msg = "the prefill's KV lease (--kv-lease) passed before the decode request was sent"
        raise ProxyError("kv_lease_expired", stage, msg) from None


@contextlib.contextmanager
def _failed_post(data: Body, stage: str, gone: Gone) -> Iterator[None]:
    """What a failed POST to an engine means, worded once for both exchanges (a whole
    answer, a stream's opening): a body that outlived its KV lease is that (nothing was
    sent, nobody to blame), and a timeout that was the instance's cut is its death."""
    try:
        yield
    except aiohttp.ClientError:
        _raise_if_stale(data, stage)
        raise
    except TimeoutError:
        gone.reraise()
        raise


class Stages:
    """The exchanges of one client request with its engines.

    ``ticket`` is the request as the engines get it (a migration's new leg
    replaces it), ``rid`` the id its client knows it by.
    """

    def __init__(self, router: Router, ticket: Ticket, progress: Progress, rid: str) -> None:
        self.router = router
        self.ticket = ticket
        self.progress = progress
        self.rid = rid
        self.headers = {"Content-Type": "application/json", "X-Request-Id": rid, **router.headers}
        self.prefilled_on: Instance | None = None  # the prefill that served last
        self.prefills_tried: set[Instance] = set()  # prefills that failed this request
        self.tried: set[Instance] = set()  # decoders (or replicas) that failed it
        self.pull: Hold | None = None  # the prefill kept until its KV is pulled (drain)

    def name_request(self, rid: str) -> None:
        """The id the engines know the next exchanges by (vLLM takes ``X-Request-Id`` as
        its request id: a migration's legs and a layerwise attempt each need their own)."""
        self.headers = {**self.headers, "X-Request-Id": rid}

    def _who(self, stage: str, inst: Instance) -> str:
        return f"{stage} {self.router.describe(inst)}"

    def _timeout(self, total: float | None) -> aiohttp.ClientTimeout:
        cfg = self.router.config
        return aiohttp.ClientTimeout(
            total=total, sock_connect=cfg.connect_timeout_s, sock_read=cfg.stream_idle_timeout_s
        )

    # -- one exchange on one instance ----------------------------------------

    async def post_whole(
        self, stage: str, inst: Instance, data: Body, total: float, keys: tuple[str, ...] = ()
    ) -> Whole:
        """POST and read the whole answer (capped) and its members ``keys``; non-200 and
        non-JSON answers raise. A big answer is parsed in a parse worker."""
        lease = acquire(inst, self.ticket.prompt_tokens)
        who = self._who(stage, inst)
        gone = Gone(inst)
        try:
            with _failed_post(data, stage, gone):
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
        finally:
            self.router.release(lease)

    async def open_stream(self, stage: str, inst: Instance, data: Body) -> Opened:
        """POST, check the status and wait for the first bytes of the stream.

        ``--decode-timeout`` bounds the wait for the first bytes; after them only
        ``--stream-idle-timeout`` applies, so long generations are not cut.
        """
        lease = acquire(inst, self.ticket.prompt_tokens)
        resp: aiohttp.ClientResponse | None = None
        gone = Gone(inst)
        try:
            with _failed_post(data, stage, gone):
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
        except BaseException:
            self.pulled()
            if resp is not None:
                resp.close()
            self.router.release(lease)
            raise

    async def decode(self, stage: str, inst: Instance, data: Body) -> Opened | bytes:
        """The generating exchange (decode or replica): a stream opened (its first bytes
        in) or the whole answer; either way its prefill's KV is no longer awaited."""
        if self.ticket.stream:
            return await self.open_stream(stage, inst, data)
        try:
            return (
                await self.post_whole(stage, inst, data, self.router.config.decode_timeout_s)
            ).body
        finally:
            self.pulled()

    # -- the prefill, on any instance ----------------------------------------

    async def prefill(
        self, with_kv_params: bool, kv_params: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """Run the prefill copy of the request; its kv_transfer_params (None if absent).

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

    # -- the prefilled KV ------------------------------------------------------

    def hold_pull(self) -> None:
        """Keep the prefill that served until a decoder pulled its KV (a drain waits)."""
        self.pulled()
        if self.prefilled_on is not None:
            self.pull = self.router.hold_pull(self.prefilled_on)

    def pulled(self) -> None:
        """The decode leg started, failed or ended: its prefill's KV is no longer awaited."""
        if self.pull is not None:
            self.pull.release()
            self.pull = None

    def suspect_prefill(self, reason: str) -> None:
        """The prefill whose KV a failed decode was to read may be gone (mid-transfer):
        the router suspects it, so a retry's prefill runs elsewhere unless a probe finds
        it alive."""
        if self.prefilled_on is not None:
            self.router.suspect(self.prefilled_on, reason)


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
