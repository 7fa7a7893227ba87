"""Request migration: a stream whose decoder fails mid-answer is carried on elsewhere.

The relay (:mod:`servekit.proxy.relay`) pumps each decoder's stream through the
stream's :class:`~servekit.proxy.tape.Tape`, which keeps what the client has of
the answer. When a leg breaks (connection reset, an error event, a stream cut by
a drain or a lost node, a stream ending without ``[DONE]``), the relay asks
:meth:`Migration.after` how the stream goes on, as the tape says
(:meth:`Tape.carry`, whose rules are :mod:`servekit.proxy.carry`'s):

- the answer was whole (a ``finish_reason`` went out): the end the client asked
  for (usage, ``[DONE]``), never more text;
- it cannot be carried on unchanged: the error event that says why;
- otherwise a new leg: the continuation through the protocol's handover (a new
  prefill) to another decoder, up to ``--migration-limit`` tries, each its own
  request to the engines (``<id>-leg<n>``); the error event when none started.

The failed leg's decoder is put on the router's one blame path (not chosen again
for this request, counted against it, unless its drain cut the stream), and the
prefill whose KV it was to read is suspect when nothing of the answer came.
A migration calls down: the protocol's handover and the request's exchanges.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

from servekit.proxy.carry import ROUTES
from servekit.proxy.failures import STREAM_INTERRUPTED, Answer, ProxyError, stream_interrupted
from servekit.proxy.parsepool import Raw
from servekit.proxy.protocols.base import Handler
from servekit.proxy.stages import Opened, Stages
from servekit.proxy.tape import Carry, Tape

STAGE = "decode"  # only a decoder's stream migrates (a replica's has no handover)


class Migration:
    """The legs of one stream that may migrate, and the tape they are read through."""

    def __init__(self, handler: Handler, stages: Stages) -> None:
        cfg = stages.router.config
        self.handler = handler
        self.stages = stages
        self.original = stages.ticket  # the client's request (each leg replaces the ticket)
        self.tape = Tape(
            self.original.route, self.original.body, max_event_bytes=cfg.max_answer_bytes
        )
        self.limit = cfg.migration_limit
        self.moved = 0  # new legs tried
        self.model_len: int | None = None  # the first failed leg's decoder's max_model_len

    def decode_body(self) -> dict[str, Any]:
        """The client's body, asking for token ids (the tape reads them)."""
        body = self.original.body
        return body if body.get("return_token_ids") is True else {**body, "return_token_ids": True}

    async def after(self, leg: Opened) -> Opened | bytes | ProxyError:
        """How the stream goes on once ``leg`` ended without ``[DONE]``: the next leg,
        the bytes that end a whole answer, or the error that ends it."""
        inst, tape = leg.inst, self.tape
        if inst is not None and inst.max_model_len is not None and self.model_len is None:
            self.model_len = inst.max_model_len
        if not tape.diverged and inst is not None:
            self.stages.router.blame(inst, STREAM_INTERRUPTED, self.stages.tried)
            if tape.sent.empty:
                self.stages.suspect_prefill("a decode of its KV failed before its first token")
        carry = tape.carry(self.model_len)
        outcomes = self.stages.router.metrics.migrations
        if carry.how == "finished":  # nothing after a finish: the answer is whole
            outcomes.labels("finished").inc()
            return tape.completion()
        if carry.how == "refused":
            outcomes.labels("diverged" if tape.diverged else "refused").inc()
            return stream_interrupted(STAGE, f"interrupted and not carried on: {carry.reason}")
        while self.moved < self.limit:
            self.moved += 1
            opened = await self._new_leg(carry)
            if opened is not None:
                return opened
        return stream_interrupted(STAGE)

    async def _new_leg(self, carry: Carry) -> Opened | None:
        """One try at carrying the stream on: a new prefill and another decoder for the
        continuation ``carry`` names; None when it could not start."""
        stages, router = self.stages, self.stages.router
        outcomes = router.metrics.migrations
        made = self.tape.continuation(carry, self.model_len)
        if made is None:
            outcomes.labels("failed").inc()
            return None
        body = made.body if made.prompt is None else {**made.body, "prompt": Raw(made.prompt)}
        tokens = made.prompt_tokens or self.original.prompt_tokens
        # each leg is a request of its own to the engines (vLLM takes X-Request-Id as its
        # request id: a replay on the same API server while the cut leg is still being
        # aborted there would collide); the client's stream keeps the first leg's id
        stages.name_request(f"{stages.rid}-leg{self.tape.legs}")
        stages.ticket = dataclasses.replace(
            self.original, route=made.route, body=body, prompt_tokens=tokens
        )
        if not await router.routable(STAGE, stages.tried):
            outcomes.labels("failed").inc()  # no decoder left: pin no prefill KV for nobody
            return None
        try:
            data = await self.handler.hand_over(stages, body)
            opened: Opened = await router.attempt(
                STAGE, stages.ticket.prefix_key, partial(stages.open_stream, STAGE, data=data),
                attempts=1, tried=stages.tried,
            )  # fmt: skip
        except (ProxyError, Answer):
            outcomes.labels("failed").inc()
            return None
        outcomes.labels("ok").inc()
        stages.progress.stage = "stream"
        return opened


def migration_for(handler: Handler, stages: Stages) -> Migration | None:
    """The migration of a request whose stream may be carried on (``--migration-limit``,
    a streamed completion or chat with one choice, a protocol that hands over again)."""
    ticket, cfg = stages.ticket, stages.router.config
    if (
        handler.migrates
        and cfg.migration_limit
        and ticket.stream
        and ticket.route in ROUTES
        and ticket.body.get("n", 1) == 1
    ):
        return Migration(handler, stages)
    return None
