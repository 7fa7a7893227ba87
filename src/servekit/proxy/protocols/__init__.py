"""One handler per KV handoff protocol, chosen by the proxy mode from servekit.kvprotocol.

``pull`` (mode ``pd``), ``bootstrap``, ``prompt_keyed`` and ``layerwise``: each
module says how its protocol hands the KV over; what they share is written once:
the KV lease in :mod:`~servekit.proxy.protocols.base`, the exchanges in
:mod:`servekit.proxy.stages`, the retry loop and routing in the router. The flow
(:mod:`servekit.proxy.flow`) and the migration call a handler; a handler calls
only the stages below it.
"""

from __future__ import annotations

from servekit.kvprotocol import protocol_of_mode
from servekit.proxy.protocols.base import Handler
from servekit.proxy.protocols.bootstrap import Bootstrap
from servekit.proxy.protocols.layerwise import Layerwise
from servekit.proxy.protocols.prompt_keyed import PromptKeyed
from servekit.proxy.protocols.pull import Pull
from servekit.vocabulary import KvProtocol

HANDLERS: dict[KvProtocol, Handler] = {
    h.protocol: h for h in (Pull(), Bootstrap(), PromptKeyed(), Layerwise())
}


def handler_for(mode: str) -> Handler | None:
    """The handler of the proxy mode ``mode`` (None: replica mode, no handoff)."""
    protocol = protocol_of_mode(mode)
    return None if protocol is None else HANDLERS[protocol]
