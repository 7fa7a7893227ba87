"""What every handoff protocol's handler is: the words it overrides, and the handover.

A handler says how its protocol hands the prompt's KV from prefill to decode
(:meth:`Handler.handoff`: the prefill, and the decode request's body);
:meth:`Handler.hand_over` adds what all of them share (the KV lease, the prefill
held until its KV is pulled). A protocol whose decoder goes first (layerwise)
runs its whole exchange instead (:meth:`Handler.decode_first`). A handler is
called by the flow (:mod:`servekit.proxy.flow`) and by the migration, and calls
down only: the request's exchanges (:class:`~servekit.proxy.stages.Stages`).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from aiohttp import web

from servekit.kvprotocol import HANDOFFS
from servekit.proxy.config import ProxyConfig
from servekit.proxy.failures import ProxyError
from servekit.proxy.lease import LeasedBody, margin
from servekit.proxy.parsepool import encode_body
from servekit.proxy.requests import Ticket
from servekit.proxy.stages import Body, Opened, Stages
from servekit.vocabulary import KvProtocol


class Handler:
    """One protocol's side of a request; its facts are its row of servekit.kvprotocol.HANDOFFS."""

    protocol: ClassVar[KvProtocol]
    fresh_kv: bool = True  # each decode attempt gets KV of its own prefill
    migrates: bool = True  # a stream cut mid-answer carries on through a new handoff
    one_prompt: bool = False  # the prompts of one request would share the prefill's params

    @property
    def holds_lease(self) -> bool:
        """The prefill keeps the KV for its decoder only until ``--kv-lease`` passes."""
        return HANDOFFS[self.protocol].holds_lease

    @property
    def decoder_first(self) -> bool:
        """The decoder is asked first and calls the proxy back (:meth:`decode_first`)."""
        return HANDOFFS[self.protocol].decoder_first

    def check(self, ticket: Ticket) -> None:
        """Refuse a request this protocol cannot serve, before anything is sent."""
        if self.one_prompt and ticket.prompts > 1:
            # Prompts of one request would share the prefill's remote_block_ids: vLLM asserts.
            msg = "prompt: PD mode serves one prompt per request; send the prompts separately"
            raise ProxyError("bad_request", "proxy", msg)

    async def handoff(self, stages: Stages, body: dict[str, Any]) -> dict[str, Any]:
        """Run the prefill for ``body``; the decode request's body."""
        raise NotImplementedError(f"{self.protocol} has no prefill-first handoff")

    async def hand_over(self, stages: Stages, body: dict[str, Any]) -> Body:
        """This protocol's prefill for ``body``, and the decode request's body it makes.

        Where the prefill keeps the KV only for ``--kv-lease``, the prefill is held
        until its KV is pulled, the lease starts when it answered and the body refuses
        to be written once the lease passed.
        """
        data = encode_body(await self.handoff(stages, body))
        if not self.holds_lease:
            return data
        stages.hold_pull()
        lease_s = stages.router.config.kv_lease_s
        if lease_s is None:
            return data
        return LeasedBody(data, time.monotonic() + lease_s - margin(lease_s))

    async def decode_first(self, stages: Stages, request: web.Request) -> Opened | bytes:
        """The whole exchange of a protocol whose decoder goes first: a stream opened or
        the whole answer."""
        raise NotImplementedError(f"{self.protocol} hands the KV over prefill first")

    def add_routes(self, app: web.Application, config: ProxyConfig) -> None:
        """The routes this protocol adds to the proxy (none but layerwise's metaserver)."""
