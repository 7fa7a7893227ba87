"""What every handoff protocol's handler is: the shared flow, and the words it overrides.

A handler says how its protocol hands the prompt's KV from prefill to decode
(:meth:`Handler.handoff`: the prefill, and the decode request's body); the trip
(servekit.proxy.stages) does the rest for all of them: the retries (the router's
one loop), the KV lease, migration, the relay. A protocol whose flow is not
prefill-then-decode (layerwise) overrides :meth:`Handler.serve`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from aiohttp import web

from servekit.kvprotocol import HANDOFFS
from servekit.proxy.config import ProxyConfig
from servekit.proxy.failures import ProxyError
from servekit.proxy.stages import Trip
from servekit.vocabulary import KvProtocol


class Handler:
    """One protocol's side of a trip; its facts are its row of servekit.kvprotocol.HANDOFFS."""

    protocol: ClassVar[KvProtocol]
    fresh_kv: bool = True  # each decode attempt gets KV of its own prefill
    migrates: bool = True  # a stream cut mid-answer carries on through a new handoff
    one_prompt: bool = False  # the prompts of one request would share the prefill's params

    @property
    def holds_lease(self) -> bool:
        """The prefill keeps the KV for its decoder only until ``--kv-lease`` passes."""
        return HANDOFFS[self.protocol].holds_lease

    async def handoff(self, trip: Trip, body: dict[str, Any]) -> dict[str, Any]:
        """Run the prefill for ``body``; the decode request's body."""
        raise NotImplementedError(f"{self.protocol} has no prefill-first handoff")

    async def serve(self, trip: Trip) -> web.StreamResponse:
        """One client request through this protocol."""
        if self.one_prompt and trip.ticket.prompts > 1:
            # Prompts of one request would share the prefill's remote_block_ids: vLLM asserts.
            msg = "prompt: PD mode serves one prompt per request; send the prompts separately"
            raise ProxyError("bad_request", "proxy", msg)
        return await trip.prefill_then_decode()

    def add_routes(self, app: web.Application, config: ProxyConfig) -> None:
        """The routes this protocol adds to the proxy (none but layerwise's metaserver)."""
