"""The flow of one client request: its stages in order, then its answer.

- replica mode: one generating stage, the client's body as it came;
- a prefill-first protocol (pull, bootstrap, prompt-keyed): the handler's
  handover (the prefill, and the decode request's body it makes), then the
  decode stage: one handover for every decode attempt, or (``fresh_kv``) a new
  one before each, since a decoder that failed may have pulled the KV already
  (block ids are never sent twice);
- a decoder-first protocol (layerwise): the handler's own exchange.

The generating stage is tried up to ``--max-attempts`` times before its first
byte (the router's one retry loop); a decode that fails before it may be its
KV's fault (the prefill that made it is gone, mid-transfer), so that prefill is
suspect too and the retry's new prefill runs elsewhere unless a probe finds it
alive. A stream then goes to the relay, with a migration where it may be carried
on (:mod:`servekit.proxy.migration`); a whole answer goes back as it is. The
flow calls down only: the protocol's handler, the request's exchanges, the relay.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial

from aiohttp import web

from servekit.proxy.failures import ProxyError
from servekit.proxy.instances import Instance
from servekit.proxy.lease import LeasedBody
from servekit.proxy.migration import Migration, migration_for
from servekit.proxy.protocols.base import Handler
from servekit.proxy.relay import Relay
from servekit.proxy.requests import Ticket
from servekit.proxy.router import RETRYABLE, Router
from servekit.proxy.stages import Body, Opened, Progress, Stages


async def serve(
    request: web.Request, router: Router, ticket: Ticket, progress: Progress,
    handler: Handler | None,
) -> web.StreamResponse:  # fmt: skip
    """One client request through its stages (``handler`` None: replica mode)."""
    stages = Stages(
        router, ticket, progress, request.headers.get("X-Request-Id") or uuid.uuid4().hex
    )
    migration: Migration | None = None
    stage = "replica" if handler is None else "decode"
    try:
        if handler is None:
            out = await generate(stages, stage, ticket.raw)
        elif handler.decoder_first:
            handler.check(ticket)
            out = await handler.decode_first(stages, request)
        else:
            handler.check(ticket)
            migration = migration_for(handler, stages)
            body = ticket.body if migration is None else migration.decode_body()
            hand_over = partial(handler.hand_over, stages, body)
            if not handler.fresh_kv and not await router.routable(stage, stages.tried):
                raise router.none_routable(stage)  # no prefill KV pinned for nobody
            out = await generate(
                stages, stage, hand_over if handler.fresh_kv else await hand_over()
            )
        if isinstance(out, Opened):
            return await Relay(request, stages, stage, migration).stream(out)
        progress.first_byte_at = time.perf_counter()
        return web.Response(
            body=out, headers={"Content-Type": "application/json", "X-Request-Id": stages.rid}
        )
    finally:
        stages.pulled()  # a prefill kept for a decode that never came is let go


async def generate(
    stages: Stages, stage: str, data: Body | Callable[[], Awaitable[Body]]
) -> Opened | bytes:
    """The generating stage (decode or replica), retried: a stream opened (its first
    bytes in) or the whole answer. ``data`` is the body, or what makes a new one
    (a handover) before each attempt."""
    router = stages.router
    stages.progress.stage = stage
    sent = data if isinstance(data, bytes | LeasedBody) else None
    t0 = time.perf_counter()

    async def renew() -> None:
        nonlocal sent, t0
        assert callable(data)
        sent = await data()
        stages.progress.stage = stage
        t0 = time.perf_counter()

    async def exchange(inst: Instance) -> Opened | bytes:
        assert sent is not None
        try:
            return await stages.decode(stage, inst, sent)
        except (*RETRYABLE, ProxyError) as exc:
            if not isinstance(exc, ProxyError) or exc.retryable:
                stages.suspect_prefill("a decode of its KV failed before its first byte")
            raise

    out = await router.attempt(
        stage, stages.ticket.prefix_key, exchange, tried=stages.tried,
        prepare=None if sent is not None else renew,
    )  # fmt: skip
    if isinstance(out, Opened):
        router.metrics.stage.labels(stage).observe(time.perf_counter() - t0)
    return out
